//! One turn of a function's RDMA engine (docs/hardware-interface.md §7.9): what arrived is
//! received ([`super::recv`]) and acknowledged, shared send queues hand their WQEs to
//! their QPs, every QP whose doorbell was rung or that has work or a due timer runs its
//! requester ([`super::requester`], or the DC, UC and UD ones) and completes what is done
//! ([`super::completer`]), and control queues run. The engine's threads give each
//! function such a turn on every pass ([`crate::function::Function::run`]).

use std::time::Instant;

use rnic_abi::doorbell::{self, SLOTS};
use rnic_abi::verbs::{Cqe, QpState};

use super::env::Env;
use super::shared_sq::Taken;
use super::wire::Wire;
use super::{completer, dc, requester, responder, uc, ud, RdmaState, SlotOwner};
use crate::doorbell::DoorbellBar;
use crate::fabric::frame::Frame;

impl RdmaState {
    /// Does the RDMA work of the function: validates and dispatches `frames`, runs the
    /// requester of every QP whose send doorbell was rung or that has work pending, and
    /// fires due timers. Frames to send are left in `wire.out`. Returns whether anything
    /// happened.
    pub fn poll(
        &mut self,
        env: &Env,
        frames: impl IntoIterator<Item = Frame>,
        wire: &mut Wire,
        now: Instant,
    ) -> bool {
        let mut progress = false;
        // The QPs that received frames: only they can owe an ACK.
        let mut received = Vec::new();
        for frame in frames {
            progress = true;
            self.deliver(&frame, env, wire, now, &mut received);
            wire.recycle(frame.bytes);
        }
        if progress {
            // One ACK for what arrived together (see `responder::flush_ack`).
            let before = wire.out.len();
            received.sort_unstable();
            received.dedup();
            for qpn in received {
                if let Some(qp) = self.qps.get_mut(&qpn) {
                    responder::flush_ack(qp, wire);
                }
            }
            self.counters.tx_packets += wire.packets_since(before);
        }
        // Shared send queues hand their WQEs to their QPs first, which then run below.
        progress |= self.run_shared_sqs(env);
        let mut runnable: Vec<u32> = self.rung_send_queues(env.doorbells);
        progress |= !runnable.is_empty();
        // QPs with queued ops (behind a fence or the READ window, or due a resend) and
        // QPs whose timer is due also get a turn.
        self.schedule.due(now, &mut runnable);
        runnable.sort_unstable();
        runnable.dedup();
        for qpn in runnable {
            let Some(mut qp) = self.qps.remove(&qpn) else {
                continue;
            };
            completer::on_timer(self, &mut qp, env, now);
            // Messages that name a session group get their session before their first
            // packet: take new WQEs now (the requester would take them itself, and hold
            // one it takes later until the next pass gives it its session).
            let sends = !matches!(qp.state, QpState::Reset | QpState::Init | QpState::Rtr);
            if sends && self.ud.qkey(qpn).is_none() {
                if !self.sessions.ports().is_empty() {
                    requester::fetch(&mut qp, env);
                }
                self.sessions.assign(&mut qp.req.ops);
            }
            let before = wire.out.len();
            let mut retransmits = 0;
            let ran = match self.ud.qkey(qpn) {
                Some(qkey) => ud::run_send(&mut qp, &self.mrs, env, wire, qkey),
                None if self.uc.contains(qpn) => uc::run_send(&mut qp, &mut self.mrs, env, wire),
                None if self.dc.is_dci(qpn) || self.dc.is_dct(qpn) => dc::run(
                    &mut self.dc,
                    &mut qp,
                    &mut self.mrs,
                    env,
                    wire,
                    now,
                    &mut retransmits,
                ),
                None => requester::run(
                    &mut qp,
                    &mut self.mrs,
                    env,
                    wire,
                    now,
                    &mut retransmits,
                    true,
                ),
            };
            self.counters.retransmits += retransmits;
            qp.req.retransmits += retransmits;
            self.counters.tx_packets += wire.packets_since(before);
            completer::retire(self, &mut qp, env, now);
            if qp.state == QpState::Err {
                self.flush_queues(&mut qp, env);
            }
            progress |= ran;
            self.qps.insert(qpn, qp);
            self.reschedule(qpn);
            self.report_drained(qpn, env);
        }
        // After the QPs: a WQE that found its key pending runs on the next pass.
        progress |= self.run_ctrlqs(env);
        progress
    }

    /// Hands the WQEs posted to shared send queues since the last look to their QPs.
    /// Returns whether anything was taken.
    fn run_shared_sqs(&mut self, env: &Env) -> bool {
        let mut progress = false;
        let numbers: Vec<u32> = self.shared_sqs.queues.keys().copied().collect();
        for ssqn in numbers {
            while self.shared_sqs.has_work(ssqn, env) {
                match self.shared_sqs.take(ssqn, env, &self.qps, &self.ud) {
                    Taken::Wait => break,
                    Taken::Queued(qpn, op) => {
                        if let Some(qp) = self.qps.get_mut(&qpn) {
                            qp.req.ops.push_back(*op);
                        }
                        // The QP has work now: the engine's schedule must give it a turn.
                        self.reschedule(qpn);
                    }
                    Taken::Refused(from, qpn, wr_id, status) => {
                        let cqe = Cqe {
                            wr_id,
                            qp_num: qpn,
                            status: status as u8,
                            ..Cqe::default()
                        };
                        self.finish_shared(from, cqe, true, env);
                    }
                }
                progress = true;
            }
        }
        progress
    }

    /// The QP numbers whose send or receive doorbells were rung since the last look,
    /// taking the rung bits (the device only ever clears them).
    pub fn rung_send_queues(&self, doorbells: &DoorbellBar) -> Vec<u32> {
        let mut rung = Vec::new();
        let pages = (0..doorbell::PAGES).filter(|&p| self.queue_slots_in_page[p as usize] > 0);
        for page in pages {
            let base = u64::from(page) * rnic_abi::PAGE_SIZE + doorbell::RUNG_BITMAP;
            for word in 0..SLOTS.div_ceil(32) {
                let at = base + u64::from(word) * 4;
                if doorbells.read32(at).unwrap_or(0) == 0 {
                    continue;
                }
                let bits = doorbells.swap32(at, 0).unwrap_or(0);
                for bit in 0..32 {
                    if bits & (1 << bit) != 0 {
                        if let Some(SlotOwner::Sq(qpn) | SlotOwner::Rq(qpn)) =
                            self.slots.get(&(page, word * 32 + bit))
                        {
                            rung.push(*qpn);
                        }
                    }
                }
            }
        }
        rung
    }
}
