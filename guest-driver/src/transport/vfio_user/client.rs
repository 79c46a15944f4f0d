//! The vfio-user client: the VMM's half of the protocol, as the host transport speaks it
//! to rnicd (docs/hardware-interface.md §9; the protocol is QEMU's,
//! `docs/interop/vfio-user.rst`), on the layouts of `rnic_abi::vfio_user`.
//!
//! One request at a time: a command goes out, then its reply is read and checked before
//! anything else happens.
//!
//! - Every reply must answer the command just sent: the same message id and command, the
//!   reply type. An error reply becomes [`ClientError::Refused`] with its errno, for
//!   every command (DMA_MAP's included).
//! - A reply's size is checked against what its command can be answered with before a
//!   byte of its body is read: a server cannot make the client allocate more than the
//!   command asked for plus [`REPLY_SLACK`]. The capability list of a region's info is
//!   walked with every offset checked against the reply.
//! - File descriptors travel as `SCM_RIGHTS`; those received arrive close-on-exec
//!   (`MSG_CMSG_CLOEXEC`) and are owned at once, so none leaks when a reply is refused.
//! - VERSION sends 0.0 with this client's capabilities and honours the server's:
//!   SET_IRQS goes out in messages of at most `max_msg_fds` descriptors, a region access
//!   above `max_data_xfer_size` and a DMA_MAP beyond `max_dma_maps` are refused here.
//! - A reply that breaks the protocol leaves the stream out of step: the client sends
//!   nothing more after it.
//! - Writes use `MSG_NOSIGNAL`: a server that went away is an error ([`ClientError::Closed`]),
//!   never a SIGPIPE (this code also runs inside C programs, in `libibverbs.so.1`).

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use rnic_abi::vfio_user::{
    self as wire, CapHeader, DeviceInfo, DmaMap, DmaUnmap, Header, IrqInfo, RegionAccess,
    RegionInfo, SetIrqs, SparseArea, SparseMmap, Version, HEADER_SIZE,
};
use zerocopy::{FromBytes, Immutable, IntoBytes};

/// What a reply may carry beyond the body its command expects (read and ignored).
pub const REPLY_SLACK: usize = 256;
/// Descriptors this client takes in one message, as it tells the server.
pub const CLIENT_MAX_MSG_FDS: usize = 8;
/// Bytes of data one region access carries at most, as this client tells the server.
pub const CLIENT_MAX_DATA_XFER: usize = 1 << 20;
/// The capabilities JSON of this client's VERSION.
const CLIENT_CAPS: &str = r#"{"capabilities":{"max_msg_fds":8,"max_data_xfer_size":1048576}}"#;
/// The protocol's default `max_msg_fds` when the server names none.
const DEFAULT_MAX_MSG_FDS: u64 = 1;
/// The protocol's default `max_data_xfer_size`.
const DEFAULT_MAX_DATA_XFER: u64 = 1 << 20;
/// The protocol's default `max_dma_maps`.
const DEFAULT_MAX_DMA_MAPS: u64 = 65535;
/// Descriptors one reply may carry (only DEVICE_GET_REGION_INFO carries any: one).
const MAX_REPLY_FDS: usize = 4;
/// Room for capabilities in the first DEVICE_GET_REGION_INFO of a region.
const REGION_CAP_ROOM: usize = 256;
/// The most a region's info with its capabilities may take.
const MAX_REGION_INFO: usize = 64 << 10;

/// What went wrong in one exchange with the server.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The server closed the connection (it exited, or dropped this client).
    #[error("the server closed the connection")]
    Closed,
    /// The server answered with an error reply.
    #[error("the server refused {}: {}", wire::command_name(*command), errno_text(*errno))]
    Refused {
        /// The command refused.
        command: u16,
        /// The errno of the reply (0: the server gave none).
        errno: u32,
    },
    /// No reply came in time (only VERSION waits with a limit).
    #[error("no reply to {} within {:?}", wire::command_name(*command), waited)]
    NoReply {
        /// The command.
        command: u16,
        /// How long the client waited.
        waited: Duration,
    },
    /// The request exceeds what the server said it takes, or what this client sends.
    #[error("{what}")]
    Limit {
        /// What and which limit.
        what: String,
        /// The errno it stands for.
        errno: i32,
    },
    /// The server's reply breaks the protocol.
    #[error("protocol violation: {0}")]
    Protocol(String),
    /// The socket failed otherwise.
    #[error("socket: {0}")]
    Io(#[source] io::Error),
}

impl ClientError {
    /// The errno this error stands for (for callers that hand errors on as errno).
    pub fn errno(&self) -> i32 {
        match self {
            ClientError::Closed => libc::ENOTCONN,
            ClientError::Refused { errno: 0, .. } => libc::EIO,
            ClientError::Refused { errno, .. } => i32::try_from(*errno).unwrap_or(libc::EIO),
            ClientError::NoReply { .. } => libc::ETIMEDOUT,
            ClientError::Limit { errno, .. } => *errno,
            ClientError::Protocol(_) => libc::EPROTO,
            ClientError::Io(e) => e.raw_os_error().unwrap_or(libc::EIO),
        }
    }
}

/// An errno as text, `no errno given` for 0 (today's rnicd gives none for most refusals).
fn errno_text(errno: u32) -> String {
    match i32::try_from(errno) {
        Ok(0) => "no errno given".into(),
        Ok(e) => io::Error::from_raw_os_error(e).to_string(),
        Err(_) => format!("errno {errno}"),
    }
}

