//! PF administration: the admin queue and its commands (docs/hardware-interface.md,
//! "PF administration").
//!
//! Every function has an admin queue register block ([`crate::regs::ADMINQ_DESC_LO`] and
//! on) and an admin doorbell ([`crate::doorbell::ADMINQ_DOORBELL`]), so the layout is the
//! same on PF and VF. The queue works exactly like the command queue ([`crate::cmd`]):
//! a virtio split ring, one descriptor chain per command, a [`crate::cmd::CmdHeader`] and
//! request in, a [`crate::cmd::RespHeader`] and response out. As in the virtio 1.3
//! administration virtqueue, the PF manages the members of its SR-IOV group with it:
//! VF enable, quotas, addresses, link state, counters, reset and QP migration.
//!
//! Only the PF may issue admin commands. On a VF's admin queue every command completes
//! with [`crate::cmd::Status::NotPermitted`], and so does an admin opcode (one in
//! [`ADMIN_OPCODE_BASE`]..) on any command queue.
//!
//! Members are numbered as virtio numbers SR-IOV group members: [`MEMBER_PF`] (0) is the
//! PF itself, `n` is VF `n - 1`.

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// First admin opcode; every opcode from here to `0x1FFF` is an admin opcode.
pub const ADMIN_OPCODE_BASE: u16 = 0x1000;
/// Last admin opcode number reserved for admin commands.
pub const ADMIN_OPCODE_LAST: u16 = 0x1FFF;

/// Whether `opcode` is in the admin range (known to the device or not).
pub const fn is_admin_opcode(opcode: u16) -> bool {
    opcode >= ADMIN_OPCODE_BASE && opcode <= ADMIN_OPCODE_LAST
}

/// Member id of the PF itself.
pub const MEMBER_PF: u32 = 0;

/// Member id of VF `vf` (0-based).
pub const fn member_of_vf(vf: u32) -> u32 {
    vf + 1
}

/// Resource counts of a function: its quota, or its usage. Also the device totals and
/// what is left unassigned.
///
/// The first six count objects of the function (and what they hold); they are released
/// when the objects go, at the latest at a reset of the function. The last two count the
/// DMA windows the function's vfio-user client (its VMM) mapped with DMA_MAP: they belong
/// to the client, survive every reset of the function and are released only by
/// DMA_UNMAP or the client leaving (since ABI 1.6).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct Quota {
    /// Queue pairs.
    pub qps: u32,
    /// Completion queues.
    pub cqs: u32,
    /// Memory regions.
    pub mrs: u32,
    /// Protection domains.
    pub pds: u32,
    /// Pages of memory regions (the sum of the page-list lengths of registered MRs).
    pub mr_pages: u32,
    /// Doorbell pages: the function may place queue doorbells in pages `0..doorbell_pages`
    /// of its doorbell BAR, and uses a page while any doorbell slot in it is assigned.
    pub doorbell_pages: u32,
    /// DMA windows: the DMA_MAP mappings the function's client may hold at once (each
    /// one a mapping of the device process). Since ABI 1.6.
    pub dma_windows: u32,
    /// 4 KiB pages the function's DMA windows may cover in all. Since ABI 1.6.
    pub dma_pages: u32,
}

/// Response of `ADMIN_QUERY` (no request body): the device's pools and its VFs.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct AdminQueryResp {
    /// VFs the device has (TotalVFs).
    pub total_vfs: u16,
    /// VFs enabled now (NumVFs).
    pub num_vfs: u16,
    /// Must be ignored.
    pub reserved: u32,
    /// Device-wide resource totals: the sum of all quotas never exceeds them.
    pub totals: Quota,
    /// What no function's quota holds: room for raising quotas.
    pub unassigned: Quota,
}

/// Request of `SET_NUM_VFS`.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct SetNumVfsReq {
    /// How many VFs are enabled: VFs `0..num_vfs` are live, the rest disabled. At most
    /// [`AdminQueryResp::total_vfs`].
    pub num_vfs: u32,
    /// Must be 0.
    pub reserved: u32,
}

/// Request naming one member: `QUERY_MEMBER`, `GET_STATS`, `RESET_VF`.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct MemberReq {
    /// Member id: 0 = PF, n = VF n-1.
    pub member: u32,
    /// Must be 0.
    pub reserved: u32,
}

