//! The `vfio` target's input: what a vfio-user client asks of rnicd's glue
//! (`rnic_device::vfio::Backend`, the `Handler` rnicd's vfio-user server calls for each
//! message it checked) for function B while its objects are live: DMA maps (overlapping, out of
//! range, without a descriptor, with a descriptor shorter than the range, aliasing the
//! guest RAM), unmaps (partial, unknown, all), region reads and writes of any region,
//! offset and length, `SET_IRQS` of any index, flags, range and number of eventfds,
//! device resets, and engine passes in between.
//!
//! Each record ([`crate::input::records`]) is one request: its flags byte says which
//! ([`Request`]), its bytes are the arguments, little-endian, missing ones zero.

use std::fs::File;
use std::os::fd::FromRawFd;

use rnic_abi::vfio_user::{DmaMap, DmaUnmap, SetIrqs};
use rnic_device::vfio::server::Handler;
use rnic_device::vfio::Backend;

use crate::input::{Args, Record};
use crate::transport::{IOVA_BASE, RAM_SIZE};
use crate::world::{World, B};

/// One client request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Request {
    /// `DMA_MAP`.
    DmaMap,
    /// `DMA_UNMAP`.
    DmaUnmap,
    /// `REGION_READ`.
    RegionRead,
    /// `REGION_WRITE`.
    RegionWrite,
    /// `SET_IRQS`.
    SetIrqs,
    /// `DEVICE_RESET`.
    Reset,
    /// One engine pass (not a message: time passing between them).
    Step,
}

impl Request {
    /// The request a record's flags byte names.
    pub fn of(flags: u8) -> Self {
        match flags % 7 {
            0 => Request::DmaMap,
            1 => Request::DmaUnmap,
            2 => Request::RegionRead,
            3 => Request::RegionWrite,
            4 => Request::SetIrqs,
            5 => Request::Reset,
            _ => Request::Step,
        }
    }

    /// The flags byte of the request.
    pub fn flags(self) -> u8 {
        self as u8
    }
}

/// An address near the world's guest RAM (so that maps overlap it and each other), or
/// anywhere.
fn address(sel: u8, raw: u64) -> u64 {
    match sel % 4 {
        0 => IOVA_BASE + (raw % (2 * RAM_SIZE as u64)),
        1 => IOVA_BASE + (raw % (2 * RAM_SIZE as u64)) / 4096 * 4096,
        2 => raw / 4096 * 4096,
        _ => raw,
    }
}

/// A memfd of `len` bytes, sealed at that size (as rnicd requires) or not.
fn memfd(len: u64, sealed: bool) -> File {
    if sealed {
        return crate::transport::sealed_memfd(c"rnic-fuzz-dma", len).expect("a sealed memfd");
    }
    // SAFETY: memfd_create with a valid C string; the result is checked.
    let fd = unsafe { libc::memfd_create(c"rnic-fuzz-dma".as_ptr(), libc::MFD_CLOEXEC) };
    assert!(fd >= 0, "memfd_create: {}", std::io::Error::last_os_error());
    // SAFETY: a fresh descriptor that we own.
    let f = unsafe { File::from_raw_fd(fd) };
    f.set_len(len).expect("size a memfd");
    f
}

fn eventfd() -> File {
    // SAFETY: plain eventfd creation; the result is checked.
    let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
    assert!(fd >= 0, "eventfd: {}", std::io::Error::last_os_error());
    // SAFETY: a fresh descriptor that we own.
    unsafe { File::from_raw_fd(fd) }
}

/// Runs the requests of `records` against B's backend; returns whether any of them
/// changed what B's driver relies on (its DMA mappings, registers, interrupts, state),
/// after which the world cannot be torn down by commands.
pub fn run(world: &World, records: &[Record<'_>]) -> bool {
    let mut backend = Backend::new(world.bench.functions[B].clone());
    let mut disturbed = false;
    for r in records {
        let mut a = Args(r.bytes);
        let request = Request::of(r.flags);
        disturbed |= !matches!(request, Request::RegionRead | Request::Step);
        match request {
            Request::DmaMap => {
                let flags = a.take(1) as u32;
                let sel = a.take(1) as u8;
                let address = address(sel, a.take(8));
                let size = a.take(4);
                let offset = a.take(4) % (2 * RAM_SIZE as u64);
                // No descriptor (as QEMU's ROMs), the guest RAM again (an alias), or a
                // fresh file of a length of the input's choosing (possibly too short),
                // sealed or not.
                let fd = match (sel >> 2) % 4 {
                    0 => None,
                    1 => world.bench.rams[B].file().try_clone().ok(),
                    k => Some(memfd(a.take(3) % (4 * RAM_SIZE as u64), k == 2)),
                };
                let map = DmaMap {
                    argsz: 32,
                    flags,
                    offset,
                    address,
                    size,
                };
                let _ = backend.dma_map(&map, fd);
            }
            Request::DmaUnmap => {
                let flags = a.take(1) as u32;
                let sel = a.take(1) as u8;
                let address = address(sel, a.take(8));
                let size = a.take(4);
                let unmap = DmaUnmap {
                    argsz: 24,
                    flags,
                    address,
                    size,
                };
                let _ = backend.dma_unmap(&unmap);
            }
            Request::RegionRead => {
                let region = a.take(1) as u32 % 12;
                let offset = a.take(8);
                let len = (a.take(2) % 8200) as usize;
                let mut data = vec![0u8; len];
                let _ = backend.region_read(region, offset, &mut data);
            }
            Request::RegionWrite => {
                let region = a.take(1) as u32 % 12;
                let offset = a.take(8);
                let _ = backend.region_write(region, offset, a.rest());
            }
            Request::SetIrqs => {
                let index = a.take(1) as u32 % 8;
                let flags = a.take(4) as u32;
                let start = a.take(4) as u32;
                let count = a.take(4) as u32;
                let fds = (0..a.take(1) % 40).map(|_| eventfd()).collect();
                let request = SetIrqs {
                    argsz: 20,
                    flags,
                    index,
                    start,
                    count,
                };
                let _ = backend.set_irqs(&request, fds);
                backend.deliver_interrupts();
            }
            Request::Reset => backend.reset(),
            Request::Step => world.bench.step(),
        }
    }
    disturbed
}

/// Encodes a request (for seeds and tests).
pub fn request(request: Request, args: &[u8]) -> Vec<u8> {
    crate::input::record(request.flags(), args)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::input::records;
    use crate::world::{Mode, A, C};

    #[test]
    fn every_flags_byte_names_a_request_and_each_its_own() {
        for r in [
            Request::DmaMap,
            Request::DmaUnmap,
            Request::RegionRead,
            Request::RegionWrite,
            Request::SetIrqs,
            Request::Reset,
            Request::Step,
        ] {
            assert_eq!(Request::of(r.flags()), r);
        }
    }

    #[test]
    fn unmapping_b_s_ram_under_live_objects_harms_no_other_function() {
        let mut world = World::build(Mode::Fuzz);
        let seeds = crate::seeds::vfio_seeds();
        for seed in &seeds {
            run(&world, &records(seed, 64));
            world.bench.settle(8);
            world.check_ram(A);
            world.check_ram(C);
            world.check_bystander_counters();
        }
        world.check_completions(&[A, C]);
        world.bench.detach();
    }
}
