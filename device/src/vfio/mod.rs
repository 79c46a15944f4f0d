//! The vfio-user glue: what a function looks like to a vfio-user client (regions, IRQ
//! indexes), the socket it is served on, and the loop that serves it, client after client.
//!
//! This is the PCI-facing shell around [`crate::function::Function`], as igb.c is around
//! igb_core.c: [`server`] speaks the protocol and trusts nothing a client sends, [`Backend`]
//! turns each command into a function access, and [`refusal`] names the rules a client
//! can break (docs/hardware-interface.md §9).

pub mod refusal;
pub mod server;

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rnic_abi::pci::{CONFIG_SPACE_SIZE, DOORBELL_BAR, MSIX_VECTORS, REG_BAR, REG_BAR_SIZE};
use rnic_abi::vfio_user::{
    DeviceInfo, DmaMap, DmaUnmap, IrqInfo, RegionInfo, SetIrqs, SparseArea, DEVICE_FLAGS_PCI,
    DEVICE_FLAGS_RESET, DMA_MAP_READ, DMA_MAP_WRITE, DMA_UNMAP_ALL, IRQ_INFO_EVENTFD, IRQ_MSIX,
    IRQ_SET_DATA_EVENTFD, IRQ_SET_DATA_TYPE_MASK, NUM_IRQS, NUM_REGIONS, REGION_CONFIG,
    REGION_FLAG_MMAP, REGION_FLAG_READ, REGION_FLAG_WRITE,
};

use crate::dma::DmaMapError;
use crate::function::Function;
use crate::msix::check_trigger;
use refusal::{ClientLog, Kind, Refusal, Rule};
use server::{serve_connection, End, Handler, Region};

/// The regions a function exposes: BAR0 (trapped registers and MSI-X), BAR2 (doorbells,
/// mmappable through the doorbell memfd), config space; every other index is empty.
pub fn regions(function: &Function) -> Vec<Region> {
    (0..NUM_REGIONS)
        .map(|index| {
            let rw = REGION_FLAG_READ | REGION_FLAG_WRITE;
            let (size, flags) = match index {
                i if i == u32::from(REG_BAR) => (REG_BAR_SIZE, rw),
                i if i == u32::from(DOORBELL_BAR) => {
                    (function.doorbells().len() as u64, rw | REGION_FLAG_MMAP)
                }
                REGION_CONFIG => (CONFIG_SPACE_SIZE as u64, rw),
                _ => (0, 0),
            };
            let mut region = Region {
                info: RegionInfo {
                    size,
                    flags,
                    // Where the region starts in the descriptor the client maps.
                    offset: 0,
                    ..Default::default()
                },
                ..Default::default()
            };
            if flags & REGION_FLAG_MMAP != 0 {
                region.areas.push(SparseArea { offset: 0, size });
                region.fd = Some(function.doorbells().fd());
            }
            region
        })
        .collect()
}

/// The IRQ index `index`: MSI-X has [`MSIX_VECTORS`] eventfd vectors; INTx, MSI, ERR and
/// REQ exist (QEMU asks for them) but have no interrupts.
pub fn irq_info(index: u32) -> IrqInfo {
    let msix = index == IRQ_MSIX;
    IrqInfo {
        argsz: std::mem::size_of::<IrqInfo>() as u32,
        flags: if msix { IRQ_INFO_EVENTFD } else { 0 },
        index,
        count: if msix { u32::from(MSIX_VECTORS) } else { 0 },
    }
}

/// The vfio-user backend of one function for one client connection.
pub struct Backend {
    function: Arc<Function>,
    regions: Vec<Region>,
}

impl Backend {
    /// A backend serving `function`.
    pub fn new(function: Arc<Function>) -> Self {
        let regions = regions(&function);
        Self { function, regions }
    }
}