/// What the server's VERSION reply says it takes, combined with this client's own limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerCaps {
    /// Descriptors per message (SET_IRQS is split to fit).
    pub max_msg_fds: usize,
    /// Data bytes per region access.
    pub max_data_xfer_size: usize,
    /// DMA mappings at once.
    pub max_dma_maps: u64,
}

/// The VERSION body's JSON, `{"capabilities":{...}}`; every field is optional.
#[derive(Debug, Default, serde::Deserialize)]
struct VersionJson {
    #[serde(default)]
    capabilities: CapsJson,
}

/// The capabilities the client looks at; others (migration, ...) are ignored.
#[derive(Debug, Default, serde::Deserialize)]
struct CapsJson {
    max_msg_fds: Option<u64>,
    max_data_xfer_size: Option<u64>,
    max_dma_maps: Option<u64>,
}

/// Parses the body of a VERSION reply: version 0.x and the capabilities.
fn parse_version(body: &[u8]) -> Result<ServerCaps, String> {
    let (version, json) = Version::read_from_prefix(body)
        .map_err(|_| format!("a {}-byte VERSION reply holds no version", body.len()))?;
    if version.major != wire::VERSION_MAJOR {
        return Err(format!(
            "the server speaks vfio-user {}.{}, this client {}.{}",
            version.major,
            version.minor,
            wire::VERSION_MAJOR,
            wire::VERSION_MINOR
        ));
    }
    // NUL-terminated; an absent NUL is forgiven, an empty string means defaults.
    let json = json.split(|&b| b == 0).next().unwrap_or_default();
    let parsed: VersionJson = if json.iter().all(u8::is_ascii_whitespace) {
        VersionJson::default()
    } else {
        serde_json::from_slice(json)
            .map_err(|e| format!("the VERSION reply's capabilities are no JSON object: {e}"))?
    };
    let c = parsed.capabilities;
    let fds = c.max_msg_fds.unwrap_or(DEFAULT_MAX_MSG_FDS);
    let xfer = c.max_data_xfer_size.unwrap_or(DEFAULT_MAX_DATA_XFER);
    Ok(ServerCaps {
        max_msg_fds: usize::try_from(fds)
            .unwrap_or(usize::MAX)
            .min(CLIENT_MAX_MSG_FDS),
        max_data_xfer_size: usize::try_from(xfer)
            .unwrap_or(usize::MAX)
            .min(CLIENT_MAX_DATA_XFER),
        max_dma_maps: c.max_dma_maps.unwrap_or(DEFAULT_MAX_DMA_MAPS),
    })
}

/// A region as DEVICE_GET_REGION_INFO describes it.
#[derive(Debug)]
pub struct Region {
    /// The info itself (`argsz` is the size of the whole reply body).
    pub info: RegionInfo,
    /// The descriptor to mmap the region from, at `info.offset`, if it came with one.
    pub fd: Option<OwnedFd>,
    /// The mmappable areas of the sparse mmap capability, relative to the region.
    pub sparse: Vec<SparseArea>,
}

/// Walks the capability list of a region's info reply `body` (which starts with the
/// [`RegionInfo`]; offsets are from its start) and collects the sparse mmap areas. Every
/// offset must lie after the info and after the capability before it (no loops), and
/// every structure inside the reply.
fn sparse_areas(info: &RegionInfo, body: &[u8]) -> Result<Vec<SparseArea>, String> {
    let mut out = Vec::new();
    let mut next = info.cap_offset as usize;
    let mut prev = 0;
    while next != 0 {
        if next < size_of::<RegionInfo>() || next <= prev {
            return Err(format!(
                "region {}: a capability at offset {next}, inside the region info or not after the one before ({prev})",
                info.index
            ));
        }
        prev = next;
        let outside = || {
            format!(
                "region {}: the capability at offset {next} runs past the {}-byte reply",
                info.index,
                body.len()
            )
        };
        let (header, rest) = body
            .get(next..)
            .and_then(|b| CapHeader::read_from_prefix(b).ok())
            .ok_or_else(outside)?;
        if header.id == wire::CAP_SPARSE_MMAP {
            let (sparse, areas) = SparseMmap::read_from_prefix(rest).map_err(|_| outside())?;
            let n = sparse.nr_areas as usize;
            let fits = n
                .checked_mul(size_of::<SparseArea>())
                .is_some_and(|len| len <= areas.len());
            if !fits {
                return Err(format!(
                    "region {}: {n} sparse mmap areas do not fit the {}-byte reply",
                    info.index,
                    body.len()
                ));
            }
            for chunk in areas.chunks_exact(size_of::<SparseArea>()).take(n) {
                let (area, _) = SparseArea::read_from_prefix(chunk).map_err(|_| outside())?;
                out.push(area);
            }
        }
        next = header.next as usize;
    }
    Ok(out)
}

/// A checked reply: its header, body and the descriptors that came with it.
struct Reply {
    body: Vec<u8>,
    fds: Vec<OwnedFd>,
}

/// A negotiated vfio-user connection.
#[derive(Debug)]
pub struct Client {
    sock: UnixStream,
    next_id: u16,
    caps: ServerCaps,
    /// DMA mappings made and not unmapped, against [`ServerCaps::max_dma_maps`].
    dma_maps: u64,
    /// Why the stream is out of step, once a reply broke the protocol.
    broken: Option<String>,
}

