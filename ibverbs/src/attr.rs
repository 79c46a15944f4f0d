//! What the verbs queries report about an rnic function, computed from its QUERY_DEVICE
//! answer: the device attributes, the one RoCEv2 port, its GID and P_Key tables, and the
//! node GUID. Pure functions, so every value is checked without a device.
//!
//! The port is an Ethernet (RoCEv2) port as Linux's Soft-RoCE (rxe) shows one, so that
//! tools that pick a GID or an MTU the way they do on rxe work unchanged: GID 0 is the
//! link-local `fe80::/64` address made from the MAC, GID 1 the function's own GID (its
//! IPv4 address as `::ffff:a.b.c.d`), both RoCE v2; the node GUID is the MAC as an
//! EUI-64, as rxe makes it.

use std::ffi::c_int;

use rnic_abi::cmd::QueryDeviceResp;
use rnic_abi::verbs::mtu;
use rnic_driver::device::PciIdentity;

use crate::abi::*;

/// The port number of the function's one port (ports count from 1).
pub const PORT_NUM: u8 = 1;
/// Entries of the GID table: the link-local GID and the function's own.
pub const GID_TABLE_LEN: usize = 2;
/// The index of the function's own GID (the one rnic's packets carry).
pub const OWN_GID_INDEX: usize = 1;
/// The one P_Key: the default, full-membership partition (RoCE has no partitions).
pub const DEFAULT_PKEY: u16 = 0xffff;
/// The port's MTU (rnicd carries packets of up to 4096 bytes of payload).
pub const PORT_MTU: ibv_mtu = IBV_MTU_4096;

// `enum ibv_mtu` is the ABI's path MTU table (rnic_abi::verbs::mtu), so path MTUs pass
// between an application and the function unconverted.
const _: () = assert!(
    IBV_MTU_256 == mtu::MTU_256 as ibv_mtu
        && IBV_MTU_512 == mtu::MTU_512 as ibv_mtu
        && IBV_MTU_1024 == mtu::MTU_1024 as ibv_mtu
        && IBV_MTU_2048 == mtu::MTU_2048 as ibv_mtu
        && IBV_MTU_4096 == mtu::MTU_4096 as ibv_mtu
);
/// The largest message a work request may carry: 2^31 bytes, InfiniBand's limit, or the
/// largest memory region if that is smaller.
const MAX_MSG_SZ: u64 = 1 << 31;
/// `IB_WIDTH_1X` and `IB_SPEED_SDR`: what Linux reports for an Ethernet port whose
/// speed it does not know, as rnic's (software) link's is not.
const ACTIVE_WIDTH_1X: u8 = 1;
const ACTIVE_SPEED_SDR: u8 = 1;
/// Physical port states: `LinkUp` and `Disabled`.
const PHYS_STATE_LINK_UP: u8 = 5;
const PHYS_STATE_DISABLED: u8 = 3;
/// The ACK delay exponent Soft-RoCE reports (4.096 µs * 2^15, about 134 ms).
const LOCAL_CA_ACK_DELAY: u8 = 15;
/// Virtual lanes: one, as on any Ethernet port.
const MAX_VL_NUM: u8 = 1;

/// The node GUID of a function with this MAC: the modified EUI-64 (the MAC with
/// `ff:fe` in the middle and the universal/local bit flipped), in wire order.
pub fn node_guid(mac: [u8; 6]) -> [u8; 8] {
    [
        mac[0] ^ 0x02,
        mac[1],
        mac[2],
        0xff,
        0xfe,
        mac[3],
        mac[4],
        mac[5],
    ]
}

/// A GUID as `ibv_device_attr` and `ibv_get_device_guid` hold it: a `__be64`, whose
/// bytes in memory are the GUID in wire order.
pub fn guid_be64(guid: [u8; 8]) -> u64 {
    u64::from_ne_bytes(guid)
}

/// The firmware version, `major.minor.patch` of the rnicd that serves the function.
pub fn fw_ver(fw_version: u32) -> String {
    format!(
        "{}.{}.{}",
        fw_version >> 16 & 0xff,
        fw_version >> 8 & 0xff,
        fw_version & 0xff
    )
}