/// The rule a refused DMA_MAP or DMA_UNMAP broke.
fn dma_refusal(e: DmaMapError) -> Refusal {
    let rule = match &e {
        DmaMapError::NoFd { .. } => Rule::DmaNoFd,
        DmaMapError::BadFile { .. } | DmaMapError::Mmap { .. } => Rule::DmaFile,
        DmaMapError::BadRange { .. }
        | DmaMapError::OutsideFile { .. }
        | DmaMapError::Straddles { .. } => Rule::DmaRange,
        DmaMapError::Overlap { .. } => Rule::DmaOverlap,
        DmaMapError::Quota { .. } => Rule::DmaQuota,
    };
    Refusal::new(rule, e.to_string())
}

impl Handler for Backend {
    fn name(&self) -> String {
        self.function.identity().id.to_string()
    }

    fn device_info(&self) -> DeviceInfo {
        DeviceInfo {
            argsz: std::mem::size_of::<DeviceInfo>() as u32,
            flags: DEVICE_FLAGS_PCI | DEVICE_FLAGS_RESET,
            num_regions: NUM_REGIONS,
            num_irqs: NUM_IRQS,
        }
    }

    fn region(&self, index: u32) -> Region {
        self.regions
            .get(index as usize)
            .cloned()
            .unwrap_or_default()
    }

    fn irq_info(&self, index: u32) -> IrqInfo {
        irq_info(index)
    }

    fn max_dma_maps(&self) -> u32 {
        self.function.dma().max_windows()
    }

    fn dma_map(&mut self, map: &DmaMap, fd: Option<File>) -> Result<(), Refusal> {
        if map.flags & DMA_MAP_READ == 0 || map.flags & !(DMA_MAP_READ | DMA_MAP_WRITE) != 0 {
            return Err(Refusal::new(
                Rule::DmaFlags,
                format!(
                    "DMA_MAP flags {:#x}: READ, or READ and WRITE (the device reads all it \
                     may write)",
                    map.flags
                ),
            ));
        }
        let writable = map.flags & DMA_MAP_WRITE != 0;
        self.function
            .dma()
            .map(map.address, map.size, map.offset, fd, writable)
            .map_err(dma_refusal)?;
        log::debug!(
            "{}: DMA_MAP {:#x}+{:#x} (flags {:#x})",
            self.function.identity().id,
            map.address,
            map.size,
            map.flags
        );
        Ok(())
    }

    fn dma_unmap(&mut self, unmap: &DmaUnmap) -> Result<(), Refusal> {
        if unmap.flags & DMA_UNMAP_ALL != 0 {
            self.function.dma().unmap_all();
            return Ok(());
        }
        self.function
            .dma()
            .unmap(unmap.address, unmap.size)
            .map_err(dma_refusal)
    }

    fn region_read(&mut self, region: u32, offset: u64, data: &mut [u8]) -> Result<(), Refusal> {
        self.function
            .region_read(region, offset, data)
            .map_err(|e| Refusal::new(Rule::RegionAccess, e.to_string()))
    }

    fn region_write(&mut self, region: u32, offset: u64, data: &[u8]) -> Result<(), Refusal> {
        self.function
            .region_write(region, offset, data)
            .map_err(|e| Refusal::new(Rule::RegionAccess, e.to_string()))
    }

    fn set_irqs(&mut self, request: &SetIrqs, fds: Vec<File>) -> Result<(), Refusal> {
        if request.flags & IRQ_SET_DATA_TYPE_MASK == IRQ_SET_DATA_EVENTFD {
            for (i, fd) in fds.iter().enumerate() {
                check_trigger(fd).map_err(|why| {
                    Refusal::new(
                        Rule::IrqFd,
                        format!("SET_IRQS vector {}: {why}", request.start as usize + i),
                    )
                })?;
            }
        } else if !fds.is_empty() {
            return Err(Refusal::new(
                Rule::MessageFds,
                "SET_IRQS without DATA_EVENTFD came with descriptors",
            ));
        }
        self.function
            .set_irqs(
                request.index,
                request.flags,
                request.start,
                request.count,
                fds,
            )
            .map_err(|e| Refusal::new(Rule::IrqRequest, e.to_string()))
    }