impl Client {
    /// Negotiates on the connected `sock`: sends VERSION and waits for the reply until
    /// `deadline`. An error reply is [`ClientError::Refused`] (EBUSY: another client holds
    /// the socket), no reply [`ClientError::NoReply`].
    pub fn negotiate(sock: UnixStream, deadline: Instant) -> Result<Client, ClientError> {
        let mut client = Client {
            sock,
            next_id: 0,
            caps: ServerCaps {
                max_msg_fds: 1,
                max_data_xfer_size: DEFAULT_MAX_DATA_XFER as usize,
                max_dma_maps: DEFAULT_MAX_DMA_MAPS,
            },
            dma_maps: 0,
            broken: None,
        };
        let version = Version {
            major: wire::VERSION_MAJOR,
            minor: wire::VERSION_MINOR,
        };
        let mut body = version.as_bytes().to_vec();
        body.extend_from_slice(CLIENT_CAPS.as_bytes());
        body.push(0);
        let id = client.next_id();
        match client.send(wire::CMD_VERSION, id, &body, &[]) {
            // A server that refuses at once may answer and close before it reads the
            // command: its reply is still there to read.
            Ok(()) | Err(ClientError::Closed) => {}
            Err(e) => return Err(e),
        }
        let max = size_of::<Version>() + wire::MAX_VERSION_BODY as usize;
        let reply = client.reply(wire::CMD_VERSION, id, max, Some(deadline))?;
        client.caps = parse_version(&reply.body).map_err(ClientError::Protocol)?;
        log::debug!(
            "vfio-user: negotiated, server capabilities {:?}",
            client.caps
        );
        Ok(client)
    }

    /// What the server takes, as negotiated.
    pub fn caps(&self) -> ServerCaps {
        self.caps
    }

    /// The socket, for watching it (the watcher polls a duplicate of it).
    pub fn socket(&self) -> &UnixStream {
        &self.sock
    }

    /// Shuts the connection down both ways, as a VMM that goes away does.
    pub fn shutdown(&self) -> io::Result<()> {
        self.sock.shutdown(std::net::Shutdown::Both)
    }

    /// DEVICE_GET_INFO.
    pub fn device_info(&mut self) -> Result<DeviceInfo, ClientError> {
        let req = DeviceInfo {
            argsz: size_of::<DeviceInfo>() as u32,
            ..DeviceInfo::default()
        };
        self.fixed(wire::CMD_DEVICE_GET_INFO, &req)
    }

    /// A command whose body and reply body are the same fixed-size structure.
    fn fixed<T: IntoBytes + FromBytes + Immutable>(
        &mut self,
        command: u16,
        req: &T,
    ) -> Result<T, ClientError> {
        let reply = self.request(command, req.as_bytes(), &[], size_of::<T>())?;
        read_body(&reply.body, command)
    }

    /// DEVICE_GET_REGION_INFO of region `index`, with its capabilities (asked again with
    /// more room when the first answer says they did not fit).
    pub fn region_info(&mut self, index: u32) -> Result<Region, ClientError> {
        let mut room = size_of::<RegionInfo>() + REGION_CAP_ROOM;
        loop {
            let req = RegionInfo {
                argsz: room as u32,
                index,
                ..RegionInfo::default()
            };
            let mut reply =
                self.request(wire::CMD_DEVICE_GET_REGION_INFO, req.as_bytes(), &[], room)?;
            let info: RegionInfo = read_body(&reply.body, wire::CMD_DEVICE_GET_REGION_INFO)?;
            if info.index != index {
                return Err(self.protocol(format!(
                    "asked for region {index}, the reply describes region {}",
                    info.index
                )));
            }
            let whole = info.argsz as usize;
            if whole > reply.body.len() {
                // The capabilities did not fit the room offered: ask once more with room
                // for all of them, within reason.
                if whole <= room || whole > MAX_REGION_INFO {
                    return Err(self.protocol(format!(
                        "region {index}: the info needs {whole} bytes (offered {room}, at most {MAX_REGION_INFO})"
                    )));
                }
                room = whole;
                continue;
            }
            let sparse = if info.flags & wire::REGION_FLAG_CAPS != 0 {
                sparse_areas(&info, &reply.body[..whole.max(size_of::<RegionInfo>())])
                    .map_err(|e| self.protocol(e))?
            } else {
                Vec::new()
            };
            if reply.fds.len() > 1 {
                return Err(self.protocol(format!(
                    "region {index}: the reply carries {} descriptors, at most one expected",
                    reply.fds.len()
                )));
            }
            return Ok(Region {
                info,
                fd: reply.fds.pop(),
                sparse,
            });
        }
    }

    /// DEVICE_GET_IRQ_INFO of IRQ index `index`.
    pub fn irq_info(&mut self, index: u32) -> Result<IrqInfo, ClientError> {
        let req = IrqInfo {
            argsz: size_of::<IrqInfo>() as u32,
            index,
            ..IrqInfo::default()
        };
        self.fixed(wire::CMD_DEVICE_GET_IRQ_INFO, &req)
    }

    /// DMA_MAP: `size` bytes of `fd` from `offset` at device address `address`, readable
    /// and writable by the device.
    pub fn dma_map(
        &mut self,
        offset: u64,
        address: u64,
        size: u64,
        fd: RawFd,
    ) -> Result<(), ClientError> {
        if self.dma_maps >= self.caps.max_dma_maps {
            return Err(ClientError::Limit {
                what: format!(
                    "DMA_MAP of {address:#x}+{size:#x}: the server takes at most {} DMA mappings (its max_dma_maps)",
                    self.caps.max_dma_maps
                ),
                errno: libc::ENOSPC,
            });
        }
        let req = DmaMap {
            argsz: size_of::<DmaMap>() as u32,
            flags: wire::DMA_MAP_READ | wire::DMA_MAP_WRITE,
            offset,
            address,
            size,
        };
        self.request(
            wire::CMD_DMA_MAP,
            req.as_bytes(),
            &[fd],
            size_of::<DmaMap>(),
        )?;
        self.dma_maps += 1;
        Ok(())
    }

