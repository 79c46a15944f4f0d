//! The `vfio_socket` target's input: what a vfio-user client sends down function B's
//! socket, bytes and file descriptors, into rnicd's own server
//! (`rnic_device::vfio::server::serve_connection`, the code rnicd's socket threads run)
//! over a real socket pair, while B's objects are live.
//!
//! Each record ([`crate::input::records`]) is one `sendmsg` from the client. Its flags
//! byte says what it carries:
//! - bits 0-1 ([`Shape`]): the bytes as they are (anything: a header announcing 4 GiB,
//!   half a message, two messages); a message whose header the harness writes around the
//!   bytes (the first two bytes are the command, the rest the body, the size is right);
//!   the same with `NO_REPLY`; or such a message sent in two `sendmsg`s, the descriptors
//!   with the second;
//! - bits 2-4 ([`Fds`]): the descriptors that go with it: none, a sealed memfd, one that
//!   can shrink, B's own guest RAM again, a non-blocking eventfd, a blocking one, the
//!   write end of a full pipe, or several at once;
//! - bits 5-6: the size of a memfd it carries (4 KiB, 64 KiB, the guest RAM's, 1 GiB).
//!
//! The server hands what it accepts to B's [`Backend`], and an engine pass runs after
//! every command, as the engine threads would meanwhile. When the client is done, the
//! function is disconnected as rnicd does when a client leaves.

use std::fs::File;
use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd, RawFd};
use std::os::unix::net::UnixStream;

use rnic_abi::vfio_user::{
    DeviceInfo, DmaMap, DmaUnmap, Header, IrqInfo, SetIrqs, FLAG_NO_REPLY, HEADER_SIZE,
};
use rnic_device::vfio::refusal::{ClientLog, Refusal};
use rnic_device::vfio::server::{self, End, Handler, Region};
use rnic_device::vfio::Backend;
use zerocopy::IntoBytes;

use crate::bench::Bench;
use crate::input::Record;
use crate::transport::{sealed_memfd, RAM_SIZE};
use crate::world::{World, B};

/// How a record's bytes go on the socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// As they are.
    Raw,
    /// A message: command (2 bytes), then the body; the harness writes the header.
    Message,
    /// A message with `NO_REPLY`.
    NoReply,
    /// A message in two `sendmsg`s: the first 7 bytes, then the rest with the descriptors.
    Split,
}

/// The descriptors that go with a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fds {
    /// None.
    None,
    /// A memfd sealed at its size, as QEMU's guest RAM.
    Sealed,
    /// A memfd that can shrink.
    Unsealed,
    /// B's guest RAM memfd (an alias of what B has mapped).
    GuestRam,
    /// A non-blocking eventfd.
    Eventfd,
    /// A blocking eventfd.
    BlockingEventfd,
    /// The write end of a pipe that is full.
    FullPipe,
    /// Two eventfds and a sealed memfd.
    Several,
}

impl Shape {
    /// The shape a flags byte names.
    pub fn of(flags: u8) -> Self {
        match flags & 3 {
            0 => Shape::Raw,
            1 => Shape::Message,
            2 => Shape::NoReply,
            _ => Shape::Split,
        }
    }
}

impl Fds {
    /// The descriptors a flags byte names.
    pub fn of(flags: u8) -> Self {
        match (flags >> 2) & 7 {
            0 => Fds::None,
            1 => Fds::Sealed,
            2 => Fds::Unsealed,
            3 => Fds::GuestRam,
            4 => Fds::Eventfd,
            5 => Fds::BlockingEventfd,
            6 => Fds::FullPipe,
            _ => Fds::Several,
        }
    }

    /// The flags bits that name these descriptors.
    pub fn bits(self) -> u8 {
        (self as u8) << 2
    }
}

/// The flags byte of a record of `shape` carrying `fds`, memfds of size class `size`.
pub fn flags(shape: Shape, fds: Fds, size: u8) -> u8 {
    shape as u8 | fds.bits() | (size & 3) << 5
}

/// The memfd size a flags byte names.
fn memfd_size(flags: u8) -> u64 {
    match (flags >> 5) & 3 {
        0 => 0x1000,
        1 => 0x1_0000,
        2 => RAM_SIZE as u64,
        _ => 1 << 30,
    }
}

fn eventfd(flags: i32) -> File {
    // SAFETY: plain eventfd creation; the result is checked.
    let fd = unsafe { libc::eventfd(0, flags | libc::EFD_CLOEXEC) };
    assert!(fd >= 0, "eventfd: {}", std::io::Error::last_os_error());
    // SAFETY: a fresh descriptor that we own.
    unsafe { File::from_raw_fd(fd) }
}

fn unsealed_memfd(size: u64) -> File {
    // SAFETY: memfd_create with a valid C string; the result is checked.
    let fd = unsafe { libc::memfd_create(c"rnic-fuzz-unsealed".as_ptr(), libc::MFD_CLOEXEC) };
    assert!(fd >= 0, "memfd_create: {}", std::io::Error::last_os_error());
    // SAFETY: a fresh descriptor that we own.
    let f = unsafe { File::from_raw_fd(fd) };
    f.set_len(size).expect("size a memfd");
    f
}

