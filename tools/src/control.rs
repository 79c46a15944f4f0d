//! rnic-admin's reports of the control socket (`--control`, docs/hardware-interface.md
//! §12.9): live counters and objects of every function, read without taking the PF.

use std::fmt::Write;

use rnic_control::{Counters, CqEntry, MrEntry, PdEntry, QpEntry, SrqEntry, Stats};

/// `name value` pairs, wrapped at about 90 columns, each line indented by `indent`.
fn pairs(counters: &Counters, indent: &str, skip_zero: bool) -> String {
    let mut out = String::new();
    let mut line = String::new();
    for (name, value) in counters {
        if skip_zero && *value == 0 {
            continue;
        }
        let item = format!("{name} {value}");
        if !line.is_empty() && indent.len() + line.len() + 2 + item.len() > 90 {
            let _ = writeln!(out, "{indent}{line}");
            line.clear();
        }
        if !line.is_empty() {
            line.push_str("  ");
        }
        line.push_str(&item);
    }
    if !line.is_empty() {
        let _ = writeln!(out, "{indent}{line}");
    }
    out
}

/// `stats` as text: per function its transport counters since the last reset and since
/// start, its drops by reason (those not zero), its rxe-named counters; then the port and
/// the fault injector.
pub fn stats_text(s: &Stats, function: Option<&str>) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "uptime {:.1} s", s.uptime_ms as f64 / 1000.0);
    for f in s
        .functions
        .iter()
        .filter(|f| function.is_none_or(|n| n == f.function))
    {
        let _ = writeln!(out, "{}:", f.function);
        let _ = write!(
            out,
            "  since reset\n{}",
            pairs(&f.since_reset.transport, "    ", false)
        );
        let _ = write!(
            out,
            "  since start\n{}",
            pairs(&f.since_start.transport, "    ", false)
        );
        let drops = pairs(&f.since_reset.drops, "    ", true);
        let _ = write!(
            out,
            "  drops by reason since reset\n{}",
            if drops.is_empty() {
                "    none\n".into()
            } else {
                drops
            }
        );
        let _ = write!(
            out,
            "  rxe hw_counters\n{}",
            pairs(&f.since_reset.rxe, "    ", false)
        );
        let eth = pairs(&f.since_reset.ethernet, "    ", true);
        if !eth.is_empty() {
            let _ = write!(out, "  ethernet\n{eth}");
        }
    }
    if function.is_none() {
        let _ = writeln!(out, "port ({}):", s.port.kind);
        let port = pairs(&s.port.counters, "  ", true);
        out.push_str(if port.is_empty() { "  all 0\n" } else { &port });
        if let Some(faults) = &s.faults {
            let _ = write!(out, "faults:\n{}", pairs(faults, "  ", false));
        }
    }
    out
}

/// `res qp` as text, one line per QP, as `rdma res show qp` prints them.
pub fn qp_text(list: &[QpEntry]) -> String {
    list.iter()
        .map(|q| {
            let srq = q.srqn.map(|n| format!(" srqn {n}")).unwrap_or_default();
            format!(
                "function {} lqpn {} rqpn {} type {} state {} sq-psn {} rq-psn {} pdn {} \
                 send-cqn {} recv-cqn {}{srq} outstanding {} retransmits {} retry-left {} \
                 rnr-retry-left {}\n",
                q.function,
                q.lqpn,
                q.rqpn,
                q.r#type,
                q.state,
                q.sq_psn,
                q.rq_psn,
                q.pdn,
                q.send_cqn,
                q.recv_cqn,
                q.outstanding,
                q.retransmits,
                q.retry_left,
                q.rnr_retry_left
            )
        })
        .collect()
}

/// `res cq` as text.
pub fn cq_text(list: &[CqEntry]) -> String {
    list.iter()
        .map(|c| {
            format!(
                "function {} cqn {} cqe {} produced {} users {}{}\n",
                c.function,
                c.cqn,
                c.entries,
                c.produced,
                c.users,
                if c.error { " error" } else { "" }
            )
        })
        .collect()
}

/// `res mr` as text.
pub fn mr_text(list: &[MrEntry]) -> String {
    list.iter()
        .map(|m| {
            format!(
                "function {} lkey {:#x} rkey {:#x} pdn {} iova {:#x} mrlen {} access {:#x}{}\n",
                m.function,
                m.key,
                m.key,
                m.pdn,
                m.iova,
                m.length,
                m.access,
                if m.valid { "" } else { " invalidated" }
            )
        })
        .collect()
}

/// `res pd` as text.
pub fn pd_text(list: &[PdEntry]) -> String {
    list.iter()
        .map(|p| format!("function {} pdn {} users {}\n", p.function, p.pdn, p.users))
        .collect()
}

/// `res srq` as text.
pub fn srq_text(list: &[SrqEntry]) -> String {
    list.iter()
        .map(|s| {
            format!(
                "function {} srqn {} pdn {} wqe {} taken {} limit {}\n",
                s.function, s.srqn, s.pdn, s.entries, s.taken, s.limit
            )
        })
        .collect()
}
