//! What each command does, and the reply it gives ([`Response`]). The queue mechanics
//! live in [`crate::cmdq`]; this is the device's behaviour behind the opcodes
//! (docs/hardware-interface.md §6).

use rnic_abi::cmd::{CmdHeader, Opcode, QueryDeviceResp, Status};
use zerocopy::{FromBytes, IntoBytes};

use crate::eth::{EthState, Station};
use crate::fabric::frame::AddressTable;
use crate::identity::Identity;
use crate::rdma::env::Env;
use crate::rdma::error::VerbsError;
use crate::rdma::RdmaState;

/// What a command handler answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// Completion status.
    pub status: Status,
    /// Status detail for [`rnic_abi::cmd::RespHeader::syndrome`].
    pub syndrome: u32,
    /// The response structure that follows the header (empty on failure).
    pub body: Vec<u8>,
}

impl Response {
    /// A successful response carrying `body`.
    pub fn ok(body: Vec<u8>) -> Self {
        Self {
            status: Status::Ok,
            syndrome: 0,
            body,
        }
    }

    /// A failed response with no body.
    pub fn error(status: Status, syndrome: u32) -> Self {
        Self {
            status,
            syndrome,
            body: Vec::new(),
        }
    }
}

impl From<VerbsError> for Response {
    fn from(e: VerbsError) -> Self {
        Response::error(e.status, e.syndrome)
    }
}

/// The answer to a command that is not this queue's to run: an admin command on a
/// function's command queue, and every command on a VF's admin queue.
pub fn not_permitted(header: &CmdHeader) -> Response {
    Response::error(Status::NotPermitted, u32::from(header.opcode))
}

/// Bytes of the response body of `opcode`.
pub fn response_len(opcode: Opcode) -> usize {
    use rnic_abi::verbs::{
        CreateCqResp, CreateEqResp, CreateQpResp, ObjectResp, QueryQpResp, RegMrResp,
    };
    match opcode {
        Opcode::QueryDevice => size_of::<QueryDeviceResp>(),
        Opcode::CreateEq => size_of::<CreateEqResp>(),
        Opcode::AllocPd => size_of::<ObjectResp>(),
        Opcode::RegMr
        | Opcode::CreateIndirectKey
        | Opcode::CreatePatternKey
        | Opcode::RegDmaMr
        | Opcode::AllocFastRegMr => size_of::<RegMrResp>(),
        Opcode::CreateCq => size_of::<CreateCqResp>(),
        Opcode::CreateQp => size_of::<CreateQpResp>(),
        Opcode::QueryQp => size_of::<QueryQpResp>(),
        Opcode::CreateSrq => size_of::<rnic_abi::srq::CreateSrqResp>(),
        Opcode::CreateCtrlq => size_of::<rnic_abi::ctrlq::CreateCtrlqResp>(),
        Opcode::ReserveMkeys => size_of::<rnic_abi::ctrlq::ReserveMkeysResp>(),
        Opcode::CreateSharedSq => size_of::<rnic_abi::shared_sq::CreateSharedSqResp>(),
        Opcode::CreateSqWindow => size_of::<rnic_abi::mmio::SqWindowResp>(),
        Opcode::QuerySrq => size_of::<rnic_abi::srq::QuerySrqResp>(),
        Opcode::AdminQuery => size_of::<rnic_abi::admin::AdminQueryResp>(),
        Opcode::QueryMember => size_of::<rnic_abi::admin::MemberInfo>(),
        Opcode::GetStats => size_of::<rnic_abi::admin::MemberStats>(),
        Opcode::GetPortStats => size_of::<rnic_abi::admin::PortStats>(),
        Opcode::MigrateQp => size_of::<rnic_abi::migration::MigrateQpResp>(),
        Opcode::AdoptQp => size_of::<rnic_abi::migration::AdoptQpResp>(),
        Opcode::AllocMw => size_of::<rnic_abi::mw::AllocMwResp>(),
        Opcode::CreateEthQueue => size_of::<rnic_abi::eth::CreateEthQueueResp>(),
        Opcode::QueryEth => size_of::<rnic_abi::eth::QueryEthResp>(),
        Opcode::QueryEthQueue => size_of::<rnic_abi::eth::EthQueueStats>(),
        Opcode::QueryGid => size_of::<rnic_abi::gid::QueryGidResp>(),
        Opcode::SetNumVfs
        | Opcode::SetQuota
        | Opcode::SetAddress
        | Opcode::SetLink
        | Opcode::ResetVf
        | Opcode::Nop
        | Opcode::DestroyEq
        | Opcode::DeallocPd
        | Opcode::DeregMr
        | Opcode::DeallocMw
        | Opcode::DestroyCq
        | Opcode::ResizeCq
        | Opcode::ModifyQp
        | Opcode::DestroyQp
        | Opcode::AttachMcast
        | Opcode::DetachMcast
        | Opcode::ModifySrq
        | Opcode::ResizeSrq
        | Opcode::DestroySrq
        | Opcode::SetDcKey
        | Opcode::DestroyCtrlq
        | Opcode::DestroySharedSq
        | Opcode::SetSessions
        | Opcode::SetVfEth
        | Opcode::DestroyEthQueue
        | Opcode::SetEth
        | Opcode::SetGid => 0,
    }
}

