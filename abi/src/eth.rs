//! Ethernet queues (ABI 1.7, [`crate::regs::CAP_ETH`]; datasheet §15).
//!
//! Every function is an Ethernet NIC besides an RDMA one: a driver that creates a send
//! queue and a receive queue and enables reception (`SET_ETH` with [`RX_ENABLE`]) gets
//! every frame for the function that is not RoCEv2, and sends whole Ethernet frames of its
//! own. RoCEv2 frames (IPv4, UDP destination port 4791) stay with the RDMA engine.
//!
//! **Rings.** A queue is a ring of `entries` [`EthDesc`]s (16 bytes each) in driver memory,
//! named by a page list, with a doorbell slot: the u32 at +0 is the count of descriptors
//! posted in all (free-running), the u32 at +4 the **arm word** ([`arm_word`]). The driver
//! fills descriptors at `posted % entries`, stores the new count, sets the slot's bit in
//! `RUNG_BITMAP` and follows the notification protocol, as for an RDMA queue (§7.5). The
//! device takes descriptors in order and writes each one back when it is done with it:
//! `len` (receive: the frame's length) and then, last, `status` with [`DESC_DONE`]. A
//! driver clears `status` when it posts a descriptor.
//!
//! **A frame to send** is one descriptor, or several: every descriptor but the last has
//! [`TX_MORE`] set, at most [`TX_MAX_DESCS`] in all. **A receive buffer** is one
//! descriptor whose `len` is the buffer's size; a frame longer than the buffer is dropped
//! (`rx_too_long`). Each frame takes one buffer.
//!
//! **Interrupts.** A queue's MSI-X vector fires when the device completes descriptors while
//! the queue is armed, and then not again until the driver arms it anew: the NAPI model.
//! Arming writes the arm word with a new sequence number and the number of completions the
//! driver has seen, then follows the notification protocol (full fence, kick if
//! `NOTIFY_REQUEST`); if the device completed more than that, the vector fires at once, so
//! no completion is left without an interrupt. `moderation_usecs` holds an interrupt back
//! until that long after the queue's last one.

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use crate::verbs::{DoorbellSlot, PageList};

/// [`CreateEthQueueReq::kind`] and [`EthQueueReq::kind`]: a send queue.
pub const KIND_TX: u8 = 0;
/// [`CreateEthQueueReq::kind`] and [`EthQueueReq::kind`]: a receive queue.
pub const KIND_RX: u8 = 1;

/// Most send queues a function has.
pub const MAX_TX_QUEUES: u32 = 4;
/// Most receive queues a function has: one (there is no receive-side scaling).
pub const MAX_RX_QUEUES: u32 = 1;
/// Fewest entries of a queue.
pub const MIN_ENTRIES: u32 = 8;
/// Most entries of a queue.
pub const MAX_ENTRIES: u32 = 4096;
/// Largest `moderation_usecs`.
pub const MAX_MODERATION_USECS: u32 = 100_000;

/// Smallest MTU: IPv4's minimum.
pub const MIN_MTU: u32 = 68;
/// Largest MTU: a jumbo frame.
pub const MAX_MTU: u32 = 9000;
/// The MTU after reset.
pub const DEFAULT_MTU: u32 = 1500;
/// Bytes of an Ethernet header (no FCS: frames carry none).
pub const ETH_HLEN: u32 = 14;
/// Bytes an 802.1Q tag adds to a frame.
pub const VLAN_HLEN: u32 = 4;
/// Shortest frame a driver may send: an Ethernet header.
pub const MIN_FRAME: u32 = ETH_HLEN;

/// The longest frame a function with MTU `mtu` sends or receives: the MTU, its Ethernet
/// header, and room for one 802.1Q tag.
pub const fn max_frame(mtu: u32) -> u32 {
    mtu + ETH_HLEN + VLAN_HLEN
}

/// Most descriptors of one frame to send.
pub const TX_MAX_DESCS: u32 = 18;

