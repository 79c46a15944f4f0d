//! The vfio-user server of one socket: one client at a time, every message checked before
//! anything is allocated or handed on (docs/hardware-interface.md §9).
//!
//! A [`Handler`] is the device behind the socket. The server frames messages, enforces
//! the protocol's limits (sizes, descriptor counts, order, timeouts), answers the
//! questions whose answers are fixed (version, device info) and hands every other command
//! to the handler, whose [`Refusal`]s become error replies and rate-limited log lines
//! ([`ClientLog`]). While it waits for the next message it also delivers the device's
//! interrupts ([`Handler::deliver_interrupts`]) and turns away clients that connect to a
//! socket that is taken (`EBUSY`), so that this one thread is all a client ever costs.

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, RawFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::time::Duration;

use rnic_abi::vfio_user::{
    command_name, CapHeader, DeviceInfo, DmaMap, DmaUnmap, Header, IrqInfo, RegionAccess,
    RegionInfo, SetIrqs, SparseArea, SparseMmap, Version, CAP_SPARSE_MMAP, CMD_DEVICE_GET_INFO,
    CMD_DEVICE_GET_IRQ_INFO, CMD_DEVICE_GET_REGION_INFO, CMD_DEVICE_RESET, CMD_DEVICE_SET_IRQS,
    CMD_DMA_MAP, CMD_DMA_UNMAP, CMD_REGION_READ, CMD_REGION_WRITE, CMD_VERSION, DMA_UNMAP_ALL,
    DMA_UNMAP_GET_DIRTY_PAGE_INFO, FLAG_ERROR, FLAG_NO_REPLY, FLAG_REPLY, FLAG_TYPE_MASK,
    HEADER_SIZE, IRQ_SET_DATA_BOOL, MAX_DATA_XFER, MAX_MESSAGE, MAX_MSG_FDS, MAX_VERSION_BODY,
    NUM_IRQS, NUM_REGIONS, REGION_FLAG_CAPS, REGION_FLAG_READ, REGION_FLAG_WRITE, VERSION_MAJOR,
    VERSION_MINOR,
};
use zerocopy::{FromBytes, IntoBytes};

use super::refusal::{ClientLog, Kind, Refusal, Rule};

/// How long a client may take to send the rest of a message it started, and to take a
/// reply off the socket, before the connection ends.
pub const IO_TIMEOUT: Duration = Duration::from_secs(10);

/// The most descriptors one `recvmsg` takes; more in one message than [`MAX_MSG_FDS`]
/// is refused, and descriptors beyond this are closed by the kernel.
pub const FD_ROOM: usize = 16;

/// A region as the client sees it.
#[derive(Debug, Clone, Default)]
pub struct Region {
    /// Size, flags and (for a mappable region) the offset in `fd`; `index`, `argsz` and
    /// `cap_offset` are the server's to fill.
    pub info: RegionInfo,
    /// The parts the client may mmap (a sparse mmap capability), relative to
    /// `info.offset`.
    pub areas: Vec<SparseArea>,
    /// The descriptor the client maps them from.
    pub fd: Option<RawFd>,
}

/// The device behind a socket. Each call handles one command the server already
/// checked for framing; a `Refusal` becomes an error reply with its errno.
pub trait Handler {
    /// The device's name for logs ("vf0").
    fn name(&self) -> String;
    /// DEVICE_GET_INFO's answer (`argsz` is the server's to fill).
    fn device_info(&self) -> DeviceInfo;
    /// Region `index` (below [`NUM_REGIONS`]).
    fn region(&self, index: u32) -> Region;
    /// IRQ index `index` (below [`NUM_IRQS`]).
    fn irq_info(&self, index: u32) -> IrqInfo;
    /// The most DMA windows the client may hold, for the VERSION reply.
    fn max_dma_maps(&self) -> u32;
    /// DMA_MAP, with the descriptor that came with it.
    fn dma_map(&mut self, map: &DmaMap, fd: Option<File>) -> Result<(), Refusal>;
    /// DMA_UNMAP (flags already checked: 0 or [`DMA_UNMAP_ALL`]).
    fn dma_unmap(&mut self, unmap: &DmaUnmap) -> Result<(), Refusal>;
    /// REGION_READ of a range the server checked lies in a readable region.
    fn region_read(&mut self, region: u32, offset: u64, data: &mut [u8]) -> Result<(), Refusal>;
    /// REGION_WRITE of a range the server checked lies in a writable region.
    fn region_write(&mut self, region: u32, offset: u64, data: &[u8]) -> Result<(), Refusal>;
    /// DEVICE_SET_IRQS of an index below [`NUM_IRQS`], with its descriptors.
    fn set_irqs(&mut self, request: &SetIrqs, fds: Vec<File>) -> Result<(), Refusal>;
    /// DEVICE_RESET.
    fn reset(&mut self);
    /// A descriptor that is readable while interrupts wait to be delivered.
    fn interrupt_fd(&self) -> Option<RawFd>;
    /// Delivers the interrupts that wait (writes the client's eventfds); what could not
    /// be delivered, for the log.
    fn deliver_interrupts(&mut self) -> Vec<Refusal>;
}

/// Why a connection ended.
#[derive(Debug)]
pub enum End {
    /// The client closed it.
    Closed,
    /// The client broke a rule that ends the connection.
    Broke(Refusal),
    /// The socket failed.
    Io(io::Error),
}

