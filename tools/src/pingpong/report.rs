//! What rnic-pingpong reports, as text or JSON (`--json`), counted as `ibv_rc_pingpong`
//! counts: `bytes` is `2 * size * iters` for send and write (both directions), `size *
//! iters` for read; Mbit/s is `bytes * 8 / usec`, usec/iter `usec / iters`. The
//! initiator's clock runs over all its iterations, and each latency sample is one
//! iteration (post to answer, or to the READ's completion). A send or write responder's
//! clock runs from the first message it receives to the completion of its last answer,
//! and its samples are the times between consecutive messages; a read responder sees no
//! READs and reports the initiator's figures, which `done` carries.

use std::time::Duration;

use rnic_abi::gid;

use super::{Config, Dest, Op};

/// Latency figures in microseconds.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct Latency {
    /// Fastest iteration.
    pub min: f64,
    /// Median iteration.
    pub median: f64,
    /// Slowest iteration.
    pub max: f64,
}

impl Latency {
    /// The figures of `samples` (nanoseconds); `None` without samples.
    pub fn of(samples: &[u64]) -> Option<Latency> {
        let mut s = samples.to_vec();
        s.sort_unstable();
        let median = match s.len() {
            0 => return None,
            n if n % 2 == 1 => s[n / 2] as f64,
            n => (s[n / 2 - 1] as f64 + s[n / 2] as f64) / 2.0,
        };
        Some(Latency {
            min: s[0] as f64 / 1e3,
            median: median / 1e3,
            max: s[s.len() - 1] as f64 / 1e3,
        })
    }
}

/// A side's parameters, for JSON.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct DestJson {
    /// QP number.
    pub qpn: u32,
    /// GID, 32 hex digits.
    pub gid: String,
    /// First PSN.
    pub psn: u32,
    /// Buffer rkey (write/read).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rkey: Option<u32>,
    /// Buffer address, hex (write/read).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub addr: Option<String>,
}

/// What a run measured.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Report {
    /// The run's figures; the role is "initiator" (sends first) or "responder", and
    /// `bytes` counts both directions (`2 * size * iters` for send and write, `size *
    /// iters` for read).
    #[serde(flatten)]
    pub figures: Figures,
    /// Per-iteration figures: the initiator's round trips; for a send or write
    /// responder, the times between consecutive messages received; for a read responder,
    /// the initiator's figures, which its `done` carries. `None` with fewer than one
    /// sample.
    pub latency_usec: Option<Latency>,
    /// Whether every byte was verified.
    pub checked: bool,
    /// Whose clock the figures come from: "self", or "initiator" for a read responder
    /// (which sees no READs and prints what the initiator's `done` says).
    pub measured_by: &'static str,
    /// This side.
    pub local: DestJson,
    /// The peer.
    pub remote: DestJson,
    /// How many times the QP moved to another function during the run and was followed
    /// there ([`Config::follow`]).
    pub migrations_followed: u32,
}

/// A run's figures as `ibv_rc_pingpong` counts them, the first fields of the reports of
/// rnic-pingpong and of its `--ibv-compat` mode.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Figures {
    /// The operation.
    pub op: Op,
    /// This side: "initiator" or "responder", "client" or "server" (`--ibv-compat`).
    pub role: &'static str,
    /// Bytes per message.
    pub size: usize,
    /// Iterations (messages each way).
    pub iters: u64,
    /// Bytes moved in all: `size * iters` times the directions.
    pub bytes: u64,
    /// Seconds the iterations took.
    pub seconds: f64,
    /// `bytes * 8 / usec`.
    pub mbit_per_s: f64,
    /// `usec / iters`.
    pub usec_per_iter: f64,
}

impl Figures {
    /// The figures of `iters` messages of `size` bytes in `dirs` directions in `elapsed`.
    pub fn of(
        op: Op,
        role: &'static str,
        size: usize,
        iters: u64,
        dirs: u64,
        elapsed: Duration,
    ) -> Figures {
        let bytes = size as u64 * iters * dirs;
        let seconds = elapsed.as_secs_f64();
        let usec = (seconds * 1e6).max(f64::MIN_POSITIVE);
        Figures {
            op,
            role,
            size,
            iters,
            bytes,
            seconds,
            mbit_per_s: bytes as f64 * 8.0 / usec,
            usec_per_iter: usec / iters as f64,
        }
    }
}

