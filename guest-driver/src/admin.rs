//! PF administration through the admin queue (docs/hardware-interface.md §12, "PF
//! administration"): typed admin commands on a [`Device`] that is a PF. What `rnic-admin`
//! prints of them is the tools' (`rnic_tools::admin`).

use rnic_abi::admin::{
    AdminQueryResp, MemberInfo, MemberReq, MemberStats, PortStats, Quota, SetAddressReq,
    SetLinkReq, SetNumVfsReq, SetQuotaReq, LINK_DOWN, LINK_UP, SET_GID, SET_MAC,
};
use rnic_abi::cmd::Opcode;
use rnic_abi::migration::{MigrateQpReq, MigrateQpResp};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use crate::device::Device;
use crate::error::{Error, Result};

fn parse<T: FromBytes + KnownLayout + Immutable>(opcode: Opcode, body: &[u8]) -> Result<T> {
    T::read_from_bytes(body).map_err(|_| {
        Error::Device(format!(
            "{opcode:?} answered {} bytes, expected {}",
            body.len(),
            size_of::<T>()
        ))
    })
}

fn call<Resp: FromBytes + KnownLayout + Immutable>(
    device: &Device,
    opcode: Opcode,
    request: &[u8],
) -> Result<Resp> {
    let body = device.admin_command(opcode, request, size_of::<Resp>())?;
    parse(opcode, &body)
}

fn call0(device: &Device, opcode: Opcode, request: &[u8]) -> Result<()> {
    device.admin_command(opcode, request, 0).map(drop)
}

impl Device {
    /// ADMIN_QUERY: the device's pools and VF count.
    pub fn admin_query(&self) -> Result<AdminQueryResp> {
        call(self, Opcode::AdminQuery, &[])
    }

    /// SET_NUM_VFS: enables VFs `0..n`, disables (and so resets) the rest.
    pub fn set_num_vfs(&self, n: u32) -> Result<()> {
        let req = SetNumVfsReq {
            num_vfs: n,
            reserved: 0,
        };
        call0(self, Opcode::SetNumVfs, req.as_bytes())
    }

    /// QUERY_MEMBER: a member's state, addresses, quota and usage.
    pub fn query_member(&self, member: u32) -> Result<MemberInfo> {
        let req = MemberReq {
            member,
            reserved: 0,
        };
        call(self, Opcode::QueryMember, req.as_bytes())
    }

    /// SET_QUOTA.
    pub fn set_quota(&self, member: u32, quota: Quota) -> Result<()> {
        let req = SetQuotaReq {
            member,
            reserved: 0,
            quota,
        };
        call0(self, Opcode::SetQuota, req.as_bytes())
    }

    /// SET_ADDRESS: a member's MAC and/or GID (`None` leaves it).
    pub fn set_address(
        &self,
        member: u32,
        mac: Option<[u8; 6]>,
        gid: Option<[u8; 16]>,
    ) -> Result<()> {
        let req = SetAddressReq {
            member,
            flags: mac.map_or(0, |_| SET_MAC) | gid.map_or(0, |_| SET_GID),
            mac: mac.unwrap_or_default(),
            reserved: 0,
            gid: gid.unwrap_or_default(),
        };
        call0(self, Opcode::SetAddress, req.as_bytes())
    }

    /// SET_VF_ETH: VF member `member`'s spoof check and trust
    /// (`rnic_abi::eth::VF_SPOOF_CHECK`, `VF_TRUST`).
    pub fn set_vf_eth(&self, member: u32, flags: u32) -> Result<()> {
        let req = rnic_abi::eth::SetVfEthReq { member, flags };
        call0(self, Opcode::SetVfEth, req.as_bytes())
    }

    /// SET_LINK.
    pub fn set_link(&self, member: u32, up: bool) -> Result<()> {
        let req = SetLinkReq {
            member,
            state: if up { LINK_UP } else { LINK_DOWN },
        };
        call0(self, Opcode::SetLink, req.as_bytes())
    }

    /// GET_STATS: a member's counters.
    pub fn member_stats(&self, member: u32) -> Result<MemberStats> {
        let req = MemberReq {
            member,
            reserved: 0,
        };
        call(self, Opcode::GetStats, req.as_bytes())
    }

    /// GET_PORT_STATS: the counters of the device's network port.
    pub fn port_stats(&self) -> Result<PortStats> {
        call(self, Opcode::GetPortStats, &[])
    }

    /// RESET_VF: function-level reset of a VF.
    pub fn reset_vf(&self, member: u32) -> Result<()> {
        let req = MemberReq {
            member,
            reserved: 0,
        };
        call0(self, Opcode::ResetVf, req.as_bytes())
    }

    /// MIGRATE_QP.
    pub fn migrate_qp(&self, req: &MigrateQpReq) -> Result<MigrateQpResp> {
        call(self, Opcode::MigrateQp, req.as_bytes())
    }

    /// SET_SESSIONS: gives `member` the sessions `ports` (UDP source ports; none removes
    /// them all).
    pub fn set_sessions(&self, member: u32, ports: &[u16]) -> Result<()> {
        let mut req = rnic_abi::session::SetSessionsReq {
            member,
            count: ports.len() as u32,
            ..Default::default()
        };
        req.ports
            .get_mut(..ports.len())
            .ok_or_else(|| {
                Error::Device(format!(
                    "{} sessions; a function has at most {}",
                    ports.len(),
                    rnic_abi::session::MAX_SESSIONS
                ))
            })?
            .copy_from_slice(ports);
        call0(self, Opcode::SetSessions, req.as_bytes())
    }
}
