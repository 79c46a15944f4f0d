//! The vfio-user glue: what a function looks like to a vfio-user client (regions, IRQ
//! indexes), and the loop that serves one socket, client after client.
//!
//! This is the PCI-facing shell around [`crate::function::Function`], as igb.c is around
//! igb_core.c: it translates protocol messages and holds no device behaviour of its own.

use std::fs::File;
use std::io;
use std::os::unix::net::UnixStream;
use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rnic_abi::pci::{CONFIG_SPACE_SIZE, DOORBELL_BAR, REG_BAR, REG_BAR_SIZE};
use vfio_bindings::bindings::vfio::{
    vfio_region_info, vfio_region_sparse_mmap_area, VFIO_IRQ_INFO_EVENTFD,
    VFIO_PCI_CONFIG_REGION_INDEX, VFIO_PCI_MSIX_IRQ_INDEX, VFIO_PCI_NUM_IRQS, VFIO_PCI_NUM_REGIONS,
    VFIO_REGION_INFO_FLAG_MMAP, VFIO_REGION_INFO_FLAG_READ, VFIO_REGION_INFO_FLAG_WRITE,
};
use vfio_user::{
    DmaMapFlags, DmaUnmapFlags, IrqInfo, Server, ServerBackend, ServerRegion, SparseArea,
};

use crate::function::Function;

/// The regions a function exposes: BAR0 (trapped registers and MSI-X), BAR2 (doorbells,
/// mmappable through the doorbell memfd), config space; every other index is empty.
pub fn regions(function: &Function) -> Vec<ServerRegion> {
    (0..VFIO_PCI_NUM_REGIONS)
        .map(|index| {
            let mut info = vfio_region_info {
                argsz: std::mem::size_of::<vfio_region_info>() as u32,
                index,
                ..Default::default()
            };
            let rw = VFIO_REGION_INFO_FLAG_READ | VFIO_REGION_INFO_FLAG_WRITE;
            let mut sparse_areas = Vec::new();
            let mut mmap_fd = None;
            match index {
                i if i == u32::from(REG_BAR) => {
                    info.size = REG_BAR_SIZE;
                    info.flags = rw;
                }
                i if i == u32::from(DOORBELL_BAR) => {
                    info.size = function.doorbells().len() as u64;
                    info.flags = rw | VFIO_REGION_INFO_FLAG_MMAP;
                    // The offset is where the region starts in the fd the client maps.
                    info.offset = 0;
                    sparse_areas.push(SparseArea {
                        area: vfio_region_sparse_mmap_area {
                            offset: 0,
                            size: info.size,
                        },
                    });
                    mmap_fd = Some(function.doorbells().fd());
                }
                VFIO_PCI_CONFIG_REGION_INDEX => {
                    info.size = CONFIG_SPACE_SIZE as u64;
                    info.flags = rw;
                }
                _ => {}
            }
            ServerRegion {
                region_info: info,
                sparse_areas,
                mmap_fd,
            }
        })
        .collect()
}

/// The IRQ indexes: MSI-X only; INTx, MSI, ERR and REQ exist (QEMU asks for them) but
/// have no interrupts.
pub fn irqs() -> Vec<IrqInfo> {
    (0..VFIO_PCI_NUM_IRQS)
        .map(|index| IrqInfo {
            index,
            flags: if index == VFIO_PCI_MSIX_IRQ_INDEX {
                VFIO_IRQ_INFO_EVENTFD
            } else {
                0
            },
            count: if index == VFIO_PCI_MSIX_IRQ_INDEX {
                u32::from(rnic_abi::pci::MSIX_VECTORS)
            } else {
                0
            },
        })
        .collect()
}

/// The vfio-user backend of one function for one client connection.
pub struct Backend {
    function: Arc<Function>,
    /// Whether this client was already told that fd-less memory is refused.
    warned_fdless: bool,
}

impl Backend {
    /// A backend serving `function`.
    pub fn new(function: Arc<Function>) -> Self {
        Self {
            function,
            warned_fdless: false,
        }
    }
}