/// A count as C's `int`, saturating (the device's limits are `u32`).
fn int(v: u64) -> c_int {
    c_int::try_from(v).unwrap_or(c_int::MAX)
}

/// `IB_UVERBS_DEVICE_FLUSH_GLOBAL` (kernel uapi `ib_user_verbs.h`).
const UVERBS_DEVICE_FLUSH_GLOBAL: u64 = 1 << 38;
/// `IB_UVERBS_DEVICE_FLUSH_PERSISTENT`.
const UVERBS_DEVICE_FLUSH_PERSISTENT: u64 = 1 << 39;
/// `IB_UVERBS_DEVICE_ATOMIC_WRITE`.
const UVERBS_DEVICE_ATOMIC_WRITE: u64 = 1 << 40;

/// The device attributes (`ibv_query_device_ex`; `orig_attr` is `ibv_query_device`'s).
///
/// The limits are the function's own (its quota, QUERY_DEVICE's `limits`). SRQs
/// (where the device reports `CAP_SRQ`) hold as many WRs and SGEs as QPs; address
/// handles are the library's alone, so there is no limit to them but memory; where the
/// device reports `CAP_RESIZE_SRQ` too, `IBV_DEVICE_SRQ_RESIZE` (`ibv_modify_srq` with
/// `IBV_SRQ_MAX_WR`). Memory
/// windows (where the device reports `CAP_MW`) count against the function's quota of
/// MRs, so `max_mw` is `max_mr`, with `IBV_DEVICE_MEM_WINDOW` and
/// `IBV_DEVICE_MEM_WINDOW_TYPE_2B` (rnic's type 2 windows are 2B: bound to one QP). What
/// the library does not offer reads 0 (multicast, XRC), whatever the device can do, so
/// that a program does not plan on it.
pub fn device_attr(q: &QueryDeviceResp, pci: &PciIdentity) -> ibv_device_attr_ex {
    let l = &q.limits;
    let guid = guid_be64(node_guid(q.mac));
    let mut a = ibv_device_attr_ex::zeroed();
    let o = &mut a.orig_attr;
    copy_c_string(&mut o.fw_ver, fw_ver(q.fw_version).as_bytes());
    o.node_guid = guid;
    // Every function is its own system image: a VF cannot learn its PF's GUID.
    o.sys_image_guid = guid;
    o.max_mr_size = l.max_mr_size;
    o.page_size_cap = rnic_abi::PAGE_SIZE;
    o.vendor_id = pci.vendor_id.into();
    o.vendor_part_id = pci.device_id.into();
    o.hw_ver = pci.revision.into();
    o.max_qp = int(l.max_qp.into());
    o.max_qp_wr = int(l.max_qp_wr.into());
    o.device_cap_flags = IBV_DEVICE_RC_RNR_NAK_GEN | IBV_DEVICE_SYS_IMAGE_GUID;
    o.max_sge = int(l.max_sge.into());
    o.max_sge_rd = int(l.max_sge.into());
    o.max_cq = int(l.max_cq.into());
    o.max_cqe = int(l.max_cqe.into());
    o.max_mr = int(l.max_mr.into());
    o.max_pd = int(l.max_pd.into());
    o.max_qp_rd_atom = int(l.max_qp_rd_atom.into());
    o.max_qp_init_rd_atom = int(l.max_qp_init_rd_atom.into());
    // Responder resources of the whole function: every QP may hold its own.
    o.max_res_rd_atom = int(u64::from(l.max_qp_rd_atom) * u64::from(l.max_qp));
    o.atomic_cap = IBV_ATOMIC_HCA;
    o.max_pkeys = 1;
    o.local_ca_ack_delay = LOCAL_CA_ACK_DELAY;
    o.phys_port_cnt = PORT_NUM;
    if q.caps & rnic_abi::regs::CAP_SRQ != 0 {
        o.max_srq = int(rnic_abi::srq::MAX_SRQN.into());
        o.max_srq_wr = o.max_qp_wr;
        o.max_srq_sge = o.max_sge;
        if q.caps & rnic_abi::regs::CAP_RESIZE_SRQ != 0 {
            o.device_cap_flags |= IBV_DEVICE_SRQ_RESIZE;
        }
    }
    if q.caps & rnic_abi::regs::CAP_MW != 0 {
        o.max_mw = o.max_mr;
        o.device_cap_flags |= IBV_DEVICE_MEM_WINDOW | IBV_DEVICE_MEM_WINDOW_TYPE_2B;
    }
    if q.caps & rnic_abi::regs::CAP_MULTICAST != 0 {
        use rnic_abi::mcast::{MAX_GROUPS, MAX_QPS_PER_GROUP};
        o.max_mcast_grp = int(MAX_GROUPS.into());
        o.max_mcast_qp_attach = int(MAX_QPS_PER_GROUP.into());
        o.max_total_mcast_qp_attach = int(u64::from(MAX_GROUPS * MAX_QPS_PER_GROUP));
    }
    o.max_ah = c_int::MAX;
    a.device_cap_flags_ex = u64::from(o.device_cap_flags);
    // The kernel's IB_UVERBS_DEVICE_FLUSH_GLOBAL, _FLUSH_PERSISTENT and _ATOMIC_WRITE,
    // which libibverbs passes through unnamed (ABI 1.11, datasheet §14.14).
    if q.caps & rnic_abi::regs::CAP_FLUSH != 0 {
        a.device_cap_flags_ex |= UVERBS_DEVICE_FLUSH_GLOBAL | UVERBS_DEVICE_FLUSH_PERSISTENT;
    }
    if q.caps & rnic_abi::regs::CAP_ATOMIC_WRITE != 0 {
        a.device_cap_flags_ex |= UVERBS_DEVICE_ATOMIC_WRITE;
    }
    a.phys_port_cnt_ex = u32::from(PORT_NUM);
    a
}