/// Refuses what no queue of the function may run before it runs: a header with reserved
/// bits set, or a response that would not fit in `room` bytes.
pub fn precheck(header: &CmdHeader, room: usize) -> Result<Option<Opcode>, Response> {
    if header.reserved != 0 {
        // Reserved fields must be zero so that they can be given a meaning later.
        return Err(Response::error(Status::BadParam, 2));
    }
    let op = Opcode::from_u16(header.opcode);
    if let Some(op) = op {
        let needed = response_len(op);
        if room < needed {
            // Refused before it runs: an object created now could never be named. The
            // syndrome says how many bytes the whole response needs.
            let whole = needed + size_of::<rnic_abi::cmd::RespHeader>();
            return Err(Response::error(Status::Malformed, whole as u32));
        }
    }
    Ok(op)
}

/// Executes one command of the command queue for the function described by `identity`,
/// whose RDMA objects are `rdma`, with `room` bytes for the response body. Admin opcodes
/// are not permitted here, on any function: they run only on the PF's admin queue.
pub fn execute(
    identity: &Identity,
    target: Target,
    env: &Env,
    header: &CmdHeader,
    body: &[u8],
    room: usize,
) -> Response {
    let Target {
        rdma,
        eth,
        station,
        neighbors,
        own_address_only,
    } = target;
    // Refused whatever the rest of the command says: it is not this queue's to run.
    if rnic_abi::admin::is_admin_opcode(header.opcode) {
        return not_permitted(header);
    }
    let op = match precheck(header, room) {
        Ok(op) => op,
        Err(r) => return r,
    };
    match op {
        None => Response::error(Status::BadOpcode, u32::from(header.opcode)),
        Some(Opcode::Nop) => Response::ok(Vec::new()),
        Some(Opcode::QueryDevice) => {
            if !body.is_empty() {
                return Response::error(Status::BadParam, 0);
            }
            Response::ok(query_device(identity).as_bytes().to_vec())
        }
        Some(
            op @ (Opcode::CreateEthQueue
            | Opcode::DestroyEthQueue
            | Opcode::SetEth
            | Opcode::QueryEth
            | Opcode::QueryEthQueue),
        ) => eth
            .execute(op, body, rdma, env, station)
            .map_or_else(Response::from, Response::ok),
        Some(Opcode::SetGid) => {
            let Ok(req) = rnic_abi::gid::SetGidReq::read_from_bytes(body) else {
                return Response::error(Status::BadParam, body.len() as u32);
            };
            // An address is another function's if the switch has it under another MAC.
            let taken = |ip| neighbors.get(&ip).is_some_and(|&mac| mac != station.mac);
            match rdma.gids.set(&req, station.ip, own_address_only, taken) {
                Ok(()) => Response::ok(Vec::new()),
                Err((status, syndrome)) => Response::error(status, syndrome),
            }
        }
        Some(Opcode::QueryGid) => {
            use rnic_abi::gid::{QueryGidReq, QueryGidResp, GID_VALID};
            let Ok(req) = QueryGidReq::read_from_bytes(body) else {
                return Response::error(Status::BadParam, body.len() as u32);
            };
            if req.reserved != 0 || req.index >= rnic_abi::gid::GID_TABLE_LEN {
                return Response::error(Status::BadParam, req.index);
            }
            let gid = rdma.gids.get(req.index as usize, identity.gid);
            let resp = QueryGidResp {
                flags: if gid.is_some() { GID_VALID } else { 0 },
                gid: gid.unwrap_or_default(),
                ..QueryGidResp::default()
            };
            Response::ok(resp.as_bytes().to_vec())
        }
        Some(opcode) => rdma
            .execute(opcode, body, env)
            .map_or_else(Response::from, Response::ok),
    }
}

/// What a command acts on: the function's RDMA objects, its Ethernet queues, and the
/// function as an Ethernet station.
pub struct Target<'a> {
    /// The RDMA objects (and the doorbell slots every queue takes).
    pub rdma: &'a mut RdmaState,
    /// The Ethernet queues.
    pub eth: &'a mut EthState,
    /// The function's MAC, link, PF policy and vectors.
    pub station: &'a Station,
    /// The switch's addresses, IPv4 to MAC: `SET_GID` refuses another function's.
    pub neighbors: &'a AddressTable,
    /// Whether the function can have no address but its own (`--net udp` binds a socket
    /// to each function's): `SET_GID` then refuses others.
    pub own_address_only: bool,
}

