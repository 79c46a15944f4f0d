//! What a piece of RDMA work runs against: the function's memory, as the device may read
//! and write it (docs/hardware-interface.md §5), and its doorbell BAR (§4).

use vm_memory::GuestMemoryMmap;

use crate::doorbell::DoorbellBar;

/// The DMA views and doorbells a piece of RDMA work runs against.
pub struct Env<'a> {
    /// Memory the device may read (a snapshot: a train's payload may hold on to it, see
    /// [`crate::fabric::held`]).
    pub r: &'a crate::dma::MemorySnapshot,
    /// Memory the device may write.
    pub w: &'a GuestMemoryMmap,
    /// The function's doorbell BAR.
    pub doorbells: &'a DoorbellBar,
}