/// [`EthDesc::flags`] of a send descriptor: the frame goes on in the next descriptor.
pub const TX_MORE: u16 = 1 << 0;

/// [`EthDesc::status`]: the device is done with the descriptor. Written last.
pub const DESC_DONE: u16 = 1 << 0;
/// Bits 15:8 of [`EthDesc::status`]: what went wrong ([`desc_error`]), 0 for nothing.
pub const DESC_ERROR_SHIFT: u32 = 8;

/// Why a send descriptor was not sent, in bits 15:8 of its `status`. Each is also counted
/// ([`EthCounters`]). Receive descriptors never carry one: a frame that cannot be received
/// is dropped before it takes a buffer.
pub mod desc_error {
    /// Sent (or, on a receive descriptor, a frame is in the buffer).
    pub const NONE: u8 = 0;
    /// The frame is shorter than [`super::MIN_FRAME`], longer than
    /// [`super::max_frame`]`(mtu)`, of more than [`super::TX_MAX_DESCS`] descriptors, or a
    /// descriptor has `len` 0 or reserved bits set.
    pub const MALFORMED: u8 = 1;
    /// A buffer is not in memory the function mapped.
    pub const DMA: u8 = 2;
    /// The source MAC is not the function's, and the PF checks VF source addresses
    /// ([`super::VF_SPOOF_CHECK`]).
    pub const SPOOFED: u8 = 3;
    /// The link is down ([`crate::admin::SetLinkReq`]).
    pub const LINK_DOWN: u8 = 4;
}

/// The status a descriptor gets: [`DESC_DONE`] and `error` ([`desc_error`]).
pub const fn desc_status(error: u8) -> u16 {
    DESC_DONE | (error as u16) << DESC_ERROR_SHIFT
}

/// A descriptor of a send or receive ring (16 bytes).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct EthDesc {
    /// Device address of the buffer.
    pub addr: u64,
    /// Send: bytes of the frame in this buffer, at least 1. Receive: the driver writes the
    /// buffer's size; the device writes the received frame's length.
    pub len: u32,
    /// Send: [`TX_MORE`]; other bits must be 0. Receive: ignored (write 0).
    pub flags: u16,
    /// Written by the device, last: [`DESC_DONE`], and an error in bits 15:8. The driver
    /// writes 0 when it posts the descriptor.
    pub status: u16,
}

/// The arm word, the u32 at +4 of a queue's doorbell slot: bits 31:16 an arm sequence
/// number, which the driver changes (increments) each time it arms the queue; bits 15:0
/// the low 16 bits of the number of completed descriptors the driver has seen.
pub const fn arm_word(sequence: u16, seen: u32) -> u32 {
    (sequence as u32) << 16 | (seen & 0xffff)
}

/// `CREATE_ETH_QUEUE` (0x0180) request.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct CreateEthQueueReq {
    /// [`KIND_TX`] or [`KIND_RX`].
    pub kind: u8,
    /// Must be 0.
    pub reserved0: u8,
    /// MSI-X vector for the queue's completions, or `NO_VECTOR` (0xFFFF). Send and
    /// receive queues may share one.
    pub msix_vector: u16,
    /// Descriptors: a power of two from [`MIN_ENTRIES`] to [`MAX_ENTRIES`].
    pub entries: u32,
    /// Doorbell page for the queue's slot.
    pub doorbell_page: u32,
    /// Least time between two interrupts of the queue, in µs, up to
    /// [`MAX_MODERATION_USECS`]; 0 for none.
    pub moderation_usecs: u32,
    /// The ring: `entries * 16` bytes.
    pub ring: PageList,
}

/// `CREATE_ETH_QUEUE` response.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct CreateEthQueueResp {
    /// The queue's number among the queues of its kind: 0 to [`MAX_TX_QUEUES`] - 1 or
    /// [`MAX_RX_QUEUES`] - 1.
    pub queue: u32,
    /// Must be ignored.
    pub reserved: u32,
    /// The queue's doorbell slot: posted count at +0, arm word at +4.
    pub doorbell: DoorbellSlot,
}