impl std::fmt::Display for End {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            End::Closed => f.write_str("the client closed the connection"),
            End::Broke(r) => write!(f, "the client broke rule {}: {}", r.rule, r.detail),
            End::Io(e) => write!(f, "the socket failed: {e}"),
        }
    }
}

/// A message as it arrived.
struct Message {
    header: Header,
    body: Vec<u8>,
    fds: Vec<File>,
}

/// Serves one client on `stream` until it leaves or breaks a rule that ends the
/// connection. `listener`, if given, is the socket's listener: clients that connect
/// meanwhile are turned away with `EBUSY`.
pub fn serve_connection(
    stream: UnixStream,
    listener: Option<&UnixListener>,
    handler: &mut dyn Handler,
    log: &mut ClientLog,
) -> End {
    let timeouts = stream
        .set_read_timeout(Some(IO_TIMEOUT))
        .and_then(|()| stream.set_write_timeout(Some(IO_TIMEOUT)));
    if let Err(e) = timeouts {
        return End::Io(e);
    }
    let mut connection = Connection {
        stream,
        handler,
        log,
        negotiated: false,
    };
    connection.run(listener)
}

struct Connection<'a> {
    stream: UnixStream,
    handler: &'a mut dyn Handler,
    log: &'a mut ClientLog,
    negotiated: bool,
}