/// The write end of a pipe whose buffer is full; the read end goes to `keep`, so that the
/// write end stays a pipe with a reader.
fn full_pipe(keep: &mut Vec<File>) -> File {
    let mut fds = [0; 2];
    // SAFETY: pipe2 into an array of two; the result is checked.
    let r = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) };
    assert_eq!(r, 0, "pipe2: {}", std::io::Error::last_os_error());
    // SAFETY: the pipe's descriptors are ours.
    let (read, write) = unsafe { (File::from_raw_fd(fds[0]), File::from_raw_fd(fds[1])) };
    let chunk = [0u8; 4096];
    // SAFETY: writes of a buffer we own until the pipe is full (non-blocking).
    while unsafe { libc::write(write.as_raw_fd(), chunk.as_ptr().cast(), chunk.len()) } > 0 {}
    // Blocking again, as a client that wants a writer to hang would leave it.
    // SAFETY: F_SETFL on a descriptor we own.
    unsafe { libc::fcntl(write.as_raw_fd(), libc::F_SETFL, 0) };
    keep.push(read);
    write
}

/// The descriptors of a record; what must stay open beside them goes to `keep`.
fn descriptors(world: &World, flags: u8, keep: &mut Vec<File>) -> Vec<File> {
    let size = memfd_size(flags);
    let sealed = || sealed_memfd(c"rnic-fuzz-client", size).expect("a sealed memfd");
    match Fds::of(flags) {
        Fds::None => Vec::new(),
        Fds::Sealed => vec![sealed()],
        Fds::Unsealed => vec![unsealed_memfd(size)],
        Fds::GuestRam => world.bench.rams[B].file().try_clone().into_iter().collect(),
        Fds::Eventfd => vec![eventfd(libc::EFD_NONBLOCK)],
        Fds::BlockingEventfd => vec![eventfd(0)],
        Fds::FullPipe => vec![full_pipe(keep)],
        Fds::Several => vec![
            eventfd(libc::EFD_NONBLOCK),
            eventfd(libc::EFD_NONBLOCK),
            sealed(),
        ],
    }
}

/// The `sendmsg`s of a record: (bytes, descriptors) each.
fn sends(index: usize, record: &Record<'_>, fds: Vec<File>) -> Vec<(Vec<u8>, Vec<File>)> {
    let shape = Shape::of(record.flags);
    if shape == Shape::Raw {
        return vec![(record.bytes.to_vec(), fds)];
    }
    let command = u16::from_le_bytes([
        record.bytes.first().copied().unwrap_or(0),
        record.bytes.get(1).copied().unwrap_or(0),
    ]);
    let body = record.bytes.get(2..).unwrap_or(&[]);
    let header = Header {
        message_id: index as u16,
        command,
        message_size: (HEADER_SIZE + body.len()) as u32,
        flags: if shape == Shape::NoReply {
            FLAG_NO_REPLY
        } else {
            0
        },
        error: 0,
    };
    let mut bytes = header.as_bytes().to_vec();
    bytes.extend_from_slice(body);
    if shape == Shape::Split {
        let rest = bytes.split_off(7);
        return vec![(bytes, Vec::new()), (rest, fds)];
    }
    vec![(bytes, fds)]
}

/// B's backend with an engine pass after every command, as the engine threads run
/// meanwhile in rnicd.
struct Stepping<'a> {
    inner: Backend,
    bench: &'a Bench,
}

impl Stepping<'_> {
    fn step<T>(&mut self, result: T) -> T {
        self.bench.step();
        result
    }
}

impl Handler for Stepping<'_> {
    fn name(&self) -> String {
        self.inner.name()
    }
    fn device_info(&self) -> DeviceInfo {
        self.inner.device_info()
    }
    fn region(&self, index: u32) -> Region {
        self.inner.region(index)
    }
    fn irq_info(&self, index: u32) -> IrqInfo {
        self.inner.irq_info(index)
    }
    fn max_dma_maps(&self) -> u32 {
        self.inner.max_dma_maps()
    }
    fn dma_map(&mut self, map: &DmaMap, fd: Option<File>) -> Result<(), Refusal> {
        let r = self.inner.dma_map(map, fd);
        self.step(r)
    }
    fn dma_unmap(&mut self, unmap: &DmaUnmap) -> Result<(), Refusal> {
        let r = self.inner.dma_unmap(unmap);
        self.step(r)
    }
    fn region_read(&mut self, region: u32, offset: u64, data: &mut [u8]) -> Result<(), Refusal> {
        let r = self.inner.region_read(region, offset, data);
        self.step(r)
    }
    fn region_write(&mut self, region: u32, offset: u64, data: &[u8]) -> Result<(), Refusal> {
        let r = self.inner.region_write(region, offset, data);
        self.step(r)
    }
    fn set_irqs(&mut self, request: &SetIrqs, fds: Vec<File>) -> Result<(), Refusal> {
        let r = self.inner.set_irqs(request, fds);
        self.step(r)
    }
    fn reset(&mut self) {
        self.inner.reset();
        self.step(());
    }
    fn interrupt_fd(&self) -> Option<RawFd> {
        self.inner.interrupt_fd()
    }
    fn deliver_interrupts(&mut self) -> Vec<Refusal> {
        self.inner.deliver_interrupts()
    }
}