    /// DMA_UNMAP of `size` bytes at device address `address`.
    pub fn dma_unmap(&mut self, address: u64, size: u64) -> Result<(), ClientError> {
        let req = DmaUnmap {
            argsz: size_of::<DmaUnmap>() as u32,
            flags: 0,
            address,
            size,
        };
        self.request(
            wire::CMD_DMA_UNMAP,
            req.as_bytes(),
            &[],
            size_of::<DmaUnmap>(),
        )?;
        self.dma_maps = self.dma_maps.saturating_sub(1);
        Ok(())
    }

    /// DEVICE_SET_IRQS of `count` interrupts of `index` from `start`, with `fds` (one per
    /// interrupt, or none) beside it, in as many messages as the server's `max_msg_fds`
    /// asks for (each covering the interrupts of its descriptors).
    pub fn set_irqs(
        &mut self,
        index: u32,
        flags: u32,
        start: u32,
        count: u32,
        fds: &[RawFd],
    ) -> Result<(), ClientError> {
        let one = |c: &mut Client, start: u32, count: u32, fds: &[RawFd]| {
            let req = SetIrqs {
                argsz: size_of::<SetIrqs>() as u32,
                flags,
                index,
                start,
                count,
            };
            c.request(wire::CMD_DEVICE_SET_IRQS, req.as_bytes(), fds, 0)
                .map(drop)
        };
        if fds.is_empty() {
            return one(self, start, count, &[]);
        }
        if fds.len() != count as usize {
            return Err(ClientError::Limit {
                what: format!(
                    "SET_IRQS of {count} interrupts with {} descriptors: give one per interrupt",
                    fds.len()
                ),
                errno: libc::EINVAL,
            });
        }
        let per = self.caps.max_msg_fds;
        if per == 0 {
            return Err(ClientError::Limit {
                what: "SET_IRQS with eventfds: the server takes no descriptors (max_msg_fds 0)"
                    .into(),
                errno: libc::EOPNOTSUPP,
            });
        }
        for (i, chunk) in fds.chunks(per).enumerate() {
            one(self, start + (i * per) as u32, chunk.len() as u32, chunk)?;
        }
        Ok(())
    }

    /// REGION_READ of `buf.len()` bytes at `offset` of `region`.
    pub fn region_read(
        &mut self,
        region: u32,
        offset: u64,
        buf: &mut [u8],
    ) -> Result<(), ClientError> {
        let count = self.check_xfer("REGION_READ", buf.len())?;
        let req = RegionAccess {
            offset,
            region,
            count,
        };
        let reply = self.request(
            wire::CMD_REGION_READ,
            req.as_bytes(),
            &[],
            size_of::<RegionAccess>() + buf.len(),
        )?;
        let (answer, data) = RegionAccess::read_from_prefix(&reply.body)
            .map_err(|_| self.protocol("a REGION_READ reply without its header".into()))?;
        if answer.count != count || data.len() != buf.len() {
            return Err(self.protocol(format!(
                "REGION_READ of {count} bytes answered with {} bytes (count {})",
                data.len(),
                answer.count
            )));
        }
        buf.copy_from_slice(data);
        Ok(())
    }

    /// REGION_WRITE of `data` at `offset` of `region`.
    pub fn region_write(
        &mut self,
        region: u32,
        offset: u64,
        data: &[u8],
    ) -> Result<(), ClientError> {
        let count = self.check_xfer("REGION_WRITE", data.len())?;
        let req = RegionAccess {
            offset,
            region,
            count,
        };
        let mut body = req.as_bytes().to_vec();
        body.extend_from_slice(data);
        self.request(
            wire::CMD_REGION_WRITE,
            &body,
            &[],
            size_of::<RegionAccess>(),
        )
        .map(drop)
    }

    /// DEVICE_RESET.
    pub fn reset(&mut self) -> Result<(), ClientError> {
        self.request(wire::CMD_DEVICE_RESET, &[], &[], 0).map(drop)
    }

    /// Refuses a region access larger than the server takes.
    fn check_xfer(&self, what: &str, len: usize) -> Result<u32, ClientError> {
        if len > self.caps.max_data_xfer_size {
            return Err(ClientError::Limit {
                what: format!(
                    "{what} of {len} bytes: the server takes at most {} bytes per access (its max_data_xfer_size)",
                    self.caps.max_data_xfer_size
                ),
                errno: libc::EINVAL,
            });
        }
        // Within the limit, which is at most 1 MiB.
        Ok(len as u32)
    }

    fn next_id(&mut self) -> u16 {
        let id = self.next_id;
        self.next_id = id.wrapping_add(1);
        id
    }

    /// Sends `command` with `body` and `fds`, and reads its reply, whose body may be
    /// `max_body` bytes (plus [`REPLY_SLACK`]).
    fn request(
        &mut self,
        command: u16,
        body: &[u8],
        fds: &[RawFd],
        max_body: usize,
    ) -> Result<Reply, ClientError> {
        if let Some(why) = &self.broken {
            return Err(ClientError::Protocol(format!(
                "the connection is out of step since an earlier reply: {why}"
            )));
        }
        let id = self.next_id();
        self.send(command, id, body, fds)?;
        self.reply(command, id, max_body + REPLY_SLACK, None)
    }

    /// Records a protocol violation (nothing more is sent) and returns it as an error.
    fn protocol(&mut self, what: String) -> ClientError {
        self.broken = Some(what.clone());
        ClientError::Protocol(what)
    }

