//! Memory keys (docs/hardware-interface.md §7.3, §7.4): what a work request or a peer
//! names memory by, and the check every access makes.
//!
//! - [`mr`]: the function's table of keys: memory regions, and keys reserved for a
//!   registration to come; [`mr::MrTable::check`] resolves any key to device memory;
//! - [`indirect`]: indirect and pattern keys, which map their range onto regions;
//! - [`mw`]: memory windows, rkeys bound to a range of a region by work requests;
//! - [`fast_reg`]: the kernel's keys: the DMA key, and MRs registered by work requests;
//! - [`pages`]: the page lists through which the device reaches driver memory (regions,
//!   rings).
//!
//! Here are what every kind of key shares: the access asked for ([`Access`]), why one
//! is refused ([`KeyError`]) and the checks of a key's own flags ([`admits`]).

pub mod fast_reg;
pub mod indirect;
pub mod mr;
pub mod mw;
pub mod pages;

use rnic_abi::verbs::{
    ACCESS_LOCAL_WRITE, ACCESS_REMOTE_ATOMIC, ACCESS_REMOTE_READ, ACCESS_REMOTE_WRITE,
};

/// What an access wants to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Read local memory (send data, WRITE source): any valid MR allows it.
    LocalRead,
    /// Write local memory (receive, READ response, atomic result).
    LocalWrite,
    /// A remote RDMA WRITE.
    RemoteWrite,
    /// A remote RDMA READ.
    RemoteRead,
    /// The responses of a remote READ the responder accepted (a [`Access::RemoteRead`]
    /// check passed for it), sent or resent: what a consumed one-shot READ grant still
    /// allows.
    ReadResponse,
    /// A remote atomic.
    RemoteAtomic,
    /// A remote FLUSH needing these `ACCESS_FLUSH_*` flags (of its placement type).
    Flush(u32),
}

impl Access {
    fn required_flag(self) -> u32 {
        match self {
            Access::LocalRead => 0,
            Access::LocalWrite => ACCESS_LOCAL_WRITE,
            Access::RemoteWrite => ACCESS_REMOTE_WRITE,
            Access::RemoteRead | Access::ReadResponse => ACCESS_REMOTE_READ,
            Access::RemoteAtomic => ACCESS_REMOTE_ATOMIC,
            Access::Flush(flags) => flags,
        }
    }
}

/// Why an access was refused. All of these look alike to a remote peer (a remote access
/// error): a forged key is indistinguishable from a missing one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyError {
    /// No region has this key (never registered, deregistered, or another function's).
    NoSuchKey,
    /// The region was invalidated.
    Invalidated,
    /// The region belongs to another protection domain.
    OtherPd,
    /// The region does not allow this access.
    NoAccess,
    /// The range is not inside the region.
    OutOfRange,
    /// The key was reserved for a registration through a control queue that has not run
    /// yet ([`crate::rdma::ctrlq`]): a local access waits for it.
    Pending,
    /// A type 2 memory window bound through another QP than the one the request
    /// arrived on ([`mw`]).
    OtherQp,
}

/// Whether `access` is a valid set of `ACCESS_*` flags for a key that takes the flags of
/// `known`: none other, and (as ibverbs) remote write or atomic access only with local
/// write.
pub fn valid_access(access: u32, known: u32) -> bool {
    let needs_local_write = access & (ACCESS_REMOTE_WRITE | ACCESS_REMOTE_ATOMIC) != 0;
    access & !known == 0 && (!needs_local_write || access & ACCESS_LOCAL_WRITE != 0)
}

/// Whether a key that is `valid`, of `key_pdn` with `key_access` flags, lets a QP of
/// `pdn` do `access`.
pub fn admits(
    valid: bool,
    key_pdn: u32,
    key_access: u32,
    pdn: u32,
    access: Access,
) -> Result<(), KeyError> {
    if !valid {
        return Err(KeyError::Invalidated);
    }
    if key_pdn != pdn {
        return Err(KeyError::OtherPd);
    }
    if key_access & access.required_flag() != access.required_flag() {
        return Err(KeyError::NoAccess);
    }
    Ok(())
}