impl Report {
    pub(super) fn new(
        cfg: &Config,
        role: &'static str,
        elapsed: Duration,
        latency: Option<Latency>,
        local: &Dest,
        remote: &Dest,
    ) -> Report {
        let dirs = if cfg.op == Op::Read { 1 } else { 2 };
        Report {
            figures: Figures::of(cfg.op, role, cfg.size, cfg.iters, dirs, elapsed),
            latency_usec: latency,
            checked: cfg.check,
            measured_by: if cfg.op == Op::Read && role == "responder" {
                "initiator"
            } else {
                "self"
            },
            local: local.json(),
            remote: remote.json(),
            migrations_followed: 0,
        }
    }

    /// `ibv_rc_pingpong`-style text: `N iters of S bytes in T s: X Mbit/s, Y usec/iter`
    /// and a latency line.
    pub fn text(&self) -> String {
        let f = &self.figures;
        let mut s = format!(
            "{} iters of {} bytes in {:.3} s: {:.2} Mbit/s, {:.2} usec/iter\n",
            f.iters, f.size, f.seconds, f.mbit_per_s, f.usec_per_iter
        );
        match self.latency_usec {
            Some(l) => {
                s += &format!(
                    "latency: min {:.2} usec, median {:.2} usec, max {:.2} usec\n",
                    l.min, l.median, l.max
                )
            }
            None => s += "latency: no samples\n",
        }
        if self.measured_by != "self" {
            s += &format!("(figures measured by the {})\n", self.measured_by);
        }
        if self.migrations_followed > 0 {
            s += &format!(
                "followed the QP through {} migration(s)\n",
                self.migrations_followed
            );
        }
        s
    }
}

impl Dest {
    /// This side's parameters, for JSON.
    pub fn json(&self) -> DestJson {
        DestJson {
            qpn: self.qpn,
            gid: gid::hex(&self.gid).to_string(),
            psn: self.psn,
            rkey: self.buf.map(|b| b.rkey),
            addr: self.buf.map(|b| format!("{:#x}", b.addr)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pingpong::tests::{cfg, dest};

    #[test]
    fn latency_figures() {
        assert_eq!(Latency::of(&[]), None);
        let l = Latency::of(&[3000, 1000, 2000]).unwrap();
        assert_eq!((l.min, l.median, l.max), (1.0, 2.0, 3.0));
        let l = Latency::of(&[4000, 1000, 2000, 3000]).unwrap();
        assert_eq!(l.median, 2.5);
    }

    #[test]
    fn reports_read_like_ibv_rc_pingpong() {
        let r = Report::new(
            &cfg(Op::Send),
            "initiator",
            Duration::from_millis(500),
            Latency::of(&[400_000, 500_000, 600_000]),
            &dest(),
            &dest(),
        );
        assert_eq!(r.figures.bytes, 2 * 4096 * 1000);
        assert!((r.figures.usec_per_iter - 500.0).abs() < 1e-9);
        assert!((r.figures.mbit_per_s - 131.072).abs() < 1e-9);
        assert_eq!(
            r.text(),
            "1000 iters of 4096 bytes in 0.500 s: 131.07 Mbit/s, 500.00 usec/iter\n\
             latency: min 400.00 usec, median 500.00 usec, max 600.00 usec\n"
        );
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(v["op"], "send");
        assert_eq!(v["latency_usec"]["median"], 500.0);
        assert_eq!(v["local"]["addr"], "0x100001000");
        let r = Report::new(
            &cfg(Op::Read),
            "responder",
            Duration::from_millis(500),
            None,
            &dest(),
            &dest(),
        );
        assert_eq!(r.figures.bytes, 4096 * 1000);
        assert!(r.text().contains("latency: no samples"));
        assert!(r.text().contains("measured by the initiator"));
    }
}