/// The number of descriptors this process has open.
pub fn open_descriptors() -> usize {
    std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count())
}

/// How many descriptors this process should have open once B's client is gone: the open
/// ones now, less those B holds for its client (the files behind its DMA windows, its
/// MSI-X eventfds), which a disconnect closes.
pub fn descriptors_after_disconnect(world: &World) -> usize {
    let b = &world.bench.functions[B];
    open_descriptors() - b.dma().file_count() - b.interrupts().trigger_count()
}

/// Sends the records of an input down a socket pair into rnicd's server for B, with a
/// reader taking the replies off the other end; returns how the connection ended and the
/// bytes of replies that came back. B is disconnected afterwards, as rnicd does.
pub fn run(world: &World, records: &[Record<'_>]) -> (End, usize) {
    let (client, server_end) = UnixStream::pair().expect("a socket pair");
    let mut messages = Vec::new();
    let mut keep = Vec::new();
    for (i, r) in records.iter().enumerate() {
        let fds = descriptors(world, r.flags, &mut keep);
        messages.extend(sends(i, r, fds));
    }
    let function = world.bench.functions[B].clone();
    let mut log = ClientLog::new("vf0 (fuzz)");
    let mut handler = Stepping {
        inner: Backend::new(function.clone()),
        bench: &world.bench,
    };
    let (end, replied) = std::thread::scope(|scope| {
        let reader = client.try_clone().expect("clone the client socket");
        let replies = scope.spawn(move || {
            let mut reader = reader;
            let mut buf = vec![0u8; 1 << 16];
            let mut total = 0;
            // Descriptors in replies (the doorbell memfd) are closed as they come.
            loop {
                let mut fds = Vec::new();
                match server::recv_with_fds(reader.as_raw_fd(), &mut buf, &mut fds) {
                    Ok((0, _)) | Err(_) => break,
                    Ok((n, _)) => total += n,
                }
            }
            let _ = reader.read(&mut buf);
            total
        });
        let writer = scope.spawn(move || {
            for (bytes, fds) in &messages {
                let mut sent = 0;
                let mut first = true;
                while sent < bytes.len() || (first && bytes.is_empty() && !fds.is_empty()) {
                    let with: &[File] = if first { fds } else { &[] };
                    let with: Vec<RawFd> = with.iter().map(|f| f.as_raw_fd()).collect();
                    match server::send_with_fds(client.as_raw_fd(), &bytes[sent..], &with, 0) {
                        Ok(n) => sent += n,
                        Err(_) => return,
                    }
                    first = false;
                }
            }
            let _ = client.shutdown(std::net::Shutdown::Write);
        });
        let end = server::serve_connection(server_end, None, &mut handler, &mut log);
        let _ = writer.join();
        (end, replies.join().unwrap_or(0))
    });
    log.client_left();
    function.disconnect();
    (end, replied)
}

/// The bytes of a well-formed message record (`Shape::Message`): command, then body.
pub fn message(command: u16, body: &[u8]) -> Vec<u8> {
    let mut bytes = command.to_le_bytes().to_vec();
    bytes.extend_from_slice(body);
    bytes
}

/// A record (for seeds and tests).
pub fn record(flags: u8, bytes: &[u8]) -> Vec<u8> {
    crate::input::record(flags, bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::input::records;
    use crate::world::{Mode, A, C};

    #[test]
    fn every_flags_byte_names_a_shape_and_descriptors() {
        for shape in [Shape::Raw, Shape::Message, Shape::NoReply, Shape::Split] {
            for fds in [
                Fds::None,
                Fds::Sealed,
                Fds::Unsealed,
                Fds::GuestRam,
                Fds::Eventfd,
                Fds::BlockingEventfd,
                Fds::FullPipe,
                Fds::Several,
            ] {
                let f = flags(shape, fds, 3);
                assert_eq!(
                    (Shape::of(f), Fds::of(f), memfd_size(f)),
                    (shape, fds, 1 << 30)
                );
            }
        }
    }

    #[test]
    fn the_seeds_reach_b_harm_no_other_function_and_leave_no_descriptor_behind() {
        let mut world = World::build(Mode::Fuzz);
        let before = descriptors_after_disconnect(&world);
        for seed in crate::seeds::vfio_socket_seeds() {
            let (end, replied) = run(&world, &records(&seed, 64));
            assert!(replied > 0, "{end:?}");
            world.bench.settle(8);
            world.check_ram(A);
            world.check_ram(C);
            world.check_bystander_counters();
            // Other tests of this process open and close descriptors meanwhile: a leak is
            // a count that stays above, not one that is above for a moment.
            let settled = (0..200).any(|_| {
                let same = open_descriptors() <= before;
                if !same {
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
                same
            });
            assert!(
                settled,
                "descriptors leaked by {end:?}: {} open, {before} before",
                open_descriptors()
            );
        }
        world.check_completions(&[A, C]);
        world.bench.detach();
    }
}
