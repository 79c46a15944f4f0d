//! What the admin commands do (docs/hardware-interface.md, "PF administration").
//!
//! The PF's admin queue is an ordinary queue ([`crate::cmdq::QueueBlock`]); its commands
//! act on other functions, the switch and the resource pool, so they run from the engine
//! ([`crate::engine`]), which owns all three, with no function's state lock held (each
//! command locks what it touches). A VF's admin queue answers every command with
//! `NotPermitted` ([`crate::commands::not_permitted`]).

use std::sync::Arc;

use rnic_abi::admin::{
    AdminQueryResp, MemberInfo, MemberReq, SetAddressReq, SetLinkReq, SetNumVfsReq, SetQuotaReq,
    LINK_DOWN, LINK_UP, MEMBER_ENABLED, MEMBER_LINK_UP, SET_GID, SET_MAC,
};
use rnic_abi::cmd::{CmdHeader, Opcode, Status};
use rnic_abi::migration::MigrateQpReq;
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use crate::commands::Response;
use crate::fabric::switch::Switch;
use crate::function::{Address, Function};
use crate::resources::ResourcePool;

/// What admin commands act on: the whole device.
pub struct AdminContext<'a> {
    /// The functions, PF first: index = member id.
    pub functions: &'a [Arc<Function>],
    /// The internal switch.
    pub switch: &'a mut Switch,
    /// The device's resource pool.
    pub pool: &'a ResourcePool,
}

fn decode<T: FromBytes + KnownLayout + Immutable>(body: &[u8]) -> Result<T, Response> {
    T::read_from_bytes(body).map_err(|_| Response::error(Status::BadParam, body.len() as u32))
}

fn reply<T: IntoBytes + Immutable>(value: &T) -> Response {
    Response::ok(value.as_bytes().to_vec())
}

fn bad_param(syndrome: u32) -> Response {
    Response::error(Status::BadParam, syndrome)
}