impl Connection<'_> {
    fn run(&mut self, listener: Option<&UnixListener>) -> End {
        loop {
            let irq = self.handler.interrupt_fd();
            let mut fds = vec![pollfd(self.stream.as_raw_fd())];
            fds.extend(irq.map(pollfd));
            fds.extend(listener.map(|l| pollfd(l.as_raw_fd())));
            if let Err(e) = poll(&mut fds) {
                return End::Io(e);
            }
            let mut rest = fds[1..].iter();
            if irq.is_some() && rest.next().is_some_and(|p| p.revents != 0) {
                for refusal in self.handler.deliver_interrupts() {
                    self.log.refused("interrupt", &refusal);
                }
            }
            // The client's message (or its leaving) before newcomers: a client that
            // closed and one that connected right after find the socket free.
            if fds[0].revents != 0 {
                let message = match self.read_message() {
                    Ok(Some(m)) => m,
                    Ok(None) => return End::Closed,
                    Err(end) => return end,
                };
                if let Err(end) = self.handle(message) {
                    return end;
                }
            }
            if let (Some(l), Some(p)) = (listener, rest.next()) {
                if p.revents != 0 {
                    turn_away(l, self.log);
                }
            }
        }
    }

    /// Reads one whole message; `None` at a clean end of stream.
    fn read_message(&mut self) -> Result<Option<Message>, End> {
        let mut fds = Vec::new();
        let mut head = [0u8; HEADER_SIZE];
        let mut got = 0;
        while got < HEADER_SIZE {
            let n = self.recv(&mut head[got..], &mut fds)?;
            if n == 0 {
                if got == 0 {
                    return Ok(None);
                }
                return Err(self.broke(
                    "message",
                    Refusal::new(
                        Rule::MessageIncomplete,
                        format!("the connection ended {got} bytes into a message header"),
                    ),
                ));
            }
            got += n;
        }
        let header = Header::read_from_bytes(&head).unwrap_or_default();
        let size = header.message_size;
        if !(HEADER_SIZE as u32..=MAX_MESSAGE).contains(&size) {
            let refusal = Refusal::new(
                Rule::MessageSize,
                format!(
                    "a header announces a message of {size} bytes; messages are {HEADER_SIZE} \
                     to {MAX_MESSAGE} bytes"
                ),
            );
            // The stream is not at a message boundary any more: answer and hang up.
            let _ = self.reply_error(&header, refusal.errno);
            return Err(self.broke(command_name(header.command), refusal));
        }
        let mut body = vec![0u8; size as usize - HEADER_SIZE];
        let mut got = 0;
        while got < body.len() {
            let n = self.recv(&mut body[got..], &mut fds)?;
            if n == 0 {
                return Err(self.broke(
                    command_name(header.command),
                    Refusal::new(
                        Rule::MessageIncomplete,
                        format!(
                            "the connection ended {got} of {} bytes into a message body",
                            body.len()
                        ),
                    ),
                ));
            }
            got += n;
        }
        Ok(Some(Message { header, body, fds }))
    }

    /// One `recvmsg` into `buf`, descriptors appended to `fds`.
    fn recv(&mut self, buf: &mut [u8], fds: &mut Vec<File>) -> Result<usize, End> {
        match recv_with_fds(self.stream.as_raw_fd(), buf, fds) {
            Ok((n, false)) => Ok(n),
            Ok((_, true)) => Err(self.broke(
                "message",
                Refusal::new(
                    Rule::MessageFds,
                    format!("more than {FD_ROOM} descriptors came with one read"),
                ),
            )),
            Err(e) if timed_out(&e) => Err(self.broke(
                "message",
                Refusal::new(
                    Rule::MessageIncomplete,
                    format!(
                        "a message started but did not arrive whole within {} s",
                        IO_TIMEOUT.as_secs()
                    ),
                ),
            )),
            Err(e) => Err(End::Io(e)),
        }
    }

    fn broke(&mut self, command: &str, refusal: Refusal) -> End {
        self.log.refused(command, &refusal);
        End::Broke(refusal)
    }

    /// Handles one message and sends its reply.
    fn handle(&mut self, message: Message) -> Result<(), End> {
        let Message { header, body, fds } = message;
        let name = command_name(header.command);
        match self.answer(&header, &body, fds) {
            Ok(Answer::Reply(bytes, fd)) => {
                if header.flags & FLAG_NO_REPLY == 0 {
                    self.send(&header, &bytes, fd)?;
                }
                Ok(())
            }
            Err(refusal) => {
                self.log.refused(name, &refusal);
                // QEMU sends some commands without asking for a reply and reports an
                // error reply to them all the same: always answer a refusal.
                self.reply_error(&header, refusal.errno)?;
                if refusal.rule.ends_connection() {
                    return Err(End::Broke(refusal));
                }
                Ok(())
            }
        }
    }

    /// What a command gets: a reply body (and a descriptor to send with it), or a refusal.
    fn answer(&mut self, header: &Header, body: &[u8], fds: Vec<File>) -> Result<Answer, Refusal> {
        if header.flags & FLAG_TYPE_MASK != 0 {
            return Err(Refusal::new(
                Rule::MessageOrder,
                format!(
                    "a message of type {} where a command belongs",
                    header.flags & FLAG_TYPE_MASK
                ),
            ));
        }
        let takes = match header.command {
            CMD_DMA_MAP => 1,
            CMD_DEVICE_SET_IRQS => MAX_MSG_FDS,
            _ => 0,
        };
        if fds.len() > takes {
            return Err(Refusal::new(
                Rule::MessageFds,
                format!(
                    "{} descriptors came with {}, which takes at most {takes}",
                    fds.len(),
                    command_name(header.command)
                ),
            ));
        }
        if header.command == CMD_VERSION {
            return self.version(body);
        }
        if !self.negotiated {
            return Err(Refusal::new(
                Rule::MessageOrder,
                format!(
                    "{} before VERSION: a client negotiates first",
                    command_name(header.command)
                ),
            ));
        }
        match header.command {
            CMD_DMA_MAP => {
                let map: DmaMap = fixed(body)?;
                self.handler.dma_map(&map, fds.into_iter().next())?;
                Ok(Answer::empty())
            }
            CMD_DMA_UNMAP => {
                let unmap: DmaUnmap = fixed(body)?;
                if unmap.flags & DMA_UNMAP_GET_DIRTY_PAGE_INFO != 0 {
                    return Err(Refusal::new(
                        Rule::CommandUnsupported,
                        "DMA_UNMAP with a dirty-page bitmap: rnic has no dirty tracking",
                    ));
                }
                if unmap.flags & !DMA_UNMAP_ALL != 0 {
                    return Err(Refusal::new(
                        Rule::DmaFlags,
                        format!("DMA_UNMAP flags {:#x}", unmap.flags),
                    ));
                }
                self.handler.dma_unmap(&unmap)?;
                Ok(Answer::Reply(unmap.as_bytes().to_vec(), None))
            }
            CMD_DEVICE_GET_INFO => {
                let _: DeviceInfo = fixed(body)?;
                let mut info = self.handler.device_info();
                info.argsz = std::mem::size_of::<DeviceInfo>() as u32;
                Ok(Answer::Reply(info.as_bytes().to_vec(), None))
            }
            CMD_DEVICE_GET_REGION_INFO => {
                let asked: RegionInfo = fixed(body)?;
                self.region_info(&asked)
            }
            CMD_DEVICE_GET_IRQ_INFO => {
                let asked: IrqInfo = fixed(body)?;
                if asked.index >= NUM_IRQS {
                    return Err(Refusal::new(
                        Rule::IrqRequest,
                        format!("IRQ index {} (there are {NUM_IRQS})", asked.index),
                    ));
                }
                let mut info = self.handler.irq_info(asked.index);
                info.argsz = std::mem::size_of::<IrqInfo>() as u32;
                info.index = asked.index;
                Ok(Answer::Reply(info.as_bytes().to_vec(), None))
            }
            CMD_DEVICE_SET_IRQS => {
                let request: SetIrqs = fixed(body)?;
                if request.index >= NUM_IRQS {
                    return Err(Refusal::new(
                        Rule::IrqRequest,
                        format!("IRQ index {} (there are {NUM_IRQS})", request.index),
                    ));
                }
                if request.flags & IRQ_SET_DATA_BOOL != 0 {
                    return Err(Refusal::new(
                        Rule::IrqRequest,
                        "SET_IRQS with DATA_BOOL: use DATA_EVENTFD or DATA_NONE",
                    ));
                }
                self.handler.set_irqs(&request, fds)?;
                Ok(Answer::empty())
            }
            CMD_REGION_READ => {
                let access: RegionAccess = fixed(body)?;
                self.check_access(&access, REGION_FLAG_READ)?;
                let mut data = vec![0u8; access.count as usize];
                self.handler
                    .region_read(access.region, access.offset, &mut data)?;
                let mut reply = access.as_bytes().to_vec();
                reply.extend_from_slice(&data);
                Ok(Answer::Reply(reply, None))
            }
            CMD_REGION_WRITE => {
                let (access, data) = RegionAccess::read_from_prefix(body)
                    .map_err(|_| length_refusal(body.len(), "at least 16"))?;
                if data.len() != access.count as usize {
                    return Err(Refusal::new(
                        Rule::MessageLength,
                        format!(
                            "REGION_WRITE of {} bytes carries {} bytes of data",
                            access.count,
                            data.len()
                        ),
                    ));
                }
                self.check_access(&access, REGION_FLAG_WRITE)?;
                self.handler
                    .region_write(access.region, access.offset, data)?;
                Ok(Answer::Reply(access.as_bytes().to_vec(), None))
            }
            CMD_DEVICE_RESET => {
                if !body.is_empty() {
                    return Err(length_refusal(body.len(), "0"));
                }
                self.log.event(
                    Kind::Reset,
                    format_args!("function reset by the client (DEVICE_RESET)"),
                );
                self.handler.reset();
                Ok(Answer::empty())
            }
            other => Err(Refusal::new(
                Rule::CommandUnsupported,
                format!(
                    "command {other} ({}) is not supported (docs/hardware-interface.md §9.5)",
                    command_name(other)
                ),
            )),
        }
    }

    /// VERSION: rnic's version and capabilities; the client's JSON is not needed.
    fn version(&mut self, body: &[u8]) -> Result<Answer, Refusal> {
        if self.negotiated {
            return Err(Refusal::new(Rule::MessageOrder, "a second VERSION"));
        }
        if body.len() > MAX_VERSION_BODY as usize {
            return Err(length_refusal(body.len(), "at most 4096"));
        }
        let (proposed, _capabilities) = Version::read_from_prefix(body)
            .map_err(|_| length_refusal(body.len(), "at least 4"))?;
        if proposed.major != VERSION_MAJOR {
            return Err(Refusal::new(
                Rule::CommandUnsupported,
                format!(
                    "protocol version {}.{}; rnicd speaks {VERSION_MAJOR}.{VERSION_MINOR}",
                    proposed.major, proposed.minor
                ),
            ));
        }
        self.negotiated = true;
        // rnicd speaks 0.0, the lowest minor there is: every client's proposal allows it.
        let version = Version {
            major: VERSION_MAJOR,
            minor: VERSION_MINOR,
        };
        // The protocol caps max_dma_maps at 65535 (QEMU refuses more).
        let caps = format!(
            "{{\"capabilities\":{{\"max_msg_fds\":{MAX_MSG_FDS},\"max_data_xfer_size\":{MAX_DATA_XFER},\"pgsizes\":4096,\"max_dma_maps\":{}}}}}",
            self.handler.max_dma_maps().min(65535)
        );
        let mut reply = version.as_bytes().to_vec();
        reply.extend_from_slice(caps.as_bytes());
        reply.push(0);
        Ok(Answer::Reply(reply, None))
    }

    /// DEVICE_GET_REGION_INFO: the region and, when the client left room for it, its
    /// sparse mmap capability and the descriptor to map.
    fn region_info(&mut self, asked: &RegionInfo) -> Result<Answer, Refusal> {
        if asked.index >= NUM_REGIONS {
            return Err(Refusal::new(
                Rule::RegionAccess,
                format!("region {} (there are {NUM_REGIONS})", asked.index),
            ));
        }
        let region = self.handler.region(asked.index);
        let mut info = region.info;
        info.index = asked.index;
        info.argsz = std::mem::size_of::<RegionInfo>() as u32;
        info.cap_offset = 0;
        let mut caps = Vec::new();
        if !region.areas.is_empty() {
            let header = CapHeader {
                id: CAP_SPARSE_MMAP,
                version: 1,
                next: 0,
            };
            caps.extend_from_slice(header.as_bytes());
            let sparse = SparseMmap {
                nr_areas: region.areas.len() as u32,
                reserved: 0,
            };
            caps.extend_from_slice(sparse.as_bytes());
            for area in &region.areas {
                caps.extend_from_slice(area.as_bytes());
            }
            info.flags |= REGION_FLAG_CAPS;
            info.argsz += caps.len() as u32;
        }
        if caps.is_empty() {
            return Ok(Answer::Reply(info.as_bytes().to_vec(), None));
        }
        // argsz says how much room the whole answer needs; when the client left less,
        // the capabilities (and the descriptor) are left out and it asks again. Unlike
        // Linux's VFIO, cap_offset says where they would be even then: QEMU's vfio-user
        // client refuses CAPS with a cap_offset below the structure.
        info.cap_offset = std::mem::size_of::<RegionInfo>() as u32;
        if asked.argsz < info.argsz {
            return Ok(Answer::Reply(info.as_bytes().to_vec(), None));
        }
        let mut reply = info.as_bytes().to_vec();
        reply.extend_from_slice(&caps);
        Ok(Answer::Reply(reply, region.fd))
    }

    /// Checks that a region access lies inside a region that allows it, before its data
    /// is allocated.
    fn check_access(&self, access: &RegionAccess, need: u32) -> Result<(), Refusal> {
        let (what, verb) = if need == REGION_FLAG_READ {
            ("REGION_READ", "readable")
        } else {
            ("REGION_WRITE", "writable")
        };
        if access.count > MAX_DATA_XFER {
            return Err(Refusal::new(
                Rule::RegionAccess,
                format!(
                    "{what} of {} bytes; at most {MAX_DATA_XFER} (max_data_xfer_size)",
                    access.count
                ),
            ));
        }
        if access.region >= NUM_REGIONS {
            return Err(Refusal::new(
                Rule::RegionAccess,
                format!(
                    "{what} of region {} (there are {NUM_REGIONS})",
                    access.region
                ),
            ));
        }
        let region = self.handler.region(access.region).info;
        if region.flags & need == 0 {
            return Err(Refusal::new(
                Rule::RegionAccess,
                format!("{what} of region {}, which is not {verb}", access.region),
            ));
        }
        match access.offset.checked_add(u64::from(access.count)) {
            Some(end) if end <= region.size => Ok(()),
            _ => Err(Refusal::new(
                Rule::RegionAccess,
                format!(
                    "{what} of {} bytes at {:#x} of region {}, which has {:#x} bytes",
                    access.count, access.offset, access.region, region.size
                ),
            )),
        }
    }

    /// Sends the reply to `command` with `body` (and `fd`).
    fn send(&mut self, command: &Header, body: &[u8], fd: Option<RawFd>) -> Result<(), End> {
        let header = Header {
            message_id: command.message_id,
            command: command.command,
            message_size: (HEADER_SIZE + body.len()) as u32,
            flags: FLAG_REPLY,
            error: 0,
        };
        let mut bytes = header.as_bytes().to_vec();
        bytes.extend_from_slice(body);
        self.write(&bytes, fd)
    }

    fn reply_error(&mut self, command: &Header, errno: i32) -> Result<(), End> {
        self.write(error_reply(command, errno).as_bytes(), None)
    }

    fn write(&mut self, bytes: &[u8], fd: Option<RawFd>) -> Result<(), End> {
        match send_all(self.stream.as_raw_fd(), bytes, fd, 0) {
            Ok(()) => Ok(()),
            Err(e) if timed_out(&e) => Err(self.broke(
                "reply",
                Refusal::new(
                    Rule::ReplyUnread,
                    format!(
                        "the client took no reply off the socket for {} s",
                        IO_TIMEOUT.as_secs()
                    ),
                ),
            )),
            Err(e) => Err(End::Io(e)),
        }
    }
}

