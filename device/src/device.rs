//! The whole device: a PF and its VFs, each served on its own vfio-user socket, and the
//! engine that runs them.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::engine::{Engine, Placement, RunningEngine};
use crate::fabric::faults::FaultSpec;
use crate::function::Function;
use crate::identity::{FunctionId, Identity};
use crate::net::eth::{mac_for_ip, EthUplink};
use crate::net::udp::UdpUplink;
use crate::net::{NetError, NetSpec};
use crate::pcap::PcapWriter;
use crate::resources::ResourcePool;
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
    /// Faults to inject into every frame the switch forwards (`--net-faults`).
    pub net_faults: Option<FaultSpec>,
    /// The network the functions are reachable on (`--net`): UDP sockets on their
    /// addresses, or an Ethernet port on a QEMU segment. `None`: only the internal switch.
    pub net: Option<NetSpec>,
    /// The PF's IPv4 address (`--net-ip`); function n has this + n. `None`: `udp:ADDR`'s
    /// ADDR, else 10.82.0.1 (see [`crate::net::ip_base`]).
    pub net_ip: Option<std::net::Ipv4Addr>,
    /// Engine threads (`--threads`); `None`: one per core, at most one per function
    /// ([`crate::engine::default_threads`]).
    pub threads: Option<usize>,
    /// How functions are placed on the engine's threads (`--placement`).
    pub placement: Placement,
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
    /// The network (`--net`) could not be set up.
    #[error(transparent)]
    Net(#[from] NetError),
}

/// The socket path of function `id` in `dir`.
pub fn socket_path(dir: &Path, id: FunctionId) -> PathBuf {
    dir.join(format!("{id}.sock"))
}

