//! The function's objects as the control socket's `res` lists them (docs/hardware-
//! interface.md §12.9), after the kernel's resource tracking (`rdma res show`): a
//! snapshot taken under the function's lock, changing nothing.

use rnic_abi::verbs::QpState;
use rnic_control::{CqEntry, MrEntry, PdEntry, QpEntry, SrqEntry};

use super::RdmaState;

/// The name `rdma res show qp` gives a state.
fn state_name(state: QpState) -> &'static str {
    match state {
        QpState::Reset => "RESET",
        QpState::Init => "INIT",
        QpState::Rtr => "RTR",
        QpState::Rts => "RTS",
        QpState::Sqd => "SQD",
        QpState::Sqe => "SQE",
        QpState::Err => "ERR",
    }
}

impl RdmaState {
    /// The QPs, by number.
    pub fn qp_entries(&self) -> Vec<QpEntry> {
        let function = self.function.to_string();
        self.qps
            .values()
            .map(|qp| {
                let connected = matches!(qp.state, QpState::Rtr | QpState::Rts | QpState::Sqd);
                QpEntry {
                    function: function.clone(),
                    lqpn: qp.qpn,
                    rqpn: if connected { qp.attr.dest_qp_num } else { 0 },
                    r#type: self.transport_of(qp.qpn).name().into(),
                    state: state_name(qp.state).into(),
                    sq_psn: qp.req.next_psn,
                    rq_psn: qp.resp.epsn,
                    pdn: qp.pdn,
                    send_cqn: qp.send_cqn,
                    recv_cqn: qp.recv_cqn,
                    srqn: self.srqs.of(qp.qpn),
                    outstanding: qp.req.ops.len() as u32,
                    retransmits: qp.req.retransmits,
                    rnr_retry_left: qp.req.rnr_left,
                    retry_left: qp.req.retry_left,
                }
            })
            .collect()
    }

    /// The CQs, by number.
    pub fn cq_entries(&self) -> Vec<CqEntry> {
        let function = self.function.to_string();
        self.cqs
            .iter()
            .map(|(&cqn, cq)| CqEntry {
                function: function.clone(),
                cqn,
                entries: cq.entries(),
                produced: cq.produced(),
                users: cq.users,
                error: cq.error,
            })
            .collect()
    }

    /// The MRs, by key.
    pub fn mr_entries(&self) -> Vec<MrEntry> {
        let function = self.function.to_string();
        self.mrs
            .regions()
            .map(|(key, mr)| MrEntry {
                function: function.clone(),
                key,
                pdn: mr.pdn,
                iova: mr.iova,
                length: mr.buffer.len(),
                access: mr.access,
                valid: mr.valid,
            })
            .collect()
    }

    /// The PDs, by number.
    pub fn pd_entries(&self) -> Vec<PdEntry> {
        let function = self.function.to_string();
        self.pds
            .iter()
            .map(|(&pdn, pd)| PdEntry {
                function: function.clone(),
                pdn,
                users: pd.users,
            })
            .collect()
    }

    /// The SRQs, by number.
    pub fn srq_entries(&self) -> Vec<SrqEntry> {
        let function = self.function.to_string();
        self.srqs
            .srqs
            .iter()
            .map(|(&srqn, srq)| SrqEntry {
                function: function.clone(),
                srqn,
                pdn: srq.pdn,
                entries: srq.wq.entries,
                taken: srq.wq.taken,
                limit: srq.limit,
            })
            .collect()
    }
}
