//! The control socket: a read-only view of the whole device while VMMs hold every
//! function (docs/hardware-interface.md §12.9; the protocol and its answers are the
//! `rnic-control` crate's). One thread serves it, one short connection at a time; each
//! answer is a copy taken under each function's lock (and the switch's) in turn, so
//! reading it never holds up the engine for longer than a copy.

use std::io::{self, Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use rnic_abi::admin::MemberStats;
use rnic_abi::eth::EthCounters;
use rnic_control::{
    Counters, ErrorAnswer, FunctionCounters, FunctionStats, PortStats, Request, Resource, Stats,
    MAX_REQUEST, REQUEST_TIMEOUT,
};

use crate::engine::SwitchView;
use crate::function::Function;
use crate::rdma::drops::DropCounters;

/// What the socket shows: the functions, the switch, and when rnicd started.
pub struct View {
    functions: Vec<Arc<Function>>,
    switch: SwitchView,
    started: Instant,
}

impl View {
    /// A view of `functions` (the PF first) and `switch`, for an rnicd that started at
    /// `started`.
    pub fn new(functions: Vec<Arc<Function>>, switch: SwitchView, started: Instant) -> Self {
        Self {
            functions,
            switch,
            started,
        }
    }

    /// The answer to `stats`.
    pub fn stats(&self) -> Stats {
        let functions = self
            .functions
            .iter()
            .map(|f| {
                let c = f.counter_snapshot();
                FunctionStats {
                    function: f.identity().id.to_string(),
                    since_reset: counters(&c.since_reset, &c.drops, Some(&c.ethernet)),
                    since_start: counters(&c.since_start, &c.drops_since_start, None),
                }
            })
            .collect();
        let port = self.switch.port_stats();
        Stats {
            uptime_ms: self.started.elapsed().as_millis() as u64,
            functions,
            port: PortStats {
                kind: port.kind_name().into(),
                counters: named(&port.named()),
            },
            faults: self.switch.fault_counters().map(|c| named(&c)),
        }
    }

    /// The answer to `res KIND`: a JSON list of every function's objects of that kind.
    pub fn resources(&self, kind: Resource) -> String {
        let mut list = Vec::new();
        for f in &self.functions {
            let rdma = f.lock_rdma();
            let entries = match kind {
                Resource::Qp => serde_json::to_value(rdma.qp_entries()),
                Resource::Cq => serde_json::to_value(rdma.cq_entries()),
                Resource::Mr => serde_json::to_value(rdma.mr_entries()),
                Resource::Pd => serde_json::to_value(rdma.pd_entries()),
                Resource::Srq => serde_json::to_value(rdma.srq_entries()),
            };
            drop(rdma);
            if let Ok(serde_json::Value::Array(entries)) = entries {
                list.extend(entries);
            }
        }
        serde_json::Value::Array(list).to_string()
    }

    /// The text of the answer to `request`.
    pub fn answer(&self, request: Request) -> String {
        match request {
            Request::Stats => serde_json::to_string(&self.stats()).unwrap_or_default(),
            Request::Res(kind) => self.resources(kind),
            Request::Metrics => metrics(&self.stats()),
        }
    }
}

/// Counters by name, from a `named()` list.
fn named(list: &[(&'static str, u64)]) -> Counters {
    list.iter().map(|&(n, v)| (n.to_string(), v)).collect()
}

/// One span's counters in the socket's form; `ethernet` where they are kept.
fn counters(
    transport: &MemberStats,
    drops: &DropCounters,
    ethernet: Option<&EthCounters>,
) -> FunctionCounters {
    let t = transport;
    let transport = named(&[
        ("tx_packets", t.tx_packets),
        ("tx_bytes", t.tx_bytes),
        ("rx_packets", t.rx_packets),
        ("rx_bytes", t.rx_bytes),
        ("rx_errors", t.rx_errors),
        ("retransmits", t.retransmits),
        ("rnr_naks_sent", t.rnr_naks_sent),
        ("tx_link_down", t.tx_link_down),
    ]);
    // Soft-RoCE's hw_counters that count what one of these counts.
    let rxe = named(&[
        ("sent_pkts", t.tx_packets),
        ("rcvd_pkts", t.rx_packets),
        ("send_rnr_err", t.rnr_naks_sent),
        ("out_of_seq_request", drops.psn),
    ]);
    let ethernet = ethernet.map_or_else(Counters::new, |e| {
        named(&[
            ("tx_frames", e.tx_frames),
            ("tx_bytes", e.tx_bytes),
            ("tx_malformed", e.tx_malformed),
            ("tx_dma_errors", e.tx_dma_errors),
            ("tx_spoofed", e.tx_spoofed),
            ("tx_link_down", e.tx_link_down),
            ("rx_frames", e.rx_frames),
            ("rx_bytes", e.rx_bytes),
            ("rx_no_buffer", e.rx_no_buffer),
            ("rx_too_long", e.rx_too_long),
            ("rx_filtered", e.rx_filtered),
            ("rx_disabled", e.rx_disabled),
            ("rx_dma_errors", e.rx_dma_errors),
            ("rx_link_down", e.rx_link_down),
            ("ring_errors", e.ring_errors),
            ("interrupts", e.interrupts),
        ])
    });
    FunctionCounters {
        transport,
        drops: named(&drops.named()),
        rxe,
        ethernet,
    }
}

/// `stats` in Prometheus' text exposition format: counters since rnicd started (a
/// Prometheus counter must not go back, which the since-reset ones do), labelled by
/// function, drop reason, port counter.
pub fn metrics(stats: &Stats) -> String {
    let mut out = String::new();
    let mut family = |name: &str, help: &str, samples: Vec<(String, u64)>| {
        out.push_str(&format!("# HELP {name} {help}\n# TYPE {name} counter\n"));
        for (labels, value) in samples {
            out.push_str(&format!("{name}{{{labels}}} {value}\n"));
        }
    };
    let first = stats.functions.first();
    for counter in first.map_or(Vec::new(), |f| {
        f.since_start.transport.keys().cloned().collect()
    }) {
        let samples = stats
            .functions
            .iter()
            .map(|f| {
                let v = f.since_start.transport.get(&counter).copied().unwrap_or(0);
                (format!("function=\"{}\"", f.function), v)
            })
            .collect();
        family(
            &format!("rnic_{counter}_total"),
            &format!("GET_MEMBER_STATS {counter} since rnicd started"),
            samples,
        );
    }
    let drops = stats
        .functions
        .iter()
        .flat_map(|f| {
            f.since_start.drops.iter().map(|(reason, &v)| {
                (
                    format!("function=\"{}\",reason=\"{reason}\"", f.function),
                    v,
                )
            })
        })
        .collect();
    family(
        "rnic_rx_drops_total",
        "receive drops of the transport by reason since rnicd started (§7.9)",
        drops,
    );
    let port = stats
        .port
        .counters
        .iter()
        .map(|(name, &v)| {
            (
                format!("kind=\"{}\",counter=\"{name}\"", stats.port.kind),
                v,
            )
        })
        .collect();
    family(
        "rnic_port_total",
        "the network port's GET_PORT_STATS counters since rnicd started",
        port,
    );
    out
}

/// Binds the control socket at `path`, replacing a stale one (the socket directory's
/// lock says no other rnicd serves it).
pub fn bind(path: &Path) -> io::Result<UnixListener> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    UnixListener::bind(path)
}

/// Serves `listener` for the life of the process, one connection at a time.
pub fn serve(listener: UnixListener, view: View) {
    for stream in listener.incoming() {
        match stream {
            Ok(stream) => {
                if let Err(e) = handle(stream, &view) {
                    log::debug!("control socket: {e}");
                }
            }
            Err(e) => {
                log::warn!("control socket: accept failed: {e}");
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
        }
    }
}

/// Reads one request line from `stream` and answers it. A client that sends nothing,
/// too much, or garbage gets an error answer (or is dropped at the timeout): it never
/// holds the socket for longer than [`REQUEST_TIMEOUT`] per read and write.
fn handle(mut stream: UnixStream, view: &View) -> io::Result<()> {
    stream.set_read_timeout(Some(REQUEST_TIMEOUT))?;
    stream.set_write_timeout(Some(REQUEST_TIMEOUT))?;
    let mut line = Vec::with_capacity(MAX_REQUEST);
    let mut byte = [0u8; 64];
    let request = loop {
        let n = stream.read(&mut byte)?;
        if n == 0 {
            break Err("the request ended without a newline".to_string());
        }
        line.extend_from_slice(&byte[..n]);
        if let Some(end) = line.iter().position(|&b| b == b'\n') {
            break std::str::from_utf8(&line[..end])
                .map_err(|_| "the request is not UTF-8".to_string())
                .and_then(|text| Request::parse(text.trim_end_matches('\r')));
        }
        if line.len() >= MAX_REQUEST {
            break Err(format!("a request line is at most {MAX_REQUEST} bytes"));
        }
    };
    let text = match request {
        Ok(request) => view.answer(request),
        Err(error) => serde_json::to_string(&ErrorAnswer { error }).unwrap_or_default(),
    };
    stream.write_all(text.as_bytes())?;
    stream.write_all(b"\n")?;
    // What the client sent past its request (a refused, over-long one) is read and
    // dropped, a bounded amount: closing with unread data would reset the connection
    // before the client reads its answer.
    stream.shutdown(std::net::Shutdown::Write)?;
    let mut rest = [0u8; 4096];
    for _ in 0..16 {
        if matches!(stream.read(&mut rest), Ok(0) | Err(_)) {
            break;
        }
    }
    Ok(())
}