/// [`MemberInfo::flags`]: the member is enabled (always set for the PF).
pub const MEMBER_ENABLED: u32 = 1 << 0;
/// [`MemberInfo::flags`]: the member's link is up.
pub const MEMBER_LINK_UP: u32 = 1 << 1;

/// Response of `QUERY_MEMBER`.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct MemberInfo {
    /// The member id.
    pub member: u32,
    /// [`MEMBER_ENABLED`], [`MEMBER_LINK_UP`].
    pub flags: u32,
    /// The member's Ethernet MAC address.
    pub mac: [u8; 6],
    /// Must be ignored.
    pub reserved: u16,
    /// The member's GID (IPv4-mapped IPv6 for RoCEv2).
    pub gid: [u8; 16],
    /// The member's quota.
    pub quota: Quota,
    /// What the member uses now.
    pub usage: Quota,
}

/// Request of `SET_QUOTA`.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct SetQuotaReq {
    /// Member id (0 sets the PF's own share).
    pub member: u32,
    /// Must be 0.
    pub reserved: u32,
    /// The new quota. Fails with `BadState` (syndrome: the [`resource`] index) if it is
    /// below what the member uses now, and with `NoResources` (same syndrome) if it grows
    /// beyond what is unassigned; nothing changes then.
    pub quota: Quota,
}

/// Index of each resource kind, as the syndrome of a failed `SET_QUOTA` names it (and the
/// order of fields in [`Quota`]).
pub mod resource {
    /// [`super::Quota::qps`].
    pub const QPS: u32 = 0;
    /// [`super::Quota::cqs`].
    pub const CQS: u32 = 1;
    /// [`super::Quota::mrs`].
    pub const MRS: u32 = 2;
    /// [`super::Quota::pds`].
    pub const PDS: u32 = 3;
    /// [`super::Quota::mr_pages`].
    pub const MR_PAGES: u32 = 4;
    /// [`super::Quota::doorbell_pages`].
    pub const DOORBELL_PAGES: u32 = 5;
    /// [`super::Quota::dma_windows`].
    pub const DMA_WINDOWS: u32 = 6;
    /// [`super::Quota::dma_pages`].
    pub const DMA_PAGES: u32 = 7;
}

/// [`SetAddressReq::flags`]: set the MAC.
pub const SET_MAC: u32 = 1 << 0;
/// [`SetAddressReq::flags`]: set the GID.
pub const SET_GID: u32 = 1 << 1;

/// Request of `SET_ADDRESS`: a member's MAC and/or GID.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct SetAddressReq {
    /// Member id.
    pub member: u32,
    /// [`SET_MAC`], [`SET_GID`]; other bits must be 0.
    pub flags: u32,
    /// New MAC (with [`SET_MAC`]): a unicast address, not all zeros.
    pub mac: [u8; 6],
    /// Must be 0.
    pub reserved: u16,
    /// New GID (with [`SET_GID`]).
    pub gid: [u8; 16],
}

/// [`SetLinkReq::state`]: link down, as if the cable were pulled.
pub const LINK_DOWN: u32 = 0;
/// [`SetLinkReq::state`]: link up.
pub const LINK_UP: u32 = 1;

/// Request of `SET_LINK`.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct SetLinkReq {
    /// Member id.
    pub member: u32,
    /// [`LINK_UP`] or [`LINK_DOWN`].
    pub state: u32,
}

/// Response of `GET_STATS`: a member's counters since its last reset.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct MemberStats {
    /// Packets the member sent onto the switch.
    pub tx_packets: u64,
    /// Bytes (whole Ethernet frames) the member sent.
    pub tx_bytes: u64,
    /// Packets the member received and accepted.
    pub rx_packets: u64,
    /// Bytes (whole Ethernet frames) of the packets the member received, accepted or not.
    pub rx_bytes: u64,
    /// Received packets the member dropped (validation failed, no such QP, link down).
    pub rx_errors: u64,
    /// Request packets sent again (timeouts, NAKs, RNR).
    pub retransmits: u64,
    /// RNR NAKs sent.
    pub rnr_naks_sent: u64,
    /// Packets the member tried to send while its link was down (discarded).
    pub tx_link_down: u64,
}