/// A running device.
pub struct Device {
    functions: Vec<Arc<Function>>,
    sockets: Vec<PathBuf>,
    /// The control socket (§12.9).
    control: PathBuf,
    /// The engine's threads, joined at shutdown so that their last words are logged.
    engine: std::sync::Mutex<RunningEngine>,
    /// Held (flock) for the life of the device: one rnicd per socket directory.
    _lock: std::fs::File,
    lock_path: PathBuf,
    /// The capture file (`--pcap`), reopened by [`Device::reopen_capture`].
    pcap: Option<PathBuf>,
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
        let started = std::time::Instant::now();
        std::fs::create_dir_all(&config.socket_dir)
            .map_err(|e| StartError::SocketDir(config.socket_dir.clone(), e))?;
        let (lock, lock_path) = lock_dir(&config.socket_dir)?;
        let ip_base = crate::net::ip_base(config.net.as_ref(), config.net_ip)?;
        crate::net::function_ips(ip_base, config.vfs + 1)?;
        // With a network port, MACs must be unique beyond this rnicd: the functions'
        // operating systems address one another by them (§7.16, §15.1).
        let networked = config.net.is_some();
        // Every function gets the default share of the device's resources (see
        // `crate::resources`); the PF moves them around with SET_QUOTA.
        let pool = Arc::new(ResourcePool::with_defaults(usize::from(config.vfs) + 1));
        let functions = std::iter::once(FunctionId::Pf)
            .chain((0..config.vfs).map(FunctionId::Vf))
            .enumerate()
            .map(|(member, id)| {
                let mut identity = Identity::new(id, config.vfs, Some(ip_base));
                if networked {
                    // Unique on the segment, or among the rnicd joined by udp:.
                    let mac = mac_for_ip(identity.ipv4());
                    identity = identity.with_mac(mac);
                }
                Function::with_pool(identity, pool.clone(), member).map(Arc::new)
            })
            .collect::<Result<Vec<_>, _>>()
            .map_err(StartError::Create)?;
        // Bound before the vfio-user sockets, so that a network error leaves nothing behind.
        let endpoints: Vec<_> = functions.iter().map(|f| f.endpoint()).collect();
        let uplink: Option<Box<dyn crate::fabric::uplink::Uplink>> = match &config.net {
            Some(NetSpec::Udp(spec)) => Some(Box::new(UdpUplink::bind(&endpoints, spec.port)?)),
            Some(NetSpec::Eth(spec)) => Some(Box::new(EthUplink::open(spec, &endpoints)?)),
            None => None,
        };
        if let Some(spec) = &config.net {
            let (first, last) = (endpoints[0], endpoints[endpoints.len() - 1]);
            log::info!(
                "network {spec}: functions at {} to {} (MACs {} to {})",
                std::net::Ipv4Addr::from(first.ip),
                std::net::Ipv4Addr::from(last.ip),
                crate::net::eth::mac_str(&first.mac),
                crate::net::eth::mac_str(&last.mac),
            );
        }
        let mut servers = Vec::new();
        let mut sockets: Vec<PathBuf> = Vec::new();
        for function in &functions {
            let id = function.identity().id;
            let path = socket_path(&config.socket_dir, id);
            let server = match vfio::bind(&path) {
                Ok(s) => s,
                Err(e) => {
                    sockets.iter().for_each(|p| remove_socket(p));
                    return Err(e.into());
                }
            };
            sockets.push(path);
            servers.push(server);
        }
        let pcap = match &config.pcap {
            Some(path) => {
                Some(PcapWriter::create(path).map_err(|e| StartError::Pcap(path.clone(), e))?)
            }
            None => None,
        };
        let threads = config
            .threads
            .unwrap_or_else(|| crate::engine::default_threads(functions.len()));
        let engine = Engine::new(functions.clone(), config.poll_window, pcap)
            .map_err(StartError::Create)?
            .with_threads(threads, config.placement)
            .with_faults(config.net_faults)
            .with_uplink(uplink)
            .spawn()
            .map_err(StartError::Create)?;
        // The read-only view (§12.9), bound before the functions' sockets serve: a script
        // that waits for them finds it too.
        let control_path = config.socket_dir.join(rnic_control::SOCKET_NAME);
        let control = crate::control::bind(&control_path).map_err(|e| {
            sockets.iter().for_each(|p| remove_socket(p));
            StartError::Bind(vfio::BindError::Bind(control_path.clone(), e.to_string()))
        })?;
        log::info!(
            "control socket (read-only, §12.9): {}",
            control_path.display()
        );
        let view = crate::control::View::new(functions.clone(), engine.switch_view(), started);
        std::thread::Builder::new()
            .name("control".into())
            .spawn(move || crate::control::serve(control, view))
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
            control: control_path,
            engine: std::sync::Mutex::new(engine),
            _lock: lock,
            lock_path,
            pcap: config.pcap.clone(),
        })
    }

    /// The functions, PF first.
    pub fn functions(&self) -> &[Arc<Function>] {
        &self.functions
    }

    /// The control socket's path (§12.9).
    pub fn control_socket(&self) -> &Path {
        &self.control
    }

    /// The socket paths, PF first.
    pub fn sockets(&self) -> &[PathBuf] {
        &self.sockets
    }

    /// Logs the counters so far, without stopping anything (rnicd's SIGUSR1): what the
    /// switch saw (fault and network counters), then each function's, as at shutdown.
    pub fn log_counters(&self) {
        self.engine
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .log_switch_counters();
        self.log_function_counters();
    }

    /// Reopens the capture file (rnicd's SIGHUP, for log rotation): the file at the
    /// `--pcap` path is created anew (truncated if it exists) and every frame from now on
    /// goes there; the frames before stay in the old file, under whatever name it was
    /// moved to. Returns the path, or `None` without `--pcap`. On error the capture
    /// continues into the old file.
    pub fn reopen_capture(&self) -> Result<Option<&Path>, StartError> {
        let Some(path) = &self.pcap else {
            return Ok(None);
        };
        let writer = PcapWriter::create(path).map_err(|e| StartError::Pcap(path.clone(), e))?;
        self.engine
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .replace_capture(writer);
        Ok(Some(path))
    }

    /// Stops the engine and removes the sockets, and logs each function's transport
    /// counters (since its last reset, and since start). Server threads blocked in the kernel end with the process.
    pub fn shutdown(&self) {
        // The engine's threads finish their passes, so the counters are final, and it
        // says what the switch saw (fault and network counters).
        self.engine
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .stop_and_join();
        self.log_function_counters();
        self.sockets.iter().for_each(|p| remove_socket(p));
        remove_socket(&self.control);
        remove_socket(&self.lock_path);
    }

    /// Logs each function's transport counters (since its last reset, and since start)
    /// and its drops by reason.
    fn log_function_counters(&self) {
        for f in &self.functions {
            let c = f.rdma_counters();
            log::info!(
                "{}: tx {} rx {} dropped {} retransmits {} rnr_naks {}",
                f.identity().id,
                c.tx_packets,
                c.rx_packets,
                c.rx_dropped,
                c.retransmits,
                c.rnr_naks_sent
            );
            log::info!("{}: drops {}", f.identity().id, c.drops);
            let e = f.eth_counters();
            log::info!(
                "{}: ethernet tx_frames {} rx_frames {} rx_disabled {} rx_filtered {}",
                f.identity().id,
                e.tx_frames,
                e.rx_frames,
                e.rx_disabled,
                e.rx_filtered
            );
            // Counters since start: the ones above restart at every reset, and the last
            // one is usually the VMM's going away.
            let s = f.stats_since_start();
            log::info!(
                "{}: since start: tx_packets {} tx_bytes {} rx_packets {} rx_bytes {} \
                 rx_errors {} tx_link_down {}",
                f.identity().id,
                s.tx_packets,
                s.tx_bytes,
                s.rx_packets,
                s.rx_bytes,
                s.rx_errors,
                s.tx_link_down
            );
        }
    }
}

fn remove_socket(path: &Path) {
    if let Err(e) = std::fs::remove_file(path) {
        if e.kind() != std::io::ErrorKind::NotFound {
            log::warn!("cannot remove {}: {e}", path.display());
        }
    }
}
