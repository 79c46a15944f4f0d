//! What `rnic-info` reports about a function, as text and as JSON (README, "On the host,
//! without a VM"): its identity and QUERY_DEVICE's answer (docs/hardware-interface.md
//! §6.12), and how the driver reaches it.

use std::fmt::Write;

use rnic_abi::cmd::{QueryDeviceResp, FUNCTION_KIND_PF};
use rnic_abi::gid;
use rnic_abi::regs;
use rnic_driver::device::{Device, PciIdentity};
use rnic_driver::error::Result;
use serde::Serialize;

use crate::admin::format_mac;

/// Everything rnic-info knows about one function.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// Where the function was found.
    pub location: String,
    /// Config-space identity.
    pub pci: PciIdentity,
    /// "PF" or "VF".
    pub function: String,
    /// VF index (VFs only).
    pub vf_index: Option<u8>,
    /// TotalVFs (PF only).
    pub total_vfs: Option<u16>,
    /// ABI version of the device.
    pub abi: String,
    /// Version of the device implementation.
    pub firmware: String,
    /// MAC address.
    pub mac: String,
    /// Default GID.
    pub gid: String,
    /// Capability names.
    pub capabilities: Vec<&'static str>,
    /// Resource limits, by ibverbs name.
    pub limits: Vec<(&'static str, u64)>,
    /// How the driver reaches the function ([`rnic_driver::transport::Transport::kind`]).
    pub transport: String,
    /// Whether the driver gets interrupts on this transport.
    pub interrupts: bool,
}

const CAP_NAMES: &[(u64, &str)] = &[
    (regs::CAP_CMDQ, "cmdq"),
    (regs::CAP_DOORBELL_NOTIFY, "doorbell-notify"),
    (regs::CAP_MSIX, "msix"),
    (regs::CAP_FUNCTION_RESET, "function-reset"),
    (regs::CAP_RDMA_RC, "rdma-rc"),
    (regs::CAP_ADMIN, "admin"),
    (regs::CAP_INDIRECT_MKEY, "indirect-mkey"),
    (regs::CAP_PATTERN_MKEY, "pattern-mkey"),
    (regs::CAP_SEND_VARIANTS, "send-variants"),
    (regs::CAP_SRQ, "srq"),
    (regs::CAP_UD, "ud"),
    (regs::CAP_DC, "dc"),
    (regs::CAP_ONE_SHOT_READ, "one-shot-read"),
    (regs::CAP_WQE_MMIO, "wqe-mmio"),
    (regs::CAP_PIPELINED_REG, "pipelined-reg"),
    (regs::CAP_SHARED_SQ, "shared-sq"),
    (regs::CAP_SESSIONS, "sessions"),
    (regs::CAP_PAGE_TABLES, "page-tables"),
    (regs::CAP_UC, "uc"),
    (regs::CAP_MW, "mw"),
    (regs::CAP_ETH, "eth"),
    (regs::CAP_FAST_REG, "fast-reg"),
    (regs::CAP_GSI, "gsi"),
    (regs::CAP_USER_KICK, "user-kick"),
    (regs::CAP_GID_TABLE, "gid-table"),
    (regs::CAP_RESIZE_CQ, "resize-cq"),
    (regs::CAP_RESIZE_SRQ, "resize-srq"),
    (regs::CAP_ATOMIC_WRITE, "atomic-write"),
    (regs::CAP_FLUSH, "flush"),
    (regs::CAP_MULTICAST, "multicast"),
];

impl Report {
    /// Queries `device` (through its command queue) for its report.
    pub fn gather(location: &str, device: &Device) -> Result<Self> {
        let q: QueryDeviceResp = device.query_device()?;
        let pf = q.function_kind == FUNCTION_KIND_PF;
        let l = q.limits;
        Ok(Self {
            location: location.to_string(),
            pci: device.pci(),
            function: if pf { "PF".into() } else { "VF".into() },
            vf_index: (!pf).then_some(q.vf_index),
            total_vfs: pf.then_some(q.total_vfs),
            abi: format!("{}.{}", q.abi_major, q.abi_minor),
            firmware: format!(
                "{}.{}.{}",
                q.fw_version >> 16 & 0xff,
                q.fw_version >> 8 & 0xff,
                q.fw_version & 0xff
            ),
            mac: format_mac(&q.mac),
            gid: gid::ip(&q.gid).to_string(),
            capabilities: CAP_NAMES
                .iter()
                .filter(|(bit, _)| q.caps & bit != 0)
                .map(|&(_, n)| n)
                .collect(),
            limits: vec![
                ("max_qp", l.max_qp.into()),
                ("max_qp_wr", l.max_qp_wr.into()),
                ("max_sge", l.max_sge.into()),
                ("max_cq", l.max_cq.into()),
                ("max_cqe", l.max_cqe.into()),
                ("max_mr", l.max_mr.into()),
                ("max_pd", l.max_pd.into()),
                ("max_qp_rd_atom", l.max_qp_rd_atom.into()),
                ("max_qp_init_rd_atom", l.max_qp_init_rd_atom.into()),
                ("max_inline_data", l.max_inline_data.into()),
                ("max_mr_size", l.max_mr_size),
                ("max_mr_pages", l.max_mr_pages.into()),
                ("doorbell_pages", l.doorbell_pages.into()),
                ("msix_vectors", l.msix_vectors.into()),
                ("cmdq_max_size", l.cmdq_max_size.into()),
            ],
            transport: device.transport().kind(),
            interrupts: device.interrupts(),
        })
    }

    /// The human-readable form.
    pub fn text(&self) -> String {
        let mut s = String::new();
        let p = &self.pci;
        let _ = writeln!(s, "{}", self.location);
        let _ = writeln!(
            s,
            "  pci:          vendor {:04x} device {:04x} rev {:02x} class {:06x} subsystem {:04x}:{:04x}",
            p.vendor_id, p.device_id, p.revision, p.class_code, p.subsystem_vendor_id, p.subsystem_id
        );
        let func = match (self.vf_index, self.total_vfs) {
            (Some(i), _) => format!("VF {i}"),
            (None, Some(n)) => format!("PF with {n} VFs"),
            _ => self.function.clone(),
        };
        let _ = writeln!(s, "  function:     {func}");
        let _ = writeln!(
            s,
            "  abi:          {} (driver {}.{})",
            self.abi,
            rnic_abi::ABI_MAJOR,
            rnic_abi::ABI_MINOR
        );
        let _ = writeln!(s, "  firmware:     {}", self.firmware);
        let _ = writeln!(s, "  mac:          {}", self.mac);
        let _ = writeln!(s, "  gid:          {}", self.gid);
        let _ = writeln!(s, "  capabilities: {}", self.capabilities.join(" "));
        let _ = writeln!(s, "  transport:    {}", self.transport);
        let _ = writeln!(
            s,
            "  interrupts:   {}",
            if self.interrupts { "msi-x" } else { "polled" }
        );
        let _ = writeln!(s, "  limits:");
        for (name, value) in &self.limits {
            let _ = writeln!(s, "    {name:<20} {value}");
        }
        s
    }
}