/// A reply: its body and the descriptor that goes with it.
enum Answer {
    Reply(Vec<u8>, Option<RawFd>),
}

impl Answer {
    fn empty() -> Self {
        Answer::Reply(Vec::new(), None)
    }
}

/// Whether a socket operation ran into its timeout ([`IO_TIMEOUT`]).
fn timed_out(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}

fn length_refusal(len: usize, want: &str) -> Refusal {
    Refusal::new(
        Rule::MessageLength,
        format!("a body of {len} bytes where the command takes {want}"),
    )
}

/// A fixed-size body.
fn fixed<T: FromBytes>(body: &[u8]) -> Result<T, Refusal> {
    T::read_from_bytes(body)
        .map_err(|_| length_refusal(body.len(), &std::mem::size_of::<T>().to_string()))
}

/// The error reply to `command`.
fn error_reply(command: &Header, errno: i32) -> Header {
    Header {
        message_id: command.message_id,
        command: command.command,
        message_size: HEADER_SIZE as u32,
        flags: FLAG_REPLY | FLAG_ERROR,
        error: errno as u32,
    }
}

/// Turns away every client waiting on `listener` while the socket is taken: each gets an
/// error reply to its VERSION with `EBUSY` (its message id if it had sent it already,
/// else 0) and is disconnected.
fn turn_away(listener: &UnixListener, log: &mut ClientLog) {
    loop {
        let stream = match listener.accept() {
            Ok((s, _)) => s,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => {
                log::warn!("accepting a client to turn away failed: {e}");
                return;
            }
        };
        let mut head = [0u8; HEADER_SIZE];
        // SAFETY: recv into a buffer we own, without waiting.
        let n = unsafe {
            libc::recv(
                stream.as_raw_fd(),
                head.as_mut_ptr().cast(),
                head.len(),
                libc::MSG_DONTWAIT | libc::MSG_PEEK,
            )
        };
        let asked = if n == HEADER_SIZE as isize {
            Header::read_from_bytes(&head).unwrap_or_default()
        } else {
            Header::default()
        };
        let command = Header {
            command: CMD_VERSION,
            ..asked
        };
        let reply = error_reply(&command, Rule::SocketBusy.errno());
        let _ = send_all(
            stream.as_raw_fd(),
            reply.as_bytes(),
            None,
            libc::MSG_DONTWAIT,
        );
        log.refused(
            "connect",
            &Refusal::new(
                Rule::SocketBusy,
                format!(
                    "a client{} connected while another is attached; it was told EBUSY",
                    peer_pid(&stream)
                        .map(|p| format!(" (pid {p})"))
                        .unwrap_or_default()
                ),
            ),
        );
    }
}