/// `DESTROY_ETH_QUEUE` (0x0181) and `QUERY_ETH_QUEUE` (0x0184) request: one queue.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct EthQueueReq {
    /// [`KIND_TX`] or [`KIND_RX`].
    pub kind: u8,
    /// Must be 0.
    pub reserved0: [u8; 3],
    /// The queue's number.
    pub queue: u32,
}

/// [`SetEthReq::rx_mode`]: deliver frames to the receive queue, and let the operating
/// system answer ARP for the function. Clear: rnicd answers ARP for the function, and
/// frames that are not RoCEv2 are dropped (`rx_disabled`).
pub const RX_ENABLE: u32 = 1 << 0;
/// [`SetEthReq::rx_mode`]: every frame the switch carries, whatever its destination MAC.
/// VFs get it only while trusted ([`VF_TRUST`]).
pub const RX_PROMISC: u32 = 1 << 1;
/// [`SetEthReq::rx_mode`]: every multicast frame. VFs get it only while trusted.
pub const RX_ALLMULTI: u32 = 1 << 2;

/// Most multicast addresses in a [`SetEthReq`]; a driver with more asks for
/// [`RX_ALLMULTI`].
pub const MAX_MULTICAST: u32 = 64;

/// `SET_ETH` (0x0182) request: the function's MTU, receive mode and multicast filter,
/// followed by `mc_count` [`MacEntry`]s.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct SetEthReq {
    /// MTU, [`MIN_MTU`] to [`MAX_MTU`]: the longest frame sent or received is
    /// [`max_frame`]`(mtu)`.
    pub mtu: u32,
    /// [`RX_ENABLE`], [`RX_PROMISC`], [`RX_ALLMULTI`]; other bits must be 0.
    pub rx_mode: u32,
    /// MSI-X vector the device signals when the function's link state or MAC changes, or
    /// `NO_VECTOR` (0xFFFF).
    pub event_vector: u16,
    /// Must be 0.
    pub reserved: u16,
    /// Multicast addresses that follow, at most [`MAX_MULTICAST`].
    pub mc_count: u32,
}

/// A multicast address of a [`SetEthReq`].
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct MacEntry {
    /// A multicast MAC (bit 0 of its first byte set).
    pub mac: [u8; 6],
    /// Must be 0.
    pub reserved: u16,
}

/// [`QueryEthResp::flags`]: the link is up.
pub const ETH_LINK_UP: u32 = 1 << 0;
/// [`QueryEthResp::flags`]: the PF trusts the function ([`VF_TRUST`]; always set on the
/// PF).
pub const ETH_TRUSTED: u32 = 1 << 1;
/// [`QueryEthResp::flags`]: the PF checks the function's source MACs
/// ([`VF_SPOOF_CHECK`]; never set on the PF).
pub const ETH_SPOOF_CHECKED: u32 = 1 << 2;

/// A function's Ethernet counters since its last reset. Frames count once each, bytes
/// are whole frames' without FCS.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct EthCounters {
    /// Frames sent.
    pub tx_frames: u64,
    /// Bytes sent.
    pub tx_bytes: u64,
    /// Frames not sent: [`desc_error::MALFORMED`].
    pub tx_malformed: u64,
    /// Frames not sent: [`desc_error::DMA`].
    pub tx_dma_errors: u64,
    /// Frames not sent: [`desc_error::SPOOFED`].
    pub tx_spoofed: u64,
    /// Frames not sent: [`desc_error::LINK_DOWN`].
    pub tx_link_down: u64,
    /// Frames received into a buffer.
    pub rx_frames: u64,
    /// Bytes received.
    pub rx_bytes: u64,
    /// Frames dropped: the receive queue had no buffer posted.
    pub rx_no_buffer: u64,
    /// Frames dropped: longer than [`max_frame`]`(mtu)` or than the buffer.
    pub rx_too_long: u64,
    /// Frames dropped: not for the function's receive mode (another MAC, a multicast
    /// group it did not join).
    pub rx_filtered: u64,
    /// Frames dropped: not RoCEv2 and reception not enabled, or no receive queue.
    pub rx_disabled: u64,
    /// Frames dropped: the buffer, or the ring, is not in memory the function mapped.
    pub rx_dma_errors: u64,
    /// Frames dropped: the link is down.
    pub rx_link_down: u64,
    /// Descriptors of a ring that could not be read (the ring is not in mapped memory);
    /// the queue stops until it is destroyed.
    pub ring_errors: u64,
    /// Interrupts signalled for the function's Ethernet queues.
    pub interrupts: u64,
}