/// [`PortStats::kind`]: the device has no network port (rnicd without `--net`); every
/// counter reads 0.
pub const PORT_NONE: u32 = 0;
/// [`PortStats::kind`]: RoCEv2 over the host's UDP sockets (`--net udp:`).
pub const PORT_UDP: u32 = 1;
/// [`PortStats::kind`]: an Ethernet port on a network segment (`--net eth:`).
pub const PORT_ETH: u32 = 2;

/// Response of `GET_PORT_STATS` (no request body): the counters of the device's network
/// port, the link that carries every function's frames to other hosts, since the device
/// started. Frames between functions of the device never reach it. Every frame read off
/// the link is counted in exactly one of `rx_delivered`, `rx_dropped`, `not_for_us`,
/// `looped`, `other_protocol` and `arp_received`, whose sum is `rx_frames`.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct PortStats {
    /// [`PORT_NONE`], [`PORT_UDP`] or [`PORT_ETH`].
    pub kind: u32,
    /// Must be ignored.
    pub reserved: u32,
    /// Frames put on the link (the port's own ARP included).
    pub tx_frames: u64,
    /// Bytes of those frames, as on the link (`eth`: padded to 60; `udp`: the frame the
    /// datagram carries, with its Ethernet, IPv4 and UDP headers).
    pub tx_bytes: u64,
    /// Frames for the link that never went out: a full socket buffer or stream backlog,
    /// no peer connected, no ARP answer, not IPv4/UDP to a unicast address.
    pub tx_dropped: u64,
    /// Frames read off the link.
    pub rx_frames: u64,
    /// Bytes of those frames (counted as `tx_bytes` is).
    pub rx_bytes: u64,
    /// Frames handed to a function, whose receive checks then run.
    pub rx_delivered: u64,
    /// Frames dropped by the port as invalid: the sum of `runt` to `truncated`.
    pub rx_dropped: u64,
    /// Frames the host's kernel dropped before the device could read them, its socket
    /// buffer being full (`SO_RXQ_OVFL`; not in `rx_frames`; 0 on a TCP stream, which
    /// does not drop).
    pub rx_kernel_dropped: u64,
    /// Ignored: addressed to another MAC (or multicast, or broadcast other than ARP).
    pub not_for_us: u64,
    /// Ignored: the port's own frames, back from a hub.
    pub looped: u64,
    /// Ignored: another EtherType, or IPv4 that is not UDP to port 4791.
    pub other_protocol: u64,
    /// ARP packets received.
    pub arp_received: u64,
    /// ARP packets sent (requests, replies, announcements); also in `tx_frames`.
    pub arp_sent: u64,
    /// Frames dropped because their destination never answered ARP, or too many waited
    /// for it; also in `tx_dropped`.
    pub arp_unresolved: u64,
    /// Dropped: shorter than its headers, or ARP that is not IPv4 over Ethernet.
    pub runt: u64,
    /// Dropped: IP version other than 4.
    pub ip_version: u64,
    /// Dropped: IPv4 header length under 5 words or past the frame.
    pub ip_header_length: u64,
    /// Dropped: wrong IPv4 header checksum.
    pub ip_checksum: u64,
    /// Dropped: IPv4 total length under its header or past the frame.
    pub ip_total_length: u64,
    /// Dropped: an IPv4 fragment.
    pub ip_fragment: u64,
    /// Dropped: UDP length under 8 or past the IP payload.
    pub udp_length: u64,
    /// Dropped: the function's receive queue in the port was full.
    pub backlog: u64,
    /// Dropped: a datagram larger than the receive buffer (`udp`).
    pub truncated: u64,
}