/// The port's attributes; `link_up` is the function's link state (its PF may set it
/// down, `rnic-admin link`).
pub fn port_attr(q: &QueryDeviceResp, link_up: bool) -> ibv_port_attr {
    let mut p = ibv_port_attr::zeroed();
    (p.state, p.phys_state) = if link_up {
        (IBV_PORT_ACTIVE, PHYS_STATE_LINK_UP)
    } else {
        (IBV_PORT_DOWN, PHYS_STATE_DISABLED)
    };
    p.max_mtu = PORT_MTU;
    p.active_mtu = PORT_MTU;
    p.gid_tbl_len = GID_TABLE_LEN as c_int;
    p.port_cap_flags = IBV_PORT_CM_SUP | IBV_PORT_IP_BASED_GIDS;
    p.max_msg_sz = q.limits.max_mr_size.min(MAX_MSG_SZ) as u32;
    p.pkey_tbl_len = 1;
    p.max_vl_num = MAX_VL_NUM;
    p.active_width = ACTIVE_WIDTH_1X;
    p.active_speed = ACTIVE_SPEED_SDR;
    p.link_layer = IBV_LINK_LAYER_ETHERNET;
    p.flags = IBV_QPF_GRH_REQUIRED;
    p
}

/// The GID table: `[link-local from the MAC, the function's GID]`, both RoCE v2.
pub fn gid_table(q: &QueryDeviceResp) -> [[u8; 16]; GID_TABLE_LEN] {
    let mut link_local = [0u8; 16];
    link_local[0] = 0xfe;
    link_local[1] = 0x80;
    link_local[8..].copy_from_slice(&node_guid(q.mac));
    [link_local, q.gid]
}

/// The GID table entry `index` of port `port`, or `None` past the table's end.
pub fn gid_entry(q: &QueryDeviceResp, port: u8, index: usize) -> Option<ibv_gid_entry> {
    let gid = *gid_table(q).get(index)?;
    let mut e = ibv_gid_entry::zeroed();
    e.gid = ibv_gid { raw: gid };
    e.gid_index = index as u32;
    e.port_num = port.into();
    e.gid_type = IBV_GID_TYPE_ROCE_V2;
    Some(e)
}