impl AdminContext<'_> {
    /// Executes one admin command of the PF's admin queue, with `room` bytes for the
    /// response body.
    pub fn execute(&mut self, header: &CmdHeader, body: &[u8], room: usize) -> Response {
        if let Err(refused) = crate::commands::precheck(header, room) {
            return refused;
        }
        let result = match Opcode::from_u16(header.opcode) {
            Some(Opcode::Nop) if body.is_empty() => Ok(Response::ok(Vec::new())),
            Some(Opcode::AdminQuery) => self.admin_query(body),
            Some(Opcode::SetNumVfs) => self.set_num_vfs(body),
            Some(Opcode::QueryMember) => self.query_member(body),
            Some(Opcode::SetQuota) => self.set_quota(body),
            Some(Opcode::SetAddress) => self.set_address(body),
            Some(Opcode::SetLink) => self.set_link(body),
            Some(Opcode::GetStats) => self.get_stats(body),
            Some(Opcode::GetPortStats) => self.get_port_stats(body),
            Some(Opcode::ResetVf) => self.reset_vf(body),
            Some(Opcode::MigrateQp) => self.migrate_qp(body),
            Some(Opcode::SetSessions) => self.set_sessions(body),
            Some(Opcode::SetVfEth) => self.set_vf_eth(body),
            // The admin queue runs admin commands only.
            _ => Err(Response::error(Status::BadOpcode, u32::from(header.opcode))),
        };
        result.unwrap_or_else(|e| e)
    }

    /// The function with member id `member`.
    fn member(&self, member: u32) -> Result<&Arc<Function>, Response> {
        self.functions
            .get(member as usize)
            .ok_or(Response::error(Status::NotFound, member))
    }

    fn member_req(&self, body: &[u8]) -> Result<&Arc<Function>, Response> {
        let req: MemberReq = decode(body)?;
        if req.reserved != 0 {
            return Err(bad_param(4));
        }
        self.member(req.member)
    }

    /// The VFs, in order.
    fn vfs(&self) -> impl Iterator<Item = &Arc<Function>> {
        self.functions.iter().skip(1)
    }

    fn total_vfs(&self) -> usize {
        self.functions.len().saturating_sub(1)
    }

    fn admin_query(&mut self, body: &[u8]) -> Result<Response, Response> {
        if !body.is_empty() {
            return Err(bad_param(0));
        }
        let enabled = self.vfs().filter(|f| f.is_enabled()).count();
        Ok(reply(&AdminQueryResp {
            total_vfs: self.total_vfs() as u16,
            num_vfs: enabled as u16,
            reserved: 0,
            totals: self.pool.totals(),
            unassigned: self.pool.unassigned(),
        }))
    }

    fn set_num_vfs(&mut self, body: &[u8]) -> Result<Response, Response> {
        let req: SetNumVfsReq = decode(body)?;
        if req.reserved != 0 {
            return Err(bad_param(4));
        }
        if req.num_vfs as usize > self.total_vfs() {
            return Err(bad_param(req.num_vfs));
        }
        for (vf, f) in self.vfs().enumerate() {
            // Disabling resets the VF: what it held is destroyed and its charges return.
            f.set_enabled(vf < req.num_vfs as usize);
        }
        Ok(Response::ok(Vec::new()))
    }

    fn query_member(&mut self, body: &[u8]) -> Result<Response, Response> {
        let f = self.member_req(body)?;
        let a = f.address();
        let mut flags = 0;
        if f.is_enabled() {
            flags |= MEMBER_ENABLED;
        }
        if f.link_up() {
            flags |= MEMBER_LINK_UP;
        }
        Ok(reply(&MemberInfo {
            member: f.member() as u32,
            flags,
            mac: a.mac,
            reserved: 0,
            gid: a.gid,
            quota: self.pool.quota(f.member()),
            usage: self.pool.usage(f.member()),
        }))
    }

    fn set_quota(&mut self, body: &[u8]) -> Result<Response, Response> {
        let req: SetQuotaReq = decode(body)?;
        if req.reserved != 0 {
            return Err(bad_param(4));
        }
        let f = self.member(req.member)?;
        self.pool.set_quota(f.member(), req.quota).map_err(|e| {
            let (status, syndrome) = e.status();
            Response::error(status, syndrome)
        })?;
        Ok(Response::ok(Vec::new()))
    }

    fn set_address(&mut self, body: &[u8]) -> Result<Response, Response> {
        let req: SetAddressReq = decode(body)?;
        if req.flags & !(SET_MAC | SET_GID) != 0 || req.reserved != 0 {
            return Err(bad_param(req.flags));
        }
        let f = self.member(req.member)?.clone();
        let mut new = f.address();
        if req.flags & SET_MAC != 0 {
            // Unicast and not zero: the switch forwards by it.
            if req.mac[0] & 1 != 0 || req.mac == [0; 6] {
                return Err(bad_param(8));
            }
            new.mac = req.mac;
        }
        if req.flags & SET_GID != 0 {
            if !self.switch.uplink_follows_addresses() {
                // With --net udp: the function's UDP socket is bound to its address.
                return Err(Response::error(Status::BadState, 16));
            }
            new.gid = req.gid;
        }
        let ip = |a: &Address| [a.gid[12], a.gid[13], a.gid[14], a.gid[15]];
        // Nor an address another function's driver set in its GID table (§6.13).
        let holder = self.switch.neighbors().get(&ip(&new)).copied();
        if holder.is_some_and(|mac| mac != f.address().mac) {
            return Err(bad_param(16));
        }
        for other in self.functions.iter().filter(|o| o.member() != f.member()) {
            let a = other.address();
            // Two ports with one address would make the switch's forwarding ambiguous.
            if a.mac == new.mac {
                return Err(bad_param(8));
            }
            if ip(&a) == ip(&new) {
                return Err(bad_param(16));
            }
        }
        f.set_address(new);
        // The engine hands the switch's new address table to the functions.
        self.switch.set_endpoint(f.member(), f.endpoint());
        Ok(Response::ok(Vec::new()))
    }

    fn set_link(&mut self, body: &[u8]) -> Result<Response, Response> {
        let req: SetLinkReq = decode(body)?;
        let up = match req.state {
            LINK_UP => true,
            LINK_DOWN => false,
            other => return Err(bad_param(other)),
        };
        self.member(req.member)?.set_link(up);
        Ok(Response::ok(Vec::new()))
    }

    /// A VF's spoof check and trust (§15.6); the PF's own are fixed.
    fn set_vf_eth(&mut self, body: &[u8]) -> Result<Response, Response> {
        use rnic_abi::eth::{SetVfEthReq, VF_SPOOF_CHECK, VF_TRUST};
        let req: SetVfEthReq = decode(body)?;
        if req.flags & !(VF_SPOOF_CHECK | VF_TRUST) != 0 {
            return Err(bad_param(4));
        }
        if req.member == rnic_abi::admin::MEMBER_PF {
            return Err(bad_param(0));
        }
        self.member(req.member)?.set_eth_policy(crate::eth::Policy {
            spoof_check: req.flags & VF_SPOOF_CHECK != 0,
            trusted: req.flags & VF_TRUST != 0,
        });
        Ok(Response::ok(Vec::new()))
    }

    fn get_stats(&mut self, body: &[u8]) -> Result<Response, Response> {
        let f = self.member_req(body)?;
        Ok(reply(&f.stats()))
    }

    /// The network port's counters: the port is the device's, no member's, so it has no
    /// member id and no member's reset touches them.
    fn get_port_stats(&mut self, body: &[u8]) -> Result<Response, Response> {
        if !body.is_empty() {
            return Err(bad_param(body.len() as u32));
        }
        Ok(reply(&self.switch.port_stats()))
    }

    fn reset_vf(&mut self, body: &[u8]) -> Result<Response, Response> {
        let req: MemberReq = decode(body)?;
        if req.reserved != 0 {
            return Err(bad_param(4));
        }
        if req.member == rnic_abi::admin::MEMBER_PF {
            // The PF resets itself (DEVICE_CONTROL, FLR); this command is for its VFs.
            return Err(bad_param(0));
        }
        self.member(req.member)?.function_reset();
        Ok(Response::ok(Vec::new()))
    }

    fn set_sessions(&mut self, body: &[u8]) -> Result<Response, Response> {
        let req: rnic_abi::session::SetSessionsReq = decode(body)?;
        let f = self.member(req.member)?.clone();
        let count = req.count as usize;
        if count > rnic_abi::session::MAX_SESSIONS {
            return Err(bad_param(4));
        }
        let ports = &req.ports[..count];
        if ports.contains(&0) || req.ports[count..].iter().any(|&p| p != 0) {
            return Err(bad_param(8));
        }
        if (1..count).any(|i| ports[..i].contains(&ports[i])) {
            return Err(bad_param(8));
        }
        f.lock_rdma().sessions.set(ports);
        Ok(Response::ok(Vec::new()))
    }

    fn migrate_qp(&mut self, body: &[u8]) -> Result<Response, Response> {
        let req: MigrateQpReq = decode(body)?;
        let resp = crate::migrate::migrate_qp(self.functions, self.switch, self.pool, &req)?;
        Ok(reply(&resp))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::identity::{FunctionId, Identity};
    use crate::resources::{DmaBudget, Resource};
    use rnic_abi::admin::{MemberStats, Quota};

    struct Device {
        functions: Vec<Arc<Function>>,
        switch: Switch,
        pool: Arc<ResourcePool>,
    }

    fn device(vfs: u16) -> Device {
        let pool = Arc::new(ResourcePool::with_defaults(usize::from(vfs) + 1));
        let functions: Vec<_> = std::iter::once(FunctionId::Pf)
            .chain((0..vfs).map(FunctionId::Vf))
            .enumerate()
            .map(|(i, id)| {
                Arc::new(
                    Function::with_pool(Identity::new(id, vfs, None), pool.clone(), i).unwrap(),
                )
            })
            .collect();
        let switch = Switch::new(functions.iter().map(|f| f.endpoint()).collect(), None);
        Device {
            functions,
            switch,
            pool,
        }
    }

    impl Device {
        fn run(&mut self, opcode: Opcode, body: &[u8]) -> Response {
            let mut ctx = AdminContext {
                functions: &self.functions,
                switch: &mut self.switch,
                pool: &self.pool,
            };
            let h = CmdHeader {
                opcode: opcode as u16,
                reserved: 0,
                token: 1,
            };
            ctx.execute(&h, body, 4096)
        }
    }

    #[test]
    fn query_reports_pools_and_vfs() {
        let mut d = device(2);
        let r = d.run(Opcode::AdminQuery, &[]);
        assert_eq!(r.status, Status::Ok);
        let q = AdminQueryResp::read_from_bytes(&r.body).unwrap();
        assert_eq!((q.total_vfs, q.num_vfs), (2, 2));
        assert_eq!(q.totals.qps, 3 * crate::resources::DEFAULT_SHARE.qps);
        assert_eq!(q.unassigned, Quota::default());
        // The DMA kinds: this machine's budget split three ways.
        let share = crate::resources::default_share(3, DmaBudget::of_host());
        assert!(share.dma_windows > 0);
        assert_eq!(
            (q.totals.dma_windows, q.totals.dma_pages),
            (3 * share.dma_windows, 3 * share.dma_pages)
        );
        let r = d.run(Opcode::QueryMember, MemberReq::default().as_bytes());
        let m = MemberInfo::read_from_bytes(&r.body).unwrap();
        assert_eq!(m.quota, share);
    }

    #[test]
    fn num_vfs_disables_the_rest() {
        let mut d = device(3);
        let req = SetNumVfsReq {
            num_vfs: 1,
            reserved: 0,
        };
        assert_eq!(d.run(Opcode::SetNumVfs, req.as_bytes()).status, Status::Ok);
        let on: Vec<bool> = d.functions.iter().map(|f| f.is_enabled()).collect();
        assert_eq!(on, [true, true, false, false]);
        let too_many = SetNumVfsReq {
            num_vfs: 4,
            reserved: 0,
        };
        assert_eq!(
            d.run(Opcode::SetNumVfs, too_many.as_bytes()).status,
            Status::BadParam
        );
    }

    #[test]
    fn quota_changes_are_checked_against_the_pool() {
        let mut d = device(1);
        let share = d.pool.quota(0);
        let shrink = SetQuotaReq {
            member: 0,
            reserved: 0,
            quota: Quota { qps: 10, ..share },
        };
        assert_eq!(
            d.run(Opcode::SetQuota, shrink.as_bytes()).status,
            Status::Ok
        );
        let grab = SetQuotaReq {
            member: 1,
            reserved: 0,
            quota: Quota { qps: 1000, ..share },
        };
        let r = d.run(Opcode::SetQuota, grab.as_bytes());
        assert_eq!(
            (r.status, r.syndrome),
            (Status::NoResources, Resource::Qp.index())
        );
        d.pool.charge(1, Resource::Cq, 5).unwrap();
        let below = SetQuotaReq {
            member: 1,
            reserved: 0,
            quota: Quota { cqs: 4, ..share },
        };
        let r = d.run(Opcode::SetQuota, below.as_bytes());
        assert_eq!(
            (r.status, r.syndrome),
            (Status::BadState, Resource::Cq.index())
        );
        // The DMA kinds, likewise: the PF's whole share is free, one more is not.
        let free = d.pool.unassigned();
        for (quota, index) in [
            (
                Quota {
                    dma_windows: share.dma_windows + free.dma_windows + 1,
                    ..share
                },
                6,
            ),
            (
                Quota {
                    dma_pages: share.dma_pages + free.dma_pages + 1,
                    ..share
                },
                7,
            ),
        ] {
            let grab = SetQuotaReq {
                member: 1,
                reserved: 0,
                quota,
            };
            let r = d.run(Opcode::SetQuota, grab.as_bytes());
            assert_eq!((r.status, r.syndrome), (Status::NoResources, index));
        }
        d.pool.charge(1, Resource::DmaWindows, 2).unwrap();
        let below = SetQuotaReq {
            member: 1,
            reserved: 0,
            quota: Quota {
                dma_windows: 1,
                ..share
            },
        };
        let r = d.run(Opcode::SetQuota, below.as_bytes());
        assert_eq!((r.status, r.syndrome), (Status::BadState, 6));
        // A VF reset keeps what its client mapped.
        let vf0 = MemberReq {
            member: 1,
            reserved: 0,
        };
        assert_eq!(d.run(Opcode::ResetVf, vf0.as_bytes()).status, Status::Ok);
        assert_eq!(d.pool.usage(1).dma_windows, 2);
        // The limits a function reports follow its quota.
        assert_eq!(d.functions[0].limits().max_qp, 10);
    }

    #[test]
    fn port_stats_come_from_the_uplink_and_take_no_body() {
        let mut d = device(1);
        let r = d.run(Opcode::GetPortStats, &[]);
        assert_eq!(r.status, Status::Ok);
        let none = rnic_abi::admin::PortStats::read_from_bytes(&r.body).unwrap();
        assert_eq!(
            none,
            rnic_abi::admin::PortStats::default(),
            "no port: kind 0"
        );
        let r = d.run(Opcode::GetPortStats, &[0; 8]);
        assert_eq!((r.status, r.syndrome), (Status::BadParam, 8));
    }

    #[test]
    fn members_beyond_the_device_are_not_found() {
        let mut d = device(1);
        let req = MemberReq {
            member: 2,
            reserved: 0,
        };
        for op in [Opcode::QueryMember, Opcode::GetStats, Opcode::ResetVf] {
            assert_eq!(d.run(op, req.as_bytes()).status, Status::NotFound, "{op:?}");
        }
        let pf = MemberReq::default();
        assert_eq!(
            d.run(Opcode::ResetVf, pf.as_bytes()).status,
            Status::BadParam
        );
        let r = d.run(Opcode::GetStats, pf.as_bytes());
        assert_eq!(r.status, Status::Ok);
        assert_eq!(
            MemberStats::read_from_bytes(&r.body).unwrap(),
            MemberStats::default()
        );
    }

    #[test]
    fn addresses_change_and_stay_unique() {
        let mut d = device(2);
        let mut req = SetAddressReq {
            member: 2,
            flags: SET_MAC,
            mac: [0x02, 0, 0, 0, 0, 0x99],
            ..Default::default()
        };
        assert_eq!(d.run(Opcode::SetAddress, req.as_bytes()).status, Status::Ok);
        assert_eq!(d.functions[2].address().mac, req.mac);
        assert_eq!(d.functions[2].endpoint().mac, req.mac);
        // Another function's MAC, a multicast MAC: refused, nothing changes.
        req.member = 1;
        assert_eq!(
            d.run(Opcode::SetAddress, req.as_bytes()).status,
            Status::BadParam
        );
        req.mac = [0x01, 0, 0, 0, 0, 1];
        assert_eq!(
            d.run(Opcode::SetAddress, req.as_bytes()).status,
            Status::BadParam
        );
        let gid_of_pf = d.functions[0].address().gid;
        let gid = SetAddressReq {
            member: 1,
            flags: SET_GID,
            gid: gid_of_pf,
            ..Default::default()
        };
        assert_eq!(
            d.run(Opcode::SetAddress, gid.as_bytes()).status,
            Status::BadParam
        );
    }

    #[test]
    fn link_state_is_per_member() {
        let mut d = device(1);
        let down = SetLinkReq {
            member: 1,
            state: LINK_DOWN,
        };
        assert_eq!(d.run(Opcode::SetLink, down.as_bytes()).status, Status::Ok);
        assert!(!d.functions[1].link_up());
        assert!(d.functions[0].link_up());
        let bad = SetLinkReq {
            member: 1,
            state: 7,
        };
        assert_eq!(
            d.run(Opcode::SetLink, bad.as_bytes()).status,
            Status::BadParam
        );
    }

    #[test]
    fn non_admin_opcodes_and_short_bodies_are_refused() {
        let mut d = device(1);
        assert_eq!(d.run(Opcode::CreateQp, &[]).status, Status::BadOpcode);
        assert_eq!(d.run(Opcode::Nop, &[]).status, Status::Ok);
        assert_eq!(d.run(Opcode::QueryMember, &[0; 4]).status, Status::BadParam);
    }
}