impl PortStats {
    /// The name of [`PortStats::kind`]: `none`, `udp`, `eth` (`unknown` for another).
    pub fn kind_name(&self) -> &'static str {
        match self.kind {
            PORT_NONE => "none",
            PORT_UDP => "udp",
            PORT_ETH => "eth",
            _ => "unknown",
        }
    }

    /// Every counter with its field name, in layout order, for reports and logs.
    pub fn named(&self) -> [(&'static str, u64); 23] {
        [
            ("tx_frames", self.tx_frames),
            ("tx_bytes", self.tx_bytes),
            ("tx_dropped", self.tx_dropped),
            ("rx_frames", self.rx_frames),
            ("rx_bytes", self.rx_bytes),
            ("rx_delivered", self.rx_delivered),
            ("rx_dropped", self.rx_dropped),
            ("rx_kernel_dropped", self.rx_kernel_dropped),
            ("not_for_us", self.not_for_us),
            ("looped", self.looped),
            ("other_protocol", self.other_protocol),
            ("arp_received", self.arp_received),
            ("arp_sent", self.arp_sent),
            ("arp_unresolved", self.arp_unresolved),
            ("runt", self.runt),
            ("ip_version", self.ip_version),
            ("ip_header_length", self.ip_header_length),
            ("ip_checksum", self.ip_checksum),
            ("ip_total_length", self.ip_total_length),
            ("ip_fragment", self.ip_fragment),
            ("udp_length", self.udp_length),
            ("backlog", self.backlog),
            ("truncated", self.truncated),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::regs::{ADMINQ_OFFSET, ADMINQ_REGS, CMDQ_REGS};
    use core::mem::size_of;

    #[test]
    fn layouts_match_the_datasheet() {
        assert_eq!(size_of::<Quota>(), 32);
        assert_eq!(core::mem::offset_of!(Quota, dma_windows), 24);
        assert_eq!(core::mem::offset_of!(Quota, dma_pages), 28);
        // The resource indexes are the fields' positions.
        assert_eq!(
            core::mem::offset_of!(Quota, dma_windows) / 4,
            resource::DMA_WINDOWS as usize
        );
        assert_eq!(
            core::mem::offset_of!(Quota, dma_pages) / 4,
            resource::DMA_PAGES as usize
        );
        assert_eq!(size_of::<AdminQueryResp>(), 72);
        assert_eq!(size_of::<SetNumVfsReq>(), 8);
        assert_eq!(size_of::<MemberReq>(), 8);
        assert_eq!(size_of::<MemberInfo>(), 96);
        assert_eq!(size_of::<SetQuotaReq>(), 40);
        assert_eq!(size_of::<SetAddressReq>(), 32);
        assert_eq!(size_of::<SetLinkReq>(), 8);
        assert_eq!(size_of::<MemberStats>(), 64);
        assert_eq!(size_of::<PortStats>(), 192);
        assert_eq!(core::mem::offset_of!(PortStats, tx_frames), 8);
        assert_eq!(core::mem::offset_of!(PortStats, rx_kernel_dropped), 64);
        assert_eq!(core::mem::offset_of!(PortStats, arp_received), 96);
        assert_eq!(core::mem::offset_of!(PortStats, truncated), 184);
        // `named` lists every counter once, in layout order.
        let mut p = PortStats::default();
        for (i, word) in p.as_mut_bytes()[8..].chunks_exact_mut(8).enumerate() {
            word.copy_from_slice(&(i as u64 + 1).to_le_bytes());
        }
        let expected: [u64; 23] = core::array::from_fn(|i| i as u64 + 1);
        assert_eq!(p.named().map(|(_, v)| v), expected);
    }

    #[test]
    fn the_admin_queue_block_mirrors_the_command_queue_block() {
        let (c, a) = (CMDQ_REGS, ADMINQ_REGS);
        for (cmdq, adminq) in [
            (c.desc_lo, a.desc_lo),
            (c.avail_lo, a.avail_lo),
            (c.used_lo, a.used_lo),
            (c.size, a.size),
            (c.msix_vector, a.msix_vector),
            (c.control, a.control),
        ] {
            assert_eq!(adminq, cmdq + ADMINQ_OFFSET);
        }
        assert!(a.error_code < crate::regs::REGS_END);
        assert_eq!(c.running & a.running, 0);
        assert_eq!(c.fatal & a.fatal, 0);
    }

    #[test]
    fn admin_opcodes_are_in_their_range() {
        assert!(is_admin_opcode(0x1000) && is_admin_opcode(0x1FFF));
        assert!(!is_admin_opcode(0x0FFF) && !is_admin_opcode(0x2000));
        assert!(crate::cmd::Opcode::MigrateQp.is_admin());
        assert!(!crate::cmd::Opcode::CreateQp.is_admin());
        assert_eq!(member_of_vf(0), 1);
    }
}