/// Copies `s` into the C string buffer `dst`, truncated so that a NUL always ends it.
pub fn copy_c_string(dst: &mut [std::ffi::c_char], s: &[u8]) {
    let n = s.len().min(dst.len().saturating_sub(1));
    for (d, &b) in dst.iter_mut().zip(&s[..n]) {
        *d = b as std::ffi::c_char;
    }
    for d in &mut dst[n..] {
        *d = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rnic_abi::cmd::Limits;

    fn resp() -> QueryDeviceResp {
        QueryDeviceResp {
            vendor_id: 0xf1c0,
            device_id: 2,
            abi_major: 1,
            abi_minor: 5,
            fw_version: 0x0001_0203,
            function_kind: 1,
            vf_index: 0,
            mac: [0x02, 0x52, 0x4e, 0x49, 0x43, 0x01],
            gid: std::net::Ipv6Addr::from([0, 0, 0, 0, 0, 0xffff, 0x0a52, 0x0002]).octets(),
            // Distinct values, so that a limit reported in another's place shows.
            limits: Limits {
                max_qp: 101,
                max_qp_wr: 102,
                max_sge: 103,
                max_cq: 104,
                max_cqe: 105,
                max_mr: 106,
                max_pd: 107,
                max_qp_rd_atom: 108,
                max_qp_init_rd_atom: 109,
                max_mr_size: 1 << 32,
                ..Limits::default()
            },
            caps: rnic_abi::regs::CAP_SRQ,
            ..QueryDeviceResp::default()
        }
    }

    fn pci() -> PciIdentity {
        PciIdentity {
            vendor_id: 0xf1c0,
            device_id: 2,
            revision: 1,
            class_code: 0x020700,
            subsystem_vendor_id: 0xf1c0,
            subsystem_id: 2,
        }
    }

    #[test]
    fn the_guid_is_the_modified_eui64_of_the_mac() {
        let guid = node_guid([0x02, 0x52, 0x4e, 0x49, 0x43, 0x01]);
        assert_eq!(guid, [0x00, 0x52, 0x4e, 0xff, 0xfe, 0x49, 0x43, 0x01]);
        // As ibv_devices prints it: be64toh of the __be64.
        assert_eq!(u64::from_be(guid_be64(guid)), 0x0052_4eff_fe49_4301);
    }

    #[test]
    fn device_attributes_are_the_functions_limits() {
        let a = device_attr(&resp(), &pci());
        let o = &a.orig_attr;
        let fw: Vec<u8> = o
            .fw_ver
            .iter()
            .take_while(|&&c| c != 0)
            .map(|&c| c as u8)
            .collect();
        assert_eq!(fw, b"1.2.3");
        assert_eq!(u64::from_be(o.node_guid), 0x0052_4eff_fe49_4301);
        assert_eq!(o.sys_image_guid, o.node_guid);
        assert_eq!((o.vendor_id, o.vendor_part_id, o.hw_ver), (0xf1c0, 2, 1));
        assert_eq!((o.max_qp, o.max_qp_wr), (101, 102));
        assert_eq!((o.max_sge, o.max_sge_rd), (103, 103));
        assert_eq!(
            (o.max_cq, o.max_cqe, o.max_mr, o.max_pd),
            (104, 105, 106, 107)
        );
        assert_eq!((o.max_qp_rd_atom, o.max_qp_init_rd_atom), (108, 109));
        // Responder resources of the whole function.
        assert_eq!(o.max_res_rd_atom, 108 * 101);
        assert_eq!(o.max_mr_size, 1 << 32);
        assert_eq!(o.page_size_cap, 4096);
        assert_eq!(o.phys_port_cnt, 1);
        assert_eq!((o.max_srq, o.max_srq_wr, o.max_srq_sge), (0xffff, 102, 103));
        assert_eq!((o.max_ah, o.max_mw, o.max_mcast_grp), (c_int::MAX, 0, 0));
        assert_eq!(o.atomic_cap, IBV_ATOMIC_HCA);
        assert_eq!(o.device_cap_flags & IBV_DEVICE_MEM_WINDOW, 0);
        assert_eq!(o.device_cap_flags & IBV_DEVICE_SRQ_RESIZE, 0);
    }

    #[test]
    fn srqs_resize_where_the_device_can() {
        let mut q = resp();
        q.caps = rnic_abi::regs::CAP_RESIZE_SRQ;
        // Without CAP_SRQ, no SRQs at all.
        let a = device_attr(&q, &pci());
        assert_eq!(a.orig_attr.device_cap_flags & IBV_DEVICE_SRQ_RESIZE, 0);
        q.caps |= rnic_abi::regs::CAP_SRQ;
        let a = device_attr(&q, &pci());
        assert_eq!(
            a.orig_attr.device_cap_flags & IBV_DEVICE_SRQ_RESIZE,
            IBV_DEVICE_SRQ_RESIZE
        );
        assert_eq!(
            a.device_cap_flags_ex,
            u64::from(a.orig_attr.device_cap_flags)
        );
    }

    #[test]
    fn memory_windows_share_the_mr_quota_and_are_type_2b() {
        let mut q = resp();
        q.caps |= rnic_abi::regs::CAP_MW;
        let a = device_attr(&q, &pci());
        assert_eq!(a.orig_attr.max_mw, 106);
        let want = IBV_DEVICE_MEM_WINDOW | IBV_DEVICE_MEM_WINDOW_TYPE_2B;
        assert_eq!(a.orig_attr.device_cap_flags & want, want);
        assert_eq!(
            a.orig_attr.device_cap_flags & IBV_DEVICE_MEM_WINDOW_TYPE_2A,
            0
        );
        assert_eq!(
            a.device_cap_flags_ex,
            u64::from(a.orig_attr.device_cap_flags)
        );
    }

    #[test]
    fn flush_and_atomic_write_show_as_the_kernels_extended_flags() {
        let mut q = resp();
        assert_eq!(device_attr(&q, &pci()).device_cap_flags_ex >> 32, 0);
        q.caps |= rnic_abi::regs::CAP_FLUSH | rnic_abi::regs::CAP_ATOMIC_WRITE;
        assert_eq!(device_attr(&q, &pci()).device_cap_flags_ex >> 38, 0b111);
    }

    #[test]
    fn huge_limits_saturate_instead_of_wrapping() {
        let mut q = resp();
        q.limits.max_cqe = u32::MAX;
        assert_eq!(device_attr(&q, &pci()).orig_attr.max_cqe, c_int::MAX);
    }

    #[test]
    fn the_port_is_roce_and_follows_the_link() {
        let up = port_attr(&resp(), true);
        assert_eq!(up.state, IBV_PORT_ACTIVE);
        assert_eq!(up.phys_state, PHYS_STATE_LINK_UP);
        assert_eq!((up.max_mtu, up.active_mtu), (IBV_MTU_4096, IBV_MTU_4096));
        assert_eq!(up.link_layer, IBV_LINK_LAYER_ETHERNET);
        assert_eq!(up.flags, IBV_QPF_GRH_REQUIRED);
        assert_eq!(up.gid_tbl_len, 2);
        assert_eq!(up.pkey_tbl_len, 1);
        assert_eq!(up.max_msg_sz, 1 << 31);
        assert_eq!(up.lid, 0);
        let down = port_attr(&resp(), false);
        assert_eq!(down.state, IBV_PORT_DOWN);
        assert_eq!(down.phys_state, PHYS_STATE_DISABLED);
    }

    #[test]
    fn the_gid_table_is_link_local_then_the_functions_gid() {
        let q = resp();
        let t = gid_table(&q);
        assert_eq!(
            std::net::Ipv6Addr::from(t[0]).to_string(),
            "fe80::52:4eff:fe49:4301"
        );
        assert_eq!(
            std::net::Ipv6Addr::from(t[1]).to_string(),
            "::ffff:10.82.0.2"
        );
        let e = gid_entry(&q, 1, 1).unwrap();
        // SAFETY: every view of the GID union is plain bytes.
        assert_eq!(unsafe { e.gid.raw }, q.gid);
        assert_eq!(
            (e.gid_index, e.port_num, e.gid_type),
            (1, 1, IBV_GID_TYPE_ROCE_V2)
        );
        assert!(gid_entry(&q, 1, 2).is_none());
    }

    #[test]
    fn c_strings_are_truncated_and_terminated() {
        let mut buf = [0x55 as std::ffi::c_char; 4];
        copy_c_string(&mut buf, b"rnic_0");
        assert_eq!(buf, [b'r' as _, b'n' as _, b'i' as _, 0]);
        copy_c_string(&mut buf, b"a");
        assert_eq!(buf, [b'a' as _, 0, 0, 0]);
    }
}
