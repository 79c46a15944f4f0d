//! Which function a function is and what it has for life: its number (PF or VF n), its
//! addresses (MAC, and the GID that carries its IPv4 address) and its limits, as
//! `QUERY_DEVICE` reports them (docs/hardware-interface.md §1.1, §6.12).

use std::net::Ipv4Addr;

use rnic_abi::cmd::{Limits, FUNCTION_KIND_PF, FUNCTION_KIND_VF};
use rnic_abi::doorbell;
use rnic_abi::pci;
use rnic_abi::regs::*;

/// Which function of the device this is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FunctionId {
    /// The physical function.
    Pf,
    /// Virtual function number n (0-based).
    Vf(u16),
}

impl std::fmt::Display for FunctionId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FunctionId::Pf => write!(f, "pf"),
            FunctionId::Vf(i) => write!(f, "vf{i}"),
        }
    }
}

/// What a function is and has: fixed for its life.
#[derive(Debug, Clone)]
pub struct Identity {
    /// PF or VF.
    pub id: FunctionId,
    /// VFs of the device (the PF's TotalVFs).
    pub device_vfs: u16,
    /// Ethernet MAC address.
    pub mac: [u8; 6],
    /// Default GID: the IPv4-mapped address of the function.
    pub gid: [u8; 16],
    /// Capability bits.
    pub caps: u64,
    /// Resource limits.
    pub limits: Limits,
}

/// The PF's IPv4 address when neither `--net udp:ADDR` nor `--net-ip` gives one: the
/// functions are then 10.82.0.1, 10.82.0.2, ...
pub const DEFAULT_IP_BASE: Ipv4Addr = Ipv4Addr::new(10, 82, 0, 1);

impl Identity {
    /// The identity of function `id` of a device with `device_vfs` VFs (at most 255),
    /// numbered n = 0 for the PF and i + 1 for VF i: MAC 02:52:4e:49:43:nn and IPv4 address
    /// `ip_base` + n (a 32-bit sum, wrapping), whose IPv4-mapped form is the GID.
    /// `ip_base` is the PF's address ([`crate::net::ip_base`]), or [`DEFAULT_IP_BASE`]
    /// when `None`.
    pub fn new(id: FunctionId, device_vfs: u16, ip_base: Option<Ipv4Addr>) -> Self {
        let n: u16 = match id {
            FunctionId::Pf => 0,
            FunctionId::Vf(i) => i + 1,
        };
        let mut gid = [0u8; 16];
        gid[10] = 0xff;
        gid[11] = 0xff;
        let ipv4 = u32::from(ip_base.unwrap_or(DEFAULT_IP_BASE)).wrapping_add(u32::from(n));
        gid[12..].copy_from_slice(&ipv4.to_be_bytes());
        Self {
            id,
            device_vfs,
            mac: [0x02, 0x52, 0x4e, 0x49, 0x43, n as u8],
            gid,
            caps: CAP_CMDQ
                | CAP_DOORBELL_NOTIFY
                | CAP_MSIX
                | CAP_FUNCTION_RESET
                | CAP_RDMA_RC
                | CAP_INDIRECT_MKEY
                | CAP_PATTERN_MKEY
                | CAP_SEND_VARIANTS
                | CAP_SRQ
                | CAP_UD
                | CAP_DC
                | CAP_ONE_SHOT_READ
                | CAP_WQE_MMIO
                | CAP_PIPELINED_REG
                | CAP_SHARED_SQ
                | CAP_SESSIONS
                | CAP_PAGE_TABLES
                | CAP_UC
                | CAP_MW
                | CAP_ETH
                | CAP_FAST_REG
                | CAP_GSI
                | CAP_USER_KICK
                | CAP_GID_TABLE
                | CAP_RESIZE_CQ
                | CAP_RESIZE_SRQ
                | CAP_ATOMIC_WRITE
                | CAP_FLUSH
                | CAP_MULTICAST
                | if id == FunctionId::Pf { CAP_ADMIN } else { 0 },
            limits: Limits {
                max_qp: 256,
                max_qp_wr: 4096,
                max_sge: 16,
                max_cq: 256,
                max_cqe: 65536,
                max_mr: 1024,
                max_pd: 256,
                max_qp_rd_atom: 16,
                max_qp_init_rd_atom: 16,
                max_inline_data: 256,
                max_mr_size: 1 << 32,
                // As many pages as any one page list names: a region of
                // `max_mr_size` at a page-aligned iova.
                max_mr_pages: rnic_abi::verbs::MAX_PAGE_LIST,
                doorbell_pages: doorbell::PAGES,
                msix_vectors: u32::from(pci::MSIX_VECTORS),
                cmdq_max_size: u32::from(rnic_abi::cmd::CMDQ_MAX_SIZE),
            },
        }
    }

    /// The same identity with MAC `mac` (an Ethernet port's, unique on its segment).
    pub fn with_mac(mut self, mac: [u8; 6]) -> Self {
        self.mac = mac;
        self
    }

    /// The function's IPv4 address: the last four bytes of its GID.
    pub fn ipv4(&self) -> Ipv4Addr {
        Ipv4Addr::new(self.gid[12], self.gid[13], self.gid[14], self.gid[15])
    }

    /// The PCI device ID.
    pub fn device_id(&self) -> u16 {
        match self.id {
            FunctionId::Pf => pci::PF_DEVICE_ID,
            FunctionId::Vf(_) => pci::VF_DEVICE_ID,
        }
    }

    /// `FUNCTION_KIND_*` of the function.
    pub fn kind_code(&self) -> u8 {
        match self.id {
            FunctionId::Pf => FUNCTION_KIND_PF,
            FunctionId::Vf(_) => FUNCTION_KIND_VF,
        }
    }

    /// The VF index, 0 on the PF.
    pub fn vf_index(&self) -> u16 {
        match self.id {
            FunctionId::Pf => 0,
            FunctionId::Vf(i) => i,
        }
    }

    /// TotalVFs on the PF, 0 on a VF.
    pub fn total_vfs(&self) -> u16 {
        match self.id {
            FunctionId::Pf => self.device_vfs,
            FunctionId::Vf(_) => 0,
        }
    }
}
