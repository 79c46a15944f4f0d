//! UD multicast groups of one function (docs/hardware-interface.md §14.15): which of its
//! UD QPs each IPv4 group holds. `ATTACH_MCAST` and `DETACH_MCAST` fill the table;
//! [`super::recv`] hands a multicast packet (destination QPN
//! [`rnic_abi::mcast::MULTICAST_QPN`]) to every QP of its group, as rxe's
//! `rxe_rcv_mcast_pkt` does; a function with no QP in the group ignores it, as a port's
//! multicast filter would.

use std::collections::BTreeMap;

use rnic_abi::cmd::Status;
use rnic_abi::mcast::{MAX_GROUPS, MAX_QPS_PER_GROUP};

use super::error::VerbsError;

/// The groups of a function and the QPs in each, in the order they joined.
#[derive(Debug, Default)]
pub struct McastTable {
    groups: BTreeMap<[u8; 4], Vec<u32>>,
}

impl McastTable {
    /// QP `qpn` joins `group`; joining twice changes nothing. Refused with
    /// `NO_RESOURCES` beyond [`MAX_GROUPS`] groups or [`MAX_QPS_PER_GROUP`] QPs a group.
    pub fn attach(&mut self, group: [u8; 4], qpn: u32) -> Result<(), VerbsError> {
        if !self.groups.contains_key(&group) && self.groups.len() >= MAX_GROUPS as usize {
            return Err(VerbsError::new(Status::NoResources, MAX_GROUPS));
        }
        let qps = self.groups.entry(group).or_default();
        if qps.contains(&qpn) {
            return Ok(());
        }
        if qps.len() >= MAX_QPS_PER_GROUP as usize {
            return Err(VerbsError::new(Status::NoResources, MAX_QPS_PER_GROUP));
        }
        qps.push(qpn);
        Ok(())
    }

    /// QP `qpn` leaves `group`; `BAD_PARAM` (syndrome 16) if it is not in it. A group
    /// with no QP left is gone.
    pub fn detach(&mut self, group: [u8; 4], qpn: u32) -> Result<(), VerbsError> {
        let qps = self
            .groups
            .get_mut(&group)
            .filter(|qps| qps.contains(&qpn))
            .ok_or(VerbsError::new(Status::BadParam, 16))?;
        qps.retain(|&q| q != qpn);
        if qps.is_empty() {
            self.groups.remove(&group);
        }
        Ok(())
    }

    /// QP `qpn` is gone: it leaves every group.
    pub fn remove_qp(&mut self, qpn: u32) {
        self.groups.retain(|_, qps| {
            qps.retain(|&q| q != qpn);
            !qps.is_empty()
        });
    }

    /// The QPs in `group` (none if the function does not hold it).
    pub fn members(&self, group: [u8; 4]) -> &[u32] {
        self.groups.get(&group).map_or(&[], Vec::as_slice)
    }

    /// Whether the function holds any group.
    pub fn is_empty(&self) -> bool {
        self.groups.is_empty()
    }
}

/// Whether `ip` is an IPv4 multicast address (224.0.0.0/4).
pub fn is_group(ip: [u8; 4]) -> bool {
    ip[0] & 0xf0 == 0xe0
}

#[cfg(test)]
mod tests {
    use super::*;

    const G: [u8; 4] = [239, 1, 1, 1];

    #[test]
    fn qps_join_and_leave_groups_within_the_limits() {
        let mut t = McastTable::default();
        t.attach(G, 0x11).unwrap();
        t.attach(G, 0x11).unwrap();
        t.attach(G, 0x12).unwrap();
        assert_eq!(t.members(G), &[0x11, 0x12]);
        assert_eq!(t.detach(G, 0x13).unwrap_err().status, Status::BadParam);
        t.detach(G, 0x11).unwrap();
        assert_eq!(t.members(G), &[0x12]);
        t.remove_qp(0x12);
        assert!(t.is_empty(), "the last QP took the group with it");
        for q in 0..MAX_QPS_PER_GROUP {
            t.attach(G, q).unwrap();
        }
        let full = t.attach(G, 0x100).unwrap_err();
        assert_eq!(full.status, Status::NoResources);
        for g in 1..MAX_GROUPS {
            t.attach([239, 2, 0, g as u8], 1).unwrap();
        }
        let many = t.attach([239, 3, 0, 0], 1).unwrap_err();
        assert_eq!(many.status, Status::NoResources);
        assert!(is_group(G) && !is_group([10, 0, 0, 1]));
    }
}