    /// Sends one message: the header, `body`, and `fds` with its first byte.
    fn send(
        &mut self,
        command: u16,
        id: u16,
        body: &[u8],
        fds: &[RawFd],
    ) -> Result<(), ClientError> {
        let size = HEADER_SIZE + body.len();
        let header = Header {
            message_id: id,
            command,
            message_size: u32::try_from(size).map_err(|_| ClientError::Limit {
                what: format!("a {size}-byte message"),
                errno: libc::EMSGSIZE,
            })?,
            flags: 0,
            error: 0,
        };
        let mut msg = Vec::with_capacity(size);
        msg.extend_from_slice(header.as_bytes());
        msg.extend_from_slice(body);
        let mut sent = 0;
        while sent < msg.len() {
            let with = if sent == 0 { fds } else { &[][..] };
            sent += send_with_fds(self.sock.as_raw_fd(), &msg[sent..], with)?;
        }
        Ok(())
    }

    /// Reads the reply to message `id` (`command`), with a body of at most `max_body`
    /// bytes; with a `deadline`, gives up then ([`ClientError::NoReply`]).
    fn reply(
        &mut self,
        command: u16,
        id: u16,
        max_body: usize,
        deadline: Option<Instant>,
    ) -> Result<Reply, ClientError> {
        let started = Instant::now();
        let fd = self.sock.as_raw_fd();
        let mut fds = Vec::new();
        let mut head = [0u8; HEADER_SIZE];
        let mut got = 0;
        while got < HEADER_SIZE {
            wait_readable(fd, deadline, command, started)?;
            got += recv_with_fds(fd, &mut head[got..], &mut fds).map_err(|e| match e {
                ClientError::Protocol(m) => self.protocol(m),
                e => e,
            })?;
        }
        let header = Header::read_from_bytes(&head)
            .map_err(|_| self.protocol("a reply header of the wrong size".into()))?;
        let name = wire::command_name(command);
        if header.flags & wire::FLAG_TYPE_MASK != wire::FLAG_REPLY {
            return Err(self.protocol(format!(
                "expected the reply to {name}, got a message of type {:#x} (command {})",
                header.flags & wire::FLAG_TYPE_MASK,
                header.command
            )));
        }
        if header.message_id != id || header.command != command {
            return Err(self.protocol(format!(
                "expected the reply to {name} (message {id}), got one to {} (message {})",
                wire::command_name(header.command),
                header.message_id
            )));
        }
        let size = header.message_size as usize;
        let Some(body_len) = size.checked_sub(HEADER_SIZE) else {
            return Err(self.protocol(format!(
                "the reply to {name} says it has {size} bytes, less than its header"
            )));
        };
        if body_len > max_body {
            return Err(self.protocol(format!(
                "the reply to {name} announces {body_len} bytes after its header, at most {max_body} expected"
            )));
        }
        let mut body = vec![0u8; body_len];
        let mut got = 0;
        while got < body_len {
            wait_readable(fd, deadline, command, started)?;
            got += recv_with_fds(fd, &mut body[got..], &mut fds).map_err(|e| match e {
                ClientError::Protocol(m) => self.protocol(m),
                e => e,
            })?;
        }
        if header.flags & wire::FLAG_ERROR != 0 {
            return Err(ClientError::Refused {
                command,
                errno: header.error,
            });
        }
        Ok(Reply { body, fds })
    }
}

/// The fixed-size body of a reply, from the start of `body`.
fn read_body<T: FromBytes>(body: &[u8], command: u16) -> Result<T, ClientError> {
    T::read_from_prefix(body).map(|(t, _)| t).map_err(|_| {
        ClientError::Protocol(format!(
            "the reply to {} has {} bytes, fewer than its {}-byte body",
            wire::command_name(command),
            body.len(),
            size_of::<T>()
        ))
    })
}

/// With a `deadline`, waits until `fd` is readable or the deadline passes.
fn wait_readable(
    fd: RawFd,
    deadline: Option<Instant>,
    command: u16,
    started: Instant,
) -> Result<(), ClientError> {
    let Some(deadline) = deadline else {
        return Ok(());
    };
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let ms = i32::try_from(left.as_micros().div_ceil(1000)).unwrap_or(i32::MAX);
        let mut pfd = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd that lives across the call.
        let n = unsafe { libc::poll(&mut pfd, 1, ms) };
        if n > 0 {
            // Readable, or closed (the read then says so).
            return Ok(());
        }
        if n == 0 {
            return Err(ClientError::NoReply {
                command,
                waited: started.elapsed(),
            });
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(ClientError::Io(e));
        }
    }
}

/// The error of a failed socket call: a peer that went away is [`ClientError::Closed`].
fn socket_error(e: io::Error) -> ClientError {
    match e.raw_os_error() {
        Some(libc::EPIPE | libc::ECONNRESET | libc::ENOTCONN) => ClientError::Closed,
        _ => ClientError::Io(e),
    }
}