/// `QUERY_ETH` (0x0183) response: the function's Ethernet state and counters.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct QueryEthResp {
    /// The function's MAC: what it sends from and receives at.
    pub mac: [u8; 6],
    /// Must be ignored.
    pub reserved: u16,
    /// [`ETH_LINK_UP`], [`ETH_TRUSTED`], [`ETH_SPOOF_CHECKED`].
    pub flags: u32,
    /// The MTU.
    pub mtu: u32,
    /// The receive mode in effect: `SET_ETH`'s, less what an untrusted VF may not have.
    pub rx_mode: u32,
    /// Largest MTU, [`MAX_MTU`].
    pub max_mtu: u32,
    /// Counters since the function's last reset.
    pub counters: EthCounters,
}

/// `QUERY_ETH_QUEUE` (0x0184) response: one queue's counters.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct EthQueueStats {
    /// Frames sent or received through the queue.
    pub frames: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Frames of the queue that went wrong: send descriptors with an error, or, on the
    /// receive queue, frames dropped for want of a buffer or too long for one.
    pub errors: u64,
    /// Interrupts the queue signalled.
    pub interrupts: u64,
    /// Descriptors the device completed, in all (free-running).
    pub completed: u32,
    /// Descriptors the driver posted, as the device last read them.
    pub posted: u32,
}

/// [`SetVfEthReq::flags`]: drop frames a VF sends from any source MAC but its own
/// (`ip link set PF vf N spoofchk on`); VFs start with it set.
pub const VF_SPOOF_CHECK: u32 = 1 << 0;
/// [`SetVfEthReq::flags`]: trust the VF (`ip link set PF vf N trust on`): it may receive
/// promiscuously or all multicast.
pub const VF_TRUST: u32 = 1 << 1;

/// Admin `SET_VF_ETH` (0x1011) request: a VF's spoof check and trust. The PF is always
/// trusted and never checked.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct SetVfEthReq {
    /// Member id of a VF.
    pub member: u32,
    /// [`VF_SPOOF_CHECK`], [`VF_TRUST`]; other bits must be 0.
    pub flags: u32,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts_are_what_the_datasheet_says() {
        assert_eq!(size_of::<EthDesc>(), 16);
        assert_eq!(size_of::<CreateEthQueueReq>(), 32);
        assert_eq!(size_of::<CreateEthQueueResp>(), 16);
        assert_eq!(size_of::<EthQueueReq>(), 8);
        assert_eq!(size_of::<SetEthReq>(), 16);
        assert_eq!(size_of::<MacEntry>(), 8);
        assert_eq!(size_of::<EthCounters>(), 128);
        assert_eq!(size_of::<QueryEthResp>(), 24 + 128);
        assert_eq!(size_of::<EthQueueStats>(), 40);
        assert_eq!(size_of::<SetVfEthReq>(), 8);
    }

    #[test]
    fn arm_words_and_statuses_pack_as_documented() {
        assert_eq!(arm_word(3, 0x1_0005), 0x0003_0005);
        assert_eq!(desc_status(desc_error::SPOOFED), 0x0301);
        assert_eq!(max_frame(1500), 1518);
    }
}