/// The process ID of the peer of `stream`, if the kernel says.
pub fn peer_pid(stream: &UnixStream) -> Option<i32> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: getsockopt into a ucred we own, with its size.
    let r = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    (r == 0 && cred.pid > 0).then_some(cred.pid)
}

fn pollfd(fd: RawFd) -> libc::pollfd {
    libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    }
}

/// Waits until one of `fds` is ready.
fn poll(fds: &mut [libc::pollfd]) -> io::Result<()> {
    loop {
        // SAFETY: poll over a slice of pollfds we own, with its length.
        let r = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, -1) };
        if r >= 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Receives into `buf` with one `recvmsg`, appending the descriptors that came with the
/// bytes to `fds` (close-on-exec). Returns the bytes read (0 at the end of the stream)
/// and whether descriptors were cut off (more than [`FD_ROOM`]; the kernel closed them).
pub fn recv_with_fds(fd: RawFd, buf: &mut [u8], fds: &mut Vec<File>) -> io::Result<(usize, bool)> {
    const SPACE: usize = FD_ROOM * std::mem::size_of::<RawFd>();
    // Room for the control message, aligned for cmsghdr.
    let mut control = [0u64; 1 + (SPACE + 64) / 8];
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: an all-zero msghdr is a valid empty one.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    // SAFETY: CMSG_SPACE is arithmetic.
    msg.msg_controllen = unsafe { libc::CMSG_SPACE(SPACE as u32) } as usize;
    let n = loop {
        // SAFETY: msg points at buffers that live through the call.
        let r = unsafe { libc::recvmsg(fd, &mut msg, libc::MSG_CMSG_CLOEXEC) };
        if r >= 0 {
            break r as usize;
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    };
    // SAFETY: msg was filled by recvmsg; the CMSG macros walk its control buffer.
    let mut cmsg = unsafe { libc::CMSG_FIRSTHDR(&msg) };
    while !cmsg.is_null() {
        // SAFETY: a header inside the control buffer, as CMSG_FIRSTHDR/NXTHDR return.
        let header = unsafe { &*cmsg };
        if header.cmsg_level == libc::SOL_SOCKET && header.cmsg_type == libc::SCM_RIGHTS {
            // SAFETY: CMSG_LEN is arithmetic.
            let data_len = header.cmsg_len as usize - unsafe { libc::CMSG_LEN(0) } as usize;
            // SAFETY: the data of this header.
            let data = unsafe { libc::CMSG_DATA(cmsg) };
            for i in 0..data_len / std::mem::size_of::<RawFd>() {
                // SAFETY: inside the header's data; it may be unaligned.
                let raw = unsafe { std::ptr::read_unaligned(data.cast::<RawFd>().add(i)) };
                // SAFETY: the kernel installed this descriptor for us; we own it now.
                fds.push(unsafe { File::from_raw_fd(raw) });
            }
        }
        // SAFETY: as above.
        cmsg = unsafe { libc::CMSG_NXTHDR(&msg, cmsg) };
    }
    Ok((n, msg.msg_flags & libc::MSG_CTRUNC != 0))
}

/// One `sendmsg` of `bytes` with `fds` beside them (at most [`FD_ROOM`]), never raising
/// SIGPIPE; returns how many bytes it took. `flags` adds `send` flags (`MSG_DONTWAIT`).
pub fn send_with_fds(sock: RawFd, bytes: &[u8], fds: &[RawFd], flags: i32) -> io::Result<usize> {
    if fds.len() > FD_ROOM {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "{} descriptors in one message; at most {FD_ROOM}",
                fds.len()
            ),
        ));
    }
    let mut iov = libc::iovec {
        iov_base: bytes.as_ptr() as *mut libc::c_void,
        iov_len: bytes.len(),
    };
    // SAFETY: an all-zero msghdr is a valid empty one.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    // Room for one control message of FD_ROOM descriptors, aligned for cmsghdr.
    let mut control = [0u64; 1 + (FD_ROOM * std::mem::size_of::<RawFd>() + 64) / 8];
    if !fds.is_empty() {
        let size = std::mem::size_of_val(fds) as u32;
        msg.msg_control = control.as_mut_ptr().cast();
        // SAFETY: CMSG_SPACE is arithmetic.
        msg.msg_controllen = unsafe { libc::CMSG_SPACE(size) } as usize;
        // SAFETY: the control buffer holds one header and FD_ROOM descriptors.
        unsafe {
            let cmsg = libc::CMSG_FIRSTHDR(&msg);
            (*cmsg).cmsg_level = libc::SOL_SOCKET;
            (*cmsg).cmsg_type = libc::SCM_RIGHTS;
            (*cmsg).cmsg_len = libc::CMSG_LEN(size) as usize;
            let data = libc::CMSG_DATA(cmsg).cast::<RawFd>();
            for (i, fd) in fds.iter().enumerate() {
                std::ptr::write_unaligned(data.add(i), *fd);
            }
        }
    }
    loop {
        // SAFETY: msg points at buffers that live through the call.
        let r = unsafe { libc::sendmsg(sock, &msg, libc::MSG_NOSIGNAL | flags) };
        if r >= 0 {
            return Ok(r as usize);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Sends all of `bytes`, with `fd` (if any) beside the first of them.
fn send_all(sock: RawFd, bytes: &[u8], fd: Option<RawFd>, flags: i32) -> io::Result<()> {
    let mut sent = 0;
    let mut fds: Vec<RawFd> = fd.into_iter().collect();
    while sent < bytes.len() {
        sent += send_with_fds(sock, &bytes[sent..], &fds, flags)?;
        fds.clear();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use rnic_abi::vfio_user::{DEVICE_FLAGS_PCI, REGION_FLAG_MMAP};
    use std::io::{Read, Write};
    use std::os::unix::net::UnixStream;

    /// A device with one 4 KiB read-write region 0 and a mappable region 2.
    struct Fake {
        null: File,
        maps: Vec<DmaMap>,
        writes: Vec<(u64, Vec<u8>)>,
        irq_fds: usize,
        resets: usize,
    }

    impl Default for Fake {
        fn default() -> Self {
            Self {
                null: File::open("/dev/null").unwrap(),
                maps: Vec::new(),
                writes: Vec::new(),
                irq_fds: 0,
                resets: 0,
            }
        }
    }

    impl Handler for Fake {
        fn name(&self) -> String {
            "fake".into()
        }
        fn device_info(&self) -> DeviceInfo {
            DeviceInfo {
                flags: DEVICE_FLAGS_PCI,
                num_regions: NUM_REGIONS,
                num_irqs: NUM_IRQS,
                ..Default::default()
            }
        }
        fn region(&self, index: u32) -> Region {
            let rw = REGION_FLAG_READ | REGION_FLAG_WRITE;
            match index {
                0 => Region {
                    info: RegionInfo {
                        size: 0x1000,
                        flags: rw,
                        ..Default::default()
                    },
                    ..Default::default()
                },
                2 => Region {
                    info: RegionInfo {
                        size: 0x1000,
                        flags: rw | REGION_FLAG_MMAP,
                        ..Default::default()
                    },
                    areas: vec![SparseArea {
                        offset: 0,
                        size: 0x1000,
                    }],
                    fd: Some(self.null.as_raw_fd()),
                },
                _ => Region::default(),
            }
        }
        fn irq_info(&self, index: u32) -> IrqInfo {
            IrqInfo {
                index,
                count: u32::from(index == 2),
                ..Default::default()
            }
        }
        fn max_dma_maps(&self) -> u32 {
            100_000
        }
        fn dma_map(&mut self, map: &DmaMap, fd: Option<File>) -> Result<(), Refusal> {
            if fd.is_none() {
                return Err(Refusal::new(Rule::DmaNoFd, "no fd"));
            }
            self.maps.push(*map);
            Ok(())
        }
        fn dma_unmap(&mut self, _unmap: &DmaUnmap) -> Result<(), Refusal> {
            Ok(())
        }
        fn region_read(&mut self, _r: u32, offset: u64, data: &mut [u8]) -> Result<(), Refusal> {
            data.fill(offset as u8);
            Ok(())
        }
        fn region_write(&mut self, _r: u32, offset: u64, data: &[u8]) -> Result<(), Refusal> {
            self.writes.push((offset, data.to_vec()));
            Ok(())
        }
        fn set_irqs(&mut self, _request: &SetIrqs, fds: Vec<File>) -> Result<(), Refusal> {
            self.irq_fds += fds.len();
            Ok(())
        }
        fn reset(&mut self) {
            self.resets += 1;
        }
        fn interrupt_fd(&self) -> Option<RawFd> {
            None
        }
        fn deliver_interrupts(&mut self) -> Vec<Refusal> {
            Vec::new()
        }
    }

    fn message(id: u16, command: u16, flags: u32, body: &[u8]) -> Vec<u8> {
        let mut m = Header {
            message_id: id,
            command,
            message_size: (HEADER_SIZE + body.len()) as u32,
            flags,
            error: 0,
        }
        .as_bytes()
        .to_vec();
        m.extend_from_slice(body);
        m
    }

    fn read_reply(s: &mut UnixStream) -> (Header, Vec<u8>) {
        let mut h = [0u8; HEADER_SIZE];
        s.read_exact(&mut h).unwrap();
        let header = Header::read_from_bytes(&h).unwrap();
        let mut body = vec![0u8; header.message_size as usize - HEADER_SIZE];
        s.read_exact(&mut body).unwrap();
        (header, body)
    }

    /// Runs the server on one end of a socket pair with `script` written to the other
    /// end (then closed for writing); returns the replies and the handler.
    fn run(script: &[u8]) -> (Vec<(Header, Vec<u8>)>, Fake, End) {
        let (mut client, server) = UnixStream::pair().unwrap();
        client.write_all(script).unwrap();
        client.shutdown(std::net::Shutdown::Write).unwrap();
        let mut fake = Fake::default();
        let mut log = ClientLog::new("fake");
        let end = serve_connection(server, None, &mut fake, &mut log);
        let mut replies = Vec::new();
        let mut rest = Vec::new();
        client.read_to_end(&mut rest).unwrap();
        let mut cursor = std::io::Cursor::new(rest);
        while (cursor.position() as usize) < cursor.get_ref().len() {
            let mut h = [0u8; HEADER_SIZE];
            cursor.read_exact(&mut h).unwrap();
            let header = Header::read_from_bytes(&h).unwrap();
            let mut body = vec![0u8; header.message_size as usize - HEADER_SIZE];
            cursor.read_exact(&mut body).unwrap();
            replies.push((header, body));
        }
        (replies, fake, end)
    }

    fn version() -> Vec<u8> {
        let mut body = Version { major: 0, minor: 0 }.as_bytes().to_vec();
        body.extend_from_slice(b"{\"capabilities\":{}}\0");
        message(0, CMD_VERSION, 0, &body)
    }

    #[test]
    fn version_then_commands_get_their_replies() {
        let mut script = version();
        let access = RegionAccess {
            offset: 8,
            region: 0,
            count: 4,
        };
        script.extend(message(1, CMD_REGION_READ, 0, access.as_bytes()));
        let mut write = access.as_bytes().to_vec();
        write.extend_from_slice(&[1, 2, 3, 4]);
        script.extend(message(2, CMD_REGION_WRITE, FLAG_NO_REPLY, &write));
        script.extend(message(3, CMD_DEVICE_RESET, 0, &[]));
        let (replies, fake, end) = run(&script);
        assert!(matches!(end, End::Closed), "{end}");
        assert_eq!(replies.len(), 3, "the write asked for no reply");
        let (h, body) = &replies[0];
        assert_eq!((h.command, h.flags), (CMD_VERSION, FLAG_REPLY));
        let caps = std::str::from_utf8(&body[4..body.len() - 1]).unwrap();
        assert!(caps.contains("\"max_dma_maps\":65535"), "{caps}");
        assert_eq!(body.last(), Some(&0));
        assert_eq!(&replies[1].1[16..], &[8, 8, 8, 8]);
        assert_eq!(fake.writes, vec![(8, vec![1, 2, 3, 4])]);
        assert_eq!((replies[2].0.message_id, fake.resets), (3, 1));
    }

    #[test]
    fn commands_before_version_and_bad_lengths_are_refused_and_the_stream_goes_on() {
        let mut script = message(7, CMD_DEVICE_RESET, 0, &[]);
        script.extend(version());
        script.extend(message(8, CMD_DMA_MAP, 0, &[0u8; 8]));
        script.extend(message(9, CMD_DEVICE_GET_INFO, 0, &[0u8; 16]));
        let (replies, fake, end) = run(&script);
        assert!(matches!(end, End::Closed), "{end}");
        assert_eq!(replies[0].0.flags, FLAG_REPLY | FLAG_ERROR);
        assert_eq!(replies[0].0.error, libc::EINVAL as u32);
        assert_eq!(replies[0].0.message_id, 7);
        assert_eq!(replies[2].0.flags, FLAG_REPLY | FLAG_ERROR, "short DMA_MAP");
        assert_eq!(replies[3].0.flags, FLAG_REPLY);
        assert_eq!(fake.resets, 0);
        assert!(fake.maps.is_empty());
    }

    #[test]
    fn an_oversized_message_ends_the_connection_before_any_allocation() {
        let mut script = version();
        let mut huge = message(1, CMD_REGION_WRITE, 0, &[]);
        huge[4..8].copy_from_slice(&u32::MAX.to_le_bytes());
        script.extend(huge);
        let (replies, _, end) = run(&script);
        assert!(
            matches!(&end, End::Broke(r) if r.rule == Rule::MessageSize),
            "{end}"
        );
        assert_eq!(replies.last().unwrap().0.flags, FLAG_REPLY | FLAG_ERROR);
    }

    #[test]
    fn region_accesses_outside_regions_are_refused_before_allocation() {
        let mut script = version();
        for (region, offset, count) in
            [(0, 0xffc, 8), (1, 0, 4), (0, u64::MAX, 4), (0, 0, u32::MAX)]
        {
            let access = RegionAccess {
                offset,
                region,
                count,
            };
            script.extend(message(1, CMD_REGION_READ, 0, access.as_bytes()));
        }
        let (replies, _, _) = run(&script);
        assert_eq!(replies.len(), 5);
        assert!(replies[1..]
            .iter()
            .all(|(h, _)| h.flags == FLAG_REPLY | FLAG_ERROR && h.error == libc::EINVAL as u32));
    }

    #[test]
    fn a_message_split_across_writes_is_read_whole() {
        let (mut client, server) = UnixStream::pair().unwrap();
        let handle = std::thread::spawn(move || {
            let mut fake = Fake::default();
            let mut log = ClientLog::new("fake");
            let end = serve_connection(server, None, &mut fake, &mut log);
            (fake.writes, end)
        });
        let mut script = version();
        let mut write = RegionAccess {
            offset: 0,
            region: 0,
            count: 3,
        }
        .as_bytes()
        .to_vec();
        write.extend_from_slice(b"abc");
        script.extend(message(1, CMD_REGION_WRITE, 0, &write));
        for chunk in script.chunks(5) {
            client.write_all(chunk).unwrap();
            std::thread::sleep(Duration::from_millis(2));
        }
        let (h, _) = read_reply(&mut client);
        assert_eq!(h.command, CMD_VERSION);
        let (h, _) = read_reply(&mut client);
        assert_eq!((h.command, h.flags), (CMD_REGION_WRITE, FLAG_REPLY));
        drop(client);
        let (writes, end) = handle.join().unwrap();
        assert_eq!(writes, vec![(0, b"abc".to_vec())]);
        assert!(matches!(end, End::Closed));
    }

    #[test]
    fn region_info_carries_the_sparse_areas_and_descriptor_when_there_is_room() {
        let (mut client, server) = UnixStream::pair().unwrap();
        let handle = std::thread::spawn(move || {
            let mut fake = Fake::default();
            let mut log = ClientLog::new("fake");
            serve_connection(server, None, &mut fake, &mut log)
        });
        client.write_all(&version()).unwrap();
        read_reply(&mut client);
        let ask = |argsz| RegionInfo {
            argsz,
            index: 2,
            ..Default::default()
        };
        client
            .write_all(&message(
                1,
                CMD_DEVICE_GET_REGION_INFO,
                0,
                ask(32).as_bytes(),
            ))
            .unwrap();
        let (_, body) = read_reply(&mut client);
        let info = RegionInfo::read_from_bytes(&body).unwrap();
        assert_eq!((info.argsz, info.cap_offset, body.len()), (32 + 32, 32, 32));
        client
            .write_all(&message(
                2,
                CMD_DEVICE_GET_REGION_INFO,
                0,
                ask(64).as_bytes(),
            ))
            .unwrap();
        let mut buf = [0u8; 80];
        let mut fds = Vec::new();
        let (n, _) = recv_with_fds(client.as_raw_fd(), &mut buf, &mut fds).unwrap();
        assert_eq!(n, 16 + 64);
        assert_eq!(
            fds.len(),
            1,
            "the mmap descriptor comes with the full answer"
        );
        let info = RegionInfo::read_from_bytes(&buf[16..48]).unwrap();
        assert_eq!(
            (info.cap_offset, info.flags & REGION_FLAG_CAPS),
            (32, REGION_FLAG_CAPS)
        );
        drop(client);
        assert!(matches!(handle.join().unwrap(), End::Closed));
    }
}