/// One `sendmsg` of `data` with `fds` as `SCM_RIGHTS` (none if empty), without SIGPIPE;
/// returns the bytes sent (the descriptors go with the first byte).
fn send_with_fds(sock: RawFd, data: &[u8], fds: &[RawFd]) -> Result<usize, ClientError> {
    let fd_bytes = std::mem::size_of_val(fds);
    let space = if fds.is_empty() {
        0
    } else {
        // SAFETY: CMSG_SPACE only computes a size.
        unsafe { libc::CMSG_SPACE(fd_bytes as u32) as usize }
    };
    // u64 words keep the control buffer aligned for cmsghdr.
    let mut control = vec![0u64; space.div_ceil(8)];
    let mut iov = libc::iovec {
        iov_base: data.as_ptr() as *mut libc::c_void,
        iov_len: data.len(),
    };
    // SAFETY: a zeroed msghdr is a valid empty one; the fields set below point at live
    // buffers of the lengths given.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    if !fds.is_empty() {
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = space as _;
        // SAFETY: the control buffer holds CMSG_SPACE(fd_bytes) bytes, room for one
        // header and the descriptors; CMSG_FIRSTHDR of it is non-null and aligned.
        unsafe {
            let cmsg = libc::CMSG_FIRSTHDR(&msg);
            (*cmsg).cmsg_level = libc::SOL_SOCKET;
            (*cmsg).cmsg_type = libc::SCM_RIGHTS;
            (*cmsg).cmsg_len = libc::CMSG_LEN(fd_bytes as u32) as _;
            std::ptr::copy_nonoverlapping(
                fds.as_ptr().cast::<u8>(),
                libc::CMSG_DATA(cmsg),
                fd_bytes,
            );
        }
    }
    loop {
        // SAFETY: `msg` describes live buffers (data, control) for the whole call.
        let n = unsafe { libc::sendmsg(sock, &msg, libc::MSG_NOSIGNAL) };
        if n >= 0 {
            return Ok(n as usize);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(socket_error(e));
        }
    }
}

