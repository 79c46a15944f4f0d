//! The whole device: a PF and its VFs, each served on its own vfio-user socket, and the
//! engine that runs them.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::engine::{Engine, EngineHandle};
use crate::function::{Function, FunctionId, Identity};
use crate::pcap::PcapWriter;
use crate::vfio;

/// How to build and serve the device.
#[derive(Debug, Clone)]
pub struct DeviceConfig {
    /// Directory for `pf.sock` and `vf<i>.sock`.
    pub socket_dir: PathBuf,
    /// Number of VFs (TotalVFs).
    pub vfs: u16,
    /// How long the engine polls after the last work before it sleeps.
    pub poll_window: Duration,
    /// Where to write a pcap of every frame the functions exchange.
    pub pcap: Option<PathBuf>,
}

/// Why the device could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The socket directory is unusable.
    #[error("socket directory {0}: {1}")]
    SocketDir(PathBuf, std::io::Error),
    /// A socket could not be bound.
    #[error(transparent)]
    Bind(#[from] vfio::BindError),
    /// A function or the engine could not be created.
    #[error("cannot create the device: {0}")]
    Create(std::io::Error),
    /// The capture file could not be created.
    #[error("cannot write the capture {0}: {1}")]
    Pcap(PathBuf, std::io::Error),
}

/// The socket path of function `id` in `dir`.
pub fn socket_path(dir: &Path, id: FunctionId) -> PathBuf {
    dir.join(format!("{id}.sock"))
}

/// A running device.
pub struct Device {
    functions: Vec<Arc<Function>>,
    sockets: Vec<PathBuf>,
    engine: EngineHandle,
    /// Held (flock) for the life of the device: one rnicd per socket directory.
    _lock: std::fs::File,
    lock_path: PathBuf,
}

/// Takes the socket directory's lock, so that no two rnicd serve one directory, even when
/// started at the same moment (a socket file exists before its listener listens, so
/// probing sockets alone cannot tell a starting rnicd from a dead one).
fn lock_dir(dir: &Path) -> Result<(std::fs::File, PathBuf), StartError> {
    use std::os::fd::AsRawFd;
    let path = dir.join("rnicd.lock");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| StartError::SocketDir(dir.to_path_buf(), e))?;
    // SAFETY: flock on a descriptor we own.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        return Err(StartError::Bind(vfio::BindError::InUse(dir.to_path_buf())));
    }
    Ok((file, path))
}

impl Device {
    /// Creates the functions, binds their sockets and starts serving them.
    pub fn start(config: &DeviceConfig) -> Result<Self, StartError> {
        std::fs::create_dir_all(&config.socket_dir)
            .map_err(|e| StartError::SocketDir(config.socket_dir.clone(), e))?;
        let (lock, lock_path) = lock_dir(&config.socket_dir)?;
        let ids = std::iter::once(FunctionId::Pf).chain((0..config.vfs).map(FunctionId::Vf));
        let mut functions = Vec::new();
        let mut servers = Vec::new();
        let mut sockets: Vec<PathBuf> = Vec::new();
        for id in ids {
            let function =
                Arc::new(Function::new(Identity::new(id, config.vfs)).map_err(StartError::Create)?);
            let path = socket_path(&config.socket_dir, id);
            let server = match vfio::bind(&path, &function) {
                Ok(s) => s,
                Err(e) => {
                    sockets.iter().for_each(|p| remove_socket(p));
                    return Err(e.into());
                }
            };
            sockets.push(path);
            servers.push(server);
            functions.push(function);
        }
        let pcap = match &config.pcap {
            Some(path) => {
                Some(PcapWriter::create(path).map_err(|e| StartError::Pcap(path.clone(), e))?)
            }
            None => None,
        };
        let engine =
            Engine::new(functions.clone(), config.poll_window, pcap).map_err(StartError::Create)?;
        let handle = engine.handle();
        std::thread::Builder::new()
            .name("engine".into())
            .spawn(move || {
                if let Err(e) = engine.run() {
                    log::error!("engine failed: {e}");
                }
            })
            .map_err(StartError::Create)?;
        for (server, function) in servers.into_iter().zip(&functions) {
            let function = function.clone();
            std::thread::Builder::new()
                .name(format!("vfio-{}", function.identity().id))
                .spawn(move || vfio::serve(server, function))
                .map_err(StartError::Create)?;
        }
        Ok(Self {
            functions,
            sockets,
            engine: handle,
            _lock: lock,
            lock_path,
        })
    }

    /// The functions, PF first.
    pub fn functions(&self) -> &[Arc<Function>] {
        &self.functions
    }

    /// The socket paths, PF first.
    pub fn sockets(&self) -> &[PathBuf] {
        &self.sockets
    }

    /// Stops the engine and removes the sockets. Server threads blocked in the kernel end
    /// with the process.
    pub fn shutdown(&self) {
        self.engine.stop();
        self.sockets.iter().for_each(|p| remove_socket(p));
        remove_socket(&self.lock_path);
    }
}

fn remove_socket(path: &Path) {
    if let Err(e) = std::fs::remove_file(path) {
        if e.kind() != std::io::ErrorKind::NotFound {
            log::warn!("cannot remove {}: {e}", path.display());
        }
    }
}