impl Target<'_> {
    /// The same target, borrowed again for one command.
    pub fn reborrow(&mut self) -> Target<'_> {
        Target {
            rdma: self.rdma,
            eth: self.eth,
            station: self.station,
            neighbors: self.neighbors,
            own_address_only: self.own_address_only,
        }
    }
}

fn query_device(identity: &Identity) -> QueryDeviceResp {
    QueryDeviceResp {
        vendor_id: rnic_abi::pci::VENDOR_ID,
        device_id: identity.device_id(),
        abi_major: rnic_abi::ABI_MAJOR,
        abi_minor: rnic_abi::ABI_MINOR,
        fw_version: fw_version(),
        function_kind: identity.kind_code(),
        vf_index: identity.vf_index() as u8,
        total_vfs: identity.total_vfs(),
        caps: identity.caps,
        mac: identity.mac,
        reserved0: 0,
        gid: identity.gid,
        limits: identity.limits,
    }
}

/// rnicd's version packed as `rnic_abi::cmd::QueryDeviceResp::fw_version` wants it.
pub fn fw_version() -> u32 {
    let part = |s: &str| s.parse::<u32>().unwrap_or(0) & 0xff;
    part(env!("CARGO_PKG_VERSION_MAJOR")) << 16
        | part(env!("CARGO_PKG_VERSION_MINOR")) << 8
        | part(env!("CARGO_PKG_VERSION_PATCH"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::identity::FunctionId;
    use zerocopy::FromBytes;

    fn header(opcode: u16) -> CmdHeader {
        CmdHeader {
            opcode,
            reserved: 0,
            token: 7,
        }
    }

    /// Runs a command on a function with no memory and no objects.
    fn execute(id: &Identity, h: &CmdHeader, body: &[u8]) -> Response {
        let dma = crate::dma::DmaSpace::new();
        let (r, w) = (dma.readable(), dma.writable());
        let doorbells = crate::doorbell::DoorbellBar::new(1).expect("doorbells");
        let env = Env {
            r: &r,
            w: &w,
            doorbells: &doorbells,
        };
        let station = Station {
            mac: id.mac,
            ip: [10, 0, 0, 1],
            link_up: true,
            policy: crate::eth::Policy::VF,
            msix_vectors: 16,
            gids: Default::default(),
        };
        let target = Target {
            rdma: &mut RdmaState::new(id.limits),
            eth: &mut EthState::default(),
            station: &station,
            neighbors: &Default::default(),
            own_address_only: false,
        };
        super::execute(id, target, &env, h, body, 4096)
    }

    #[test]
    fn query_device_reports_identity() {
        let id = Identity::new(FunctionId::Vf(3), 4, None);
        let r = execute(&id, &header(Opcode::QueryDevice as u16), &[]);
        assert_eq!(r.status, Status::Ok);
        let q = QueryDeviceResp::read_from_bytes(&r.body).unwrap();
        assert_eq!(q.vendor_id, rnic_abi::pci::VENDOR_ID);
        assert_eq!(q.device_id, rnic_abi::pci::VF_DEVICE_ID);
        assert_eq!(q.function_kind, rnic_abi::cmd::FUNCTION_KIND_VF);
        assert_eq!(q.vf_index, 3);
        assert_eq!(q.total_vfs, 0);
        assert_eq!(q.mac, id.mac);
        assert!(q.limits.max_qp > 0);
    }

    #[test]
    fn unknown_opcodes_and_reserved_bits_are_refused() {
        let id = Identity::new(FunctionId::Pf, 2, None);
        assert_eq!(execute(&id, &header(0x7777), &[]).status, Status::BadOpcode);
        let mut h = header(Opcode::Nop as u16);
        h.reserved = 1;
        assert_eq!(execute(&id, &h, &[]).status, Status::BadParam);
        assert_eq!(
            execute(&id, &header(Opcode::QueryDevice as u16), &[1]).status,
            Status::BadParam
        );
        assert_eq!(
            execute(&id, &header(Opcode::Nop as u16), &[]).status,
            Status::Ok
        );
    }

    #[test]
    fn admin_opcodes_are_not_permitted_on_a_command_queue() {
        // Even on the PF, and even for admin numbers no command has yet.
        let id = Identity::new(FunctionId::Pf, 2, None);
        for op in [Opcode::AdminQuery as u16, Opcode::ResetVf as u16, 0x1FFF] {
            let r = execute(&id, &header(op), &[]);
            assert_eq!(r.status, Status::NotPermitted, "opcode {op:#x}");
            assert_eq!(r.syndrome, u32::from(op));
        }
    }
}