    fn reset(&mut self) {
        self.function.reset();
    }

    fn interrupt_fd(&self) -> Option<RawFd> {
        Some(self.function.interrupts().wake_fd())
    }

    fn deliver_interrupts(&mut self) -> Vec<Refusal> {
        self.function
            .interrupts()
            .deliver()
            .into_iter()
            .map(|u| {
                Refusal::new(
                    Rule::IrqFd,
                    format!("MSI-X vector {} was not delivered: {}", u.vector, u.error),
                )
            })
            .collect()
    }
}

/// Why a socket could not be served.
#[derive(Debug, thiserror::Error)]
pub enum BindError {
    /// Another process answers on the socket.
    #[error(
        "{0} is served by another process (another rnicd?); stop it or choose another --socket-dir"
    )]
    InUse(PathBuf),
    /// The socket could not be created.
    #[error("cannot serve {0}: {1}")]
    Bind(PathBuf, String),
}

/// Binds the socket at `path`, replacing a stale socket file left by a process that
/// died. The caller holds the directory's lock, so no other rnicd can be serving it; a
/// socket that still answers belongs to something else, and is left alone.
pub fn bind(path: &Path) -> Result<UnixListener, BindError> {
    let fail = |e: io::Error| BindError::Bind(path.to_path_buf(), e.to_string());
    if path.exists() {
        if UnixStream::connect(path).is_ok() {
            return Err(BindError::InUse(path.to_path_buf()));
        }
        std::fs::remove_file(path).map_err(fail)?;
    }
    let listener = UnixListener::bind(path).map_err(fail)?;
    // Non-blocking: the connection thread turns away clients that arrive while one is
    // attached without ever waiting in accept.
    listener.set_nonblocking(true).map_err(fail)?;
    Ok(listener)
}

/// Serves `listener` forever, one client at a time; each client that leaves, for whatever
/// reason, leaves the function reset and its memory released for the next.
pub fn serve(listener: UnixListener, function: Arc<Function>) {
    let id = function.identity().id;
    let mut log = ClientLog::new(id.to_string());
    loop {
        let stream = match accept(&listener) {
            Ok(s) => s,
            Err(e) => {
                log::error!("{id}: accept failed: {e}");
                std::thread::sleep(std::time::Duration::from_millis(100));
                continue;
            }
        };
        let pid = server::peer_pid(&stream);
        log.event(
            Kind::Connection,
            format_args!(
                "client connected{}",
                pid.map(|p| format!(" (pid {p})")).unwrap_or_default()
            ),
        );
        let mut backend = Backend::new(function.clone());
        // A bug in the server must cost this connection, not the device.
        let end = std::panic::catch_unwind(AssertUnwindSafe(|| {
            serve_connection(stream, Some(&listener), &mut backend, &mut log)
        }));
        match end {
            Ok(End::Closed) => {
                log.event(Kind::Connection, format_args!("client disconnected"));
            }
            Ok(end) => log.event(Kind::Connection, format_args!("connection ended: {end}")),
            Err(_) => log::error!("{id}: the vfio-user server panicked; connection dropped"),
        }
        log.client_left();
        function.disconnect();
    }
}

/// Waits for the next client on the non-blocking `listener`.
fn accept(listener: &UnixListener) -> io::Result<UnixStream> {
    loop {
        let mut fd = libc::pollfd {
            fd: listener.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: poll of one pollfd we own.
        let r = unsafe { libc::poll(&mut fd, 1, -1) };
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        match listener.accept() {
            Ok((stream, _)) => {
                stream.set_nonblocking(false)?;
                return Ok(stream);
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                ) => {}
            Err(e) => return Err(e),
        }
    }
}