/// One `recvmsg` into `buf`, taking the descriptors that come with it (close-on-exec)
/// into `fds`; returns the bytes read, [`ClientError::Closed`] at the end of the stream.
fn recv_with_fds(
    sock: RawFd,
    buf: &mut [u8],
    fds: &mut Vec<OwnedFd>,
) -> Result<usize, ClientError> {
    // SAFETY: CMSG_SPACE only computes a size.
    let space = unsafe { libc::CMSG_SPACE((MAX_REPLY_FDS * size_of::<RawFd>()) as u32) as usize };
    let mut control = vec![0u64; space.div_ceil(8)];
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: a zeroed msghdr is a valid empty one; the fields set below point at live
    // buffers of the lengths given.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = space as _;
    let n = loop {
        // SAFETY: `msg` describes live buffers (buf, control) for the whole call.
        let n = unsafe { libc::recvmsg(sock, &mut msg, libc::MSG_CMSG_CLOEXEC) };
        if n >= 0 {
            break n as usize;
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(socket_error(e));
        }
    };
    // Own every descriptor that came before looking at anything else, so that all of
    // them close however this ends.
    // SAFETY: the kernel filled msg_control with msg_controllen bytes of cmsghdrs;
    // CMSG_FIRSTHDR/NXTHDR stay inside them.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(cmsg);
                let len = (*cmsg).cmsg_len as usize - libc::CMSG_LEN(0) as usize;
                for i in 0..len / size_of::<RawFd>() {
                    let fd = data
                        .add(i * size_of::<RawFd>())
                        .cast::<RawFd>()
                        .read_unaligned();
                    fds.push(OwnedFd::from_raw_fd(fd));
                }
            }
            cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
        }
    }
    if msg.msg_flags & libc::MSG_CTRUNC != 0 {
        return Err(ClientError::Protocol(format!(
            "a reply came with more than {MAX_REPLY_FDS} descriptors"
        )));
    }
    if n == 0 && !buf.is_empty() {
        return Err(ClientError::Closed);
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    /// A fake server's end of a socket pair: reads commands, answers what the test says.
    struct Server(UnixStream);

    impl Server {
        /// Reads one command: its header and body.
        fn command(&mut self) -> (Header, Vec<u8>) {
            let mut h = [0u8; HEADER_SIZE];
            self.0.read_exact(&mut h).unwrap();
            let h = Header::read_from_bytes(&h).unwrap();
            let mut body = vec![0u8; h.message_size as usize - HEADER_SIZE];
            self.0.read_exact(&mut body).unwrap();
            (h, body)
        }

        /// Answers `to` with `body` and the flags and errno given.
        fn answer(&mut self, to: &Header, flags: u32, error: u32, body: &[u8]) {
            let h = Header {
                message_id: to.message_id,
                command: to.command,
                message_size: (HEADER_SIZE + body.len()) as u32,
                flags: wire::FLAG_REPLY | flags,
                error,
            };
            self.0.write_all(h.as_bytes()).unwrap();
            self.0.write_all(body).unwrap();
        }

        /// Answers the next command, which must be VERSION, with `json`.
        fn version(&mut self, json: &str) {
            let (h, body) = self.command();
            assert_eq!(h.command, wire::CMD_VERSION);
            let sent = std::str::from_utf8(&body[4..body.len() - 1]).unwrap();
            assert_eq!(sent, CLIENT_CAPS);
            assert_eq!(body.last(), Some(&0), "NUL-terminated");
            let mut reply = Version::default().as_bytes().to_vec();
            reply.extend_from_slice(json.as_bytes());
            reply.push(0);
            self.answer(&h, 0, 0, &reply);
        }
    }

    /// A client negotiated with a fake server that says `json`, run by `serve` in a thread.
    fn pair(json: &'static str, serve: impl FnOnce(Server) + Send + 'static) -> Client {
        let (a, b) = UnixStream::pair().unwrap();
        std::thread::spawn(move || {
            let mut s = Server(b);
            s.version(json);
            serve(s);
        });
        Client::negotiate(a, Instant::now() + Duration::from_secs(5)).unwrap()
    }

    #[test]
    fn version_capabilities_are_parsed_and_capped() {
        let v = |json: &str| {
            let mut b = Version::default().as_bytes().to_vec();
            b.extend_from_slice(json.as_bytes());
            b.push(0);
            parse_version(&b)
        };
        let c = v(r#"{"capabilities":{"max_msg_fds":1,"max_data_xfer_size":1048576,"migration":{"pgsize":4096}}}"#).unwrap();
        assert_eq!(
            (c.max_msg_fds, c.max_data_xfer_size, c.max_dma_maps),
            (1, 1 << 20, 65535)
        );
        let c =
            v(r#"{"capabilities":{"max_msg_fds":64,"max_data_xfer_size":65536,"max_dma_maps":3}}"#)
                .unwrap();
        assert_eq!(
            c.max_msg_fds, CLIENT_MAX_MSG_FDS,
            "never more than the client said"
        );
        assert_eq!((c.max_data_xfer_size, c.max_dma_maps), (65536, 3));
        assert_eq!(v("").unwrap().max_msg_fds, 1, "the protocol's defaults");
        assert!(v("{not json").unwrap_err().contains("JSON"));
        let mut newer = Version { major: 1, minor: 0 }.as_bytes().to_vec();
        newer.push(0);
        assert!(parse_version(&newer).unwrap_err().contains("vfio-user 1.0"));
        assert!(parse_version(&[0]).is_err());
    }

    #[test]
    fn an_error_reply_carries_its_errno_dma_map_included() {
        let mut c = pair("{}", |mut s| {
            let (h, body) = s.command();
            assert_eq!(h.command, wire::CMD_DMA_MAP);
            let m = DmaMap::read_from_bytes(&body).unwrap();
            assert_eq!((m.argsz, m.address, m.size), (32, 0x1000, 0x2000));
            s.answer(&h, wire::FLAG_ERROR, libc::EINVAL as u32, &[]);
            let (h, _) = s.command();
            s.answer(&h, wire::FLAG_ERROR, 0, &[]);
        });
        let f = std::fs::File::open("/dev/null").unwrap();
        let e = c.dma_map(0, 0x1000, 0x2000, f.as_raw_fd()).unwrap_err();
        assert!(
            matches!(e, ClientError::Refused { command: wire::CMD_DMA_MAP, errno } if errno == libc::EINVAL as u32),
            "{e:?}"
        );
        assert_eq!(e.errno(), libc::EINVAL);
        assert!(e.to_string().contains("refused DMA_MAP"), "{e}");
        let e = c.reset().unwrap_err();
        assert_eq!(e.errno(), libc::EIO, "no errno given: EIO");
        assert!(e.to_string().contains("no errno given"), "{e}");
    }

    #[test]
    fn replies_must_answer_the_command_sent() {
        let mut c = pair("{}", |mut s| {
            let (mut h, _) = s.command();
            h.message_id = h.message_id.wrapping_add(7);
            s.answer(&h, 0, 0, &[]);
        });
        let e = c.reset().unwrap_err();
        assert!(
            matches!(&e, ClientError::Protocol(m) if m.contains("message")),
            "{e}"
        );
        let e = c.reset().unwrap_err();
        assert!(e.to_string().contains("out of step"), "{e}");
    }

    #[test]
    fn an_oversized_reply_is_refused_before_it_is_read() {
        let mut c = pair("{}", |mut s| {
            let (h, _) = s.command();
            let big = Header {
                message_id: h.message_id,
                command: h.command,
                message_size: u32::MAX,
                flags: wire::FLAG_REPLY,
                error: 0,
            };
            s.0.write_all(big.as_bytes()).unwrap();
        });
        let e = c.irq_info(wire::IRQ_MSIX).unwrap_err();
        assert!(e.to_string().contains("at most"), "{e}");
    }

    #[test]
    fn set_irqs_is_split_to_the_servers_max_msg_fds() {
        let mut c = pair(r#"{"capabilities":{"max_msg_fds":2}}"#, |mut s| {
            for (start, count) in [(0, 2), (2, 2), (4, 1)] {
                let (h, body) = s.command();
                let m = SetIrqs::read_from_bytes(&body).unwrap();
                assert_eq!((m.start, m.count), (start, count));
                s.answer(&h, 0, 0, &[]);
            }
        });
        let f = std::fs::File::open("/dev/null").unwrap();
        let fds = [f.as_raw_fd(); 5];
        let flags = wire::IRQ_SET_DATA_EVENTFD | wire::IRQ_SET_ACTION_TRIGGER;
        c.set_irqs(wire::IRQ_MSIX, flags, 0, 5, &fds).unwrap();
    }

    #[test]
    fn region_accesses_above_the_limit_are_refused_here() {
        let mut c = pair(r#"{"capabilities":{"max_data_xfer_size":8}}"#, |mut s| {
            let (h, body) = s.command();
            let a = RegionAccess::read_from_prefix(&body).unwrap().0;
            let mut reply = a.as_bytes().to_vec();
            reply.extend_from_slice(&[0xab; 8]);
            s.answer(&h, 0, 0, &reply);
        });
        let mut buf = [0u8; 16];
        let e = c.region_read(0, 0, &mut buf).unwrap_err();
        assert!(
            matches!(
                e,
                ClientError::Limit {
                    errno: libc::EINVAL,
                    ..
                }
            ),
            "{e}"
        );
        c.region_read(0, 0, &mut buf[..8]).unwrap();
        assert_eq!(buf[..8], [0xab; 8]);
    }

    #[test]
    fn a_closed_server_is_closed_not_a_signal() {
        let mut c = pair("{}", drop);
        std::thread::sleep(Duration::from_millis(50));
        assert!(matches!(c.reset(), Err(ClientError::Closed)));
    }

    #[test]
    fn an_ebusy_reply_to_version_is_refused_with_ebusy() {
        let (a, b) = UnixStream::pair().unwrap();
        // The server answers and closes without reading the command.
        let h = Header {
            message_id: 0,
            command: wire::CMD_VERSION,
            message_size: HEADER_SIZE as u32,
            flags: wire::FLAG_REPLY | wire::FLAG_ERROR,
            error: libc::EBUSY as u32,
        };
        (&b).write_all(h.as_bytes()).unwrap();
        drop(b);
        let e = Client::negotiate(a, Instant::now() + Duration::from_secs(1)).unwrap_err();
        assert!(
            matches!(e, ClientError::Refused { errno, .. } if errno == libc::EBUSY as u32),
            "{e:?}"
        );
    }

    #[test]
    fn a_silent_server_is_no_reply_after_the_deadline() {
        let (a, _b) = UnixStream::pair().unwrap();
        let start = Instant::now();
        let e = Client::negotiate(a, start + Duration::from_millis(100)).unwrap_err();
        assert!(matches!(e, ClientError::NoReply { .. }), "{e:?}");
        assert!(start.elapsed() >= Duration::from_millis(100));
    }

    /// A region info reply body: the info, then `caps` at offset 32.
    fn region_body(caps: &[u8], cap_offset: u32) -> (RegionInfo, Vec<u8>) {
        let info = RegionInfo {
            argsz: (32 + caps.len()) as u32,
            flags: wire::REGION_FLAG_CAPS | wire::REGION_FLAG_MMAP,
            index: 2,
            cap_offset,
            size: 0x10000,
            offset: 0,
        };
        let mut b = info.as_bytes().to_vec();
        b.extend_from_slice(caps);
        (info, b)
    }

    fn sparse_cap(next: u32, areas: &[(u64, u64)], claimed: u32) -> Vec<u8> {
        let mut c = CapHeader {
            id: wire::CAP_SPARSE_MMAP,
            version: 1,
            next,
        }
        .as_bytes()
        .to_vec();
        c.extend_from_slice(
            SparseMmap {
                nr_areas: claimed,
                reserved: 0,
            }
            .as_bytes(),
        );
        for &(offset, size) in areas {
            c.extend_from_slice(SparseArea { offset, size }.as_bytes());
        }
        c
    }

    #[test]
    fn the_capability_list_is_walked_with_bounds_checks() {
        let (info, body) = region_body(&sparse_cap(0, &[(0, 0x10000)], 1), 32);
        assert_eq!(
            sparse_areas(&info, &body).unwrap(),
            vec![SparseArea {
                offset: 0,
                size: 0x10000
            }]
        );
        // More areas claimed than the reply holds.
        let (info, body) = region_body(&sparse_cap(0, &[(0, 0x1000)], 1000), 32);
        assert!(sparse_areas(&info, &body)
            .unwrap_err()
            .contains("do not fit"));
        let (info, body) = region_body(&sparse_cap(0, &[], u32::MAX), 32);
        assert!(sparse_areas(&info, &body).is_err());
        // A list that loops back on itself, one inside the info, one past the end.
        let (info, body) = region_body(&sparse_cap(32, &[(0, 0x1000)], 1), 32);
        assert!(sparse_areas(&info, &body)
            .unwrap_err()
            .contains("not after"));
        let (info, body) = region_body(&sparse_cap(0, &[], 0), 8);
        assert!(sparse_areas(&info, &body).is_err());
        let (info, body) = region_body(&sparse_cap(4096, &[], 0), 32);
        assert!(sparse_areas(&info, &body)
            .unwrap_err()
            .contains("runs past"));
        // An unknown capability is skipped.
        let mut other = CapHeader {
            id: 99,
            version: 1,
            next: 40,
        }
        .as_bytes()
        .to_vec();
        other.extend_from_slice(&sparse_cap(0, &[(0, 0x2000)], 1));
        let (info, body) = region_body(&other, 32);
        assert_eq!(sparse_areas(&info, &body).unwrap().len(), 1);
    }

    #[test]
    fn region_info_asks_again_when_the_capabilities_did_not_fit_and_takes_the_fd() {
        let mut c = pair("{}", |mut s| {
            let caps = sparse_cap(0, &[(0, 0x1000); 20], 20);
            let (info, full) = region_body(&caps, 32);
            let (h, body) = s.command();
            let asked = RegionInfo::read_from_prefix(&body).unwrap().0.argsz as usize;
            assert!(asked < full.len());
            // As rnicd today: the info alone, with the size it needs.
            s.answer(&h, 0, 0, info.as_bytes());
            let (h, body) = s.command();
            let asked = RegionInfo::read_from_prefix(&body).unwrap().0.argsz as usize;
            assert_eq!(asked, full.len());
            let f = std::fs::File::open("/dev/null").unwrap();
            let reply = Header {
                message_id: h.message_id,
                command: h.command,
                message_size: (HEADER_SIZE + full.len()) as u32,
                flags: wire::FLAG_REPLY,
                error: 0,
            };
            let mut msg = reply.as_bytes().to_vec();
            msg.extend_from_slice(&full);
            send_with_fds(s.0.as_raw_fd(), &msg, &[f.as_raw_fd()]).unwrap();
        });
        let r = c.region_info(2).unwrap();
        assert_eq!(r.sparse.len(), 20);
        assert!(r.fd.is_some());
        // SAFETY: F_GETFD of a descriptor the region owns.
        let flags = unsafe { libc::fcntl(r.fd.as_ref().unwrap().as_raw_fd(), libc::F_GETFD) };
        assert_ne!(flags & libc::FD_CLOEXEC, 0, "received close-on-exec");
    }
}
