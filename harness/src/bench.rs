//! A device of a few functions in this process, driven one engine pass at a time: what
//! rnicd's `Device::start` builds, without sockets or threads.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rnic_device::engine::Engine;
use rnic_device::fabric::faults::{FaultCounters, FaultInjector, FaultSpec};
use rnic_device::fabric::frame::Frame;
use rnic_device::fabric::uplink::Uplink;
use rnic_device::function::Function;
use rnic_device::identity::{FunctionId, Identity};
use rnic_device::net::eth::{mac_for_ip, EthUplink};
use rnic_device::net::link::Link;
use rnic_device::pcap::PcapWriter;
use rnic_device::resources::ResourcePool;
use rnic_driver::verbs::Context;
use rnic_driver::Device;

use crate::transport::{lock, GuestRam, InProcess, SharedEngine};

/// What the device's switch is connected to.
pub enum Net {
    /// Nothing: the functions reach each other only.
    None,
    /// Nothing, and every frame the switch forwards is written to this pcap file, as
    /// `rnicd --pcap` does.
    Capture(std::path::PathBuf),
    /// An Ethernet port (`rnicd --net eth:...`) on this link; the functions get the
    /// port's MACs.
    Eth(Box<dyn Link>),
}

/// The device: its functions, their guest RAM and the engine.
pub struct Bench {
    /// The engine, shared with the functions' transports.
    pub engine: SharedEngine,
    /// PF first, then the VFs.
    pub functions: Vec<Arc<Function>>,
    /// Guest RAM of each function, DMA-mapped into it.
    pub rams: Vec<Arc<GuestRam>>,
    detached: Arc<AtomicBool>,
}

impl Bench {
    /// A device with `count` functions (the PF and `count - 1` VFs), each with fresh guest
    /// RAM mapped, on `net`.
    pub fn new(count: usize, net: Net) -> Self {
        let vfs = u16::try_from(count - 1).expect("a handful of functions");
        let pool = Arc::new(ResourcePool::with_defaults(count));
        let ethernet = matches!(net, Net::Eth(_));
        let functions: Vec<Arc<Function>> = std::iter::once(FunctionId::Pf)
            .chain((0..vfs).map(FunctionId::Vf))
            .enumerate()
            .map(|(member, id)| {
                let mut identity = Identity::new(id, vfs, None);
                if ethernet {
                    let mac = mac_for_ip(identity.ipv4());
                    identity = identity.with_mac(mac);
                }
                Arc::new(
                    Function::with_pool(identity, pool.clone(), member)
                        .expect("create a function (memfd, eventfd)"),
                )
            })
            .collect();
        let rams: Vec<Arc<GuestRam>> = functions
            .iter()
            .map(|f| {
                let ram = GuestRam::new().expect("create guest RAM (memfd)");
                ram.map_into(f).expect("DMA-map guest RAM");
                ram
            })
            .collect();
        let endpoints: Vec<_> = functions.iter().map(|f| f.endpoint()).collect();
        let (pcap, uplink): (_, Option<Box<dyn Uplink>>) = match net {
            Net::None => (None, None),
            Net::Capture(path) => (
                Some(PcapWriter::create(&path).expect("create the capture file")),
                None,
            ),
            Net::Eth(link) => (None, Some(Box::new(EthUplink::with_link(link, &endpoints)))),
        };
        let engine = Engine::new(functions.clone(), Duration::ZERO, pcap)
            .expect("create the engine")
            .with_uplink(uplink);
        Self {
            engine: Arc::new(Mutex::new(engine)),
            functions,
            rams,
            detached: Arc::new(AtomicBool::new(false)),
        }
    }

    /// The transport of function `index`, untouched: for a caller that does what a driver
    /// does itself (the labs).
    pub fn transport(&self, index: usize) -> InProcess {
        InProcess::new(
            self.functions[index].clone(),
            self.engine.clone(),
            self.rams[index].clone(),
            self.detached.clone(),
        )
        .expect("in-process transport")
    }

    /// Opens function `index` as the driver does (reset, bus mastering, MSI-X, command
    /// queue) and creates its verbs context.
    pub fn open(&self, index: usize) -> Context {
        let device = Device::open(Box::new(self.transport(index))).expect("open the function");
        Context::new(device).expect("verbs context")
    }

    /// One engine pass over every function.
    pub fn step(&self) {
        lock(&self.engine).step();
    }

    /// Engine passes until one does nothing (at most `max`).
    pub fn settle(&self, max: usize) {
        for _ in 0..max {
            if !lock(&self.engine).step().progress {
                return;
            }
        }
    }

    /// Puts `frame` on the switch, as a frame arriving from a network.
    pub fn inject(&self, frame: Frame) {
        lock(&self.engine).switch().send(frame);
    }

    /// From now on the driver's waits fail at once instead of running the engine: for a
    /// world whose command queues a fuzz input stopped, so that tearing it down does not
    /// wait for commands nobody will answer.
    pub fn detach(&self) {
        self.detached.store(true, Ordering::Release);
    }

    /// [`Bench::new`] whose switch injects `faults` into every frame it forwards, those
    /// between its functions included (`rnicd --net-faults`, §7.14). Only such a bench
    /// takes [`Bench::set_faults`] for frames between functions: the engine decides at
    /// its first pass whether they go through the switch at all.
    pub fn with_faults(count: usize, net: Net, faults: FaultSpec) -> Self {
        let bench = Self::new(count, net);
        {
            let mut engine = lock(&bench.engine);
            let idle = Engine::new(Vec::new(), Duration::ZERO, None).expect("create an engine");
            let built = std::mem::replace(&mut *engine, idle);
            *engine = built.with_faults(Some(faults));
        }
        bench
    }

    /// From now on every frame the switch forwards goes through a fresh fault injector of
    /// `spec`; a spec that changes nothing makes the wire perfect again. Frames between
    /// functions meet it only on a bench made by [`Bench::with_faults`].
    pub fn set_faults(&self, spec: FaultSpec) {
        lock(&self.engine)
            .switch()
            .set_faults(FaultInjector::new(spec));
    }

    /// What the fault injector did since [`Bench::set_faults`] last set it.
    pub fn fault_counters(&self) -> Option<FaultCounters> {
        lock(&self.engine).switch().fault_counters()
    }

    /// Gives function `second` the guest RAM of function `first`, DMA-mapped at the same
    /// address from the same memfd, as QEMU maps one guest's memory into each of its
    /// functions: objects of either can then migrate to the other (`MIGRATE_QP`'s
    /// `DMA_ERROR` check, docs/hardware-interface.md §12.8 "Host transport"). Call it
    /// before opening either function.
    pub fn share_ram(&mut self, first: usize, second: usize) {
        let f = &self.functions[second];
        f.dma()
            .unmap(
                crate::transport::IOVA_BASE,
                crate::transport::RAM_SIZE as u64,
            )
            .expect("unmap the function's own guest RAM");
        self.rams[first]
            .map_into(f)
            .expect("DMA-map the shared guest RAM");
        self.rams[second] = self.rams[first].clone();
    }
}