impl ServerBackend for Backend {
    fn region_read(&mut self, region: u32, offset: u64, data: &mut [u8]) -> io::Result<()> {
        self.function.region_read(region, offset, data)
    }

    fn region_write(&mut self, region: u32, offset: u64, data: &[u8]) -> io::Result<()> {
        self.function.region_write(region, offset, data)
    }

    fn dma_map(
        &mut self,
        flags: DmaMapFlags,
        offset: u64,
        address: u64,
        size: u64,
        fd: Option<File>,
    ) -> io::Result<()> {
        let id = self.function.identity().id;
        self.function
            .dma()
            .map(
                address,
                size,
                offset,
                fd,
                flags.contains(DmaMapFlags::WRITE),
            )
            .inspect(|()| log::debug!("{id}: DMA_MAP {address:#x}+{size:#x} ({flags:?})"))
            .map_err(|e| {
                // QEMU maps its ROMs and other devices' BARs without descriptors even when
                // guest RAM is shared: say it once, loudly, then only in debug logs.
                if matches!(e, crate::dma::DmaMapError::NoFd { .. }) && self.warned_fdless {
                    log::debug!("{id}: {e}");
                } else {
                    log::warn!("{id}: {e} (further refusals of descriptor-less ranges are logged at debug level)");
                }
                self.warned_fdless |= matches!(e, crate::dma::DmaMapError::NoFd { .. });
                e.into()
            })
    }

    fn dma_unmap(&mut self, flags: DmaUnmapFlags, address: u64, size: u64) -> io::Result<()> {
        let id = self.function.identity().id;
        if flags.contains(DmaUnmapFlags::UNMAP_ALL) {
            self.function.dma().unmap_all();
            return Ok(());
        }
        self.function.dma().unmap(address, size).map_err(|e| {
            log::warn!("{id}: {e}");
            e.into()
        })
    }

    fn reset(&mut self) -> io::Result<()> {
        log::info!(
            "{}: function reset through vfio-user DEVICE_RESET",
            self.function.identity().id
        );
        self.function.reset();
        Ok(())
    }

    fn set_irqs(
        &mut self,
        index: u32,
        flags: u32,
        start: u32,
        count: u32,
        fds: Vec<File>,
    ) -> io::Result<()> {
        self.function.set_irqs(index, flags, start, count, fds)
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

/// Binds the socket of `function` at `path`, replacing a stale socket file left by a
/// process that died. The caller holds the directory's lock, so no other rnicd can be
/// serving it; a socket that still answers belongs to something else, and is left alone.
pub fn bind(path: &Path, function: &Function) -> Result<Server, BindError> {
    if path.exists() {
        if UnixStream::connect(path).is_ok() {
            return Err(BindError::InUse(path.to_path_buf()));
        }
        std::fs::remove_file(path)
            .map_err(|e| BindError::Bind(path.to_path_buf(), e.to_string()))?;
    }
    Server::new(path, true, irqs(), regions(function))
        .map_err(|e| BindError::Bind(path.to_path_buf(), e.to_string()))
}

/// Serves `server` forever, one client at a time; each client that leaves, for whatever
/// reason, leaves the function reset and its memory released for the next.
pub fn serve(server: Server, function: Arc<Function>) {
    let id = function.identity().id;
    loop {
        let mut backend = Backend::new(function.clone());
        // The vfio-user crate can panic on some malformed messages; a broken client must
        // cost its own connection, not the device.
        let outcome = std::panic::catch_unwind(AssertUnwindSafe(|| server.run(&mut backend)));
        match outcome {
            Ok(Ok(())) => log::info!("{id}: client disconnected"),
            Ok(Err(vfio_user::Error::SocketAccept(e))) => {
                log::error!("{id}: accept failed: {e}");
                std::thread::sleep(std::time::Duration::from_millis(100));
                continue;
            }
            Ok(Err(e)) => log::warn!("{id}: connection ended: {e}"),
            Err(_) => log::error!(
                "{id}: the vfio-user layer panicked on a malformed message; connection dropped"
            ),
        }
        function.disconnect();
    }
}
