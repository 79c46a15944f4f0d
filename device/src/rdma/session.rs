//! Sessions: the UDP source ports the PF gave the function, and the choice of one per
//! message among the group a send WQE names ([`rnic_abi::session`]).

use std::collections::VecDeque;

use rnic_abi::session::MAX_SESSIONS;

use super::wqe::Op;
use super::wqe::OpState;

/// The function's sessions and where the round robin is.
#[derive(Debug, Default)]
pub struct Sessions {
    ports: Vec<u16>,
    next: usize,
}

impl Sessions {
    /// Replaces the sessions with `ports` (at most [`MAX_SESSIONS`], non-zero, distinct:
    /// the admin command checked them).
    pub fn set(&mut self, ports: &[u16]) {
        debug_assert!(ports.len() <= MAX_SESSIONS);
        self.ports = ports.to_vec();
        self.next = 0;
    }

    /// The sessions' ports.
    pub fn ports(&self) -> &[u16] {
        &self.ports
    }

    /// The port of the next session of `group` (bit i = session i), round robin over all
    /// messages of the function; `None` when the group names no session.
    pub fn pick(&mut self, group: u8) -> Option<u16> {
        let members: Vec<u16> = self
            .ports
            .iter()
            .enumerate()
            .filter(|(i, _)| group & (1 << i) != 0)
            .map(|(_, p)| *p)
            .collect();
        if members.is_empty() {
            return None;
        }
        let port = members[self.next % members.len()];
        self.next = self.next.wrapping_add(1);
        Some(port)
    }

    /// Gives every op of `ops` not yet sent whose WQE names a session group its session:
    /// `Some(port)`, or `Some(OWN_PORT)` when the group names no assigned session. The
    /// requester holds such an op until it has one ([`needs_session`]).
    pub fn assign(&mut self, ops: &mut VecDeque<Op>) {
        for o in ops.iter_mut() {
            if needs_session(o) && o.state == OpState::Queued {
                o.session_port = Some(self.pick(o.op.wqe.session_group).unwrap_or(OWN_PORT));
            }
        }
    }
}

/// [`Op::session_port`] of a message that names a group without assigned sessions: it
/// leaves from the QP's own port.
pub const OWN_PORT: u16 = 0;

/// Whether `o` waits for [`Sessions::assign`] before its first packet.
/// A local operation sends nothing (and a REG_MR WQE's byte there is its page shift).
pub fn needs_session(o: &Op) -> bool {
    o.op.wqe.session_group != 0 && o.session_port.is_none() && !o.assigned && !o.is_local()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picks_round_robin_within_the_group_and_none_outside() {
        let mut s = Sessions::default();
        assert_eq!(s.pick(1), None);
        s.set(&[5000, 5001, 5002, 5003]);
        let got: Vec<_> = (0..4).map(|_| s.pick(0b0101)).collect();
        assert_eq!(got, [Some(5000), Some(5002), Some(5000), Some(5002)]);
        assert_eq!(s.pick(0b1_0000), None, "session 4 is not assigned");
        s.set(&[1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(s.pick(0b1000_0000), Some(8));
        s.set(&[5000, 5001, 5002, 5003]);
        assert_eq!(s.pick(0b1000), Some(5003));
    }
}
