//! Address handles: `ibv_create_ah`, `ibv_destroy_ah`, `ibv_init_ah_from_wc`,
//! `ibv_create_ah_from_wc`, and the route check QPs' address vectors share.
//!
//! rnic's port is RoCE v2 over IPv4 (as a fresh Soft-RoCE device): an address is a
//! global route to an IPv4-mapped GID, sent from the function's own GID, index
//! [`OWN_GID_INDEX`] (what `-g 1` / `-x 1` select). An AH is the library's alone: UD
//! work requests carry their address to the device.

use std::ffi::c_int;
use std::sync::Arc;

use rnic_driver::verbs::UdAddress;

use crate::abi::*;
use crate::attr::{OWN_GID_INDEX, PORT_NUM};
use crate::context::RnicContext;
use crate::ffi::{errno_result, invalid, minus_one, null_on_err, Errno};
use crate::objects::{register, unregister};
use crate::pd::{pd_of, PdObj};

/// Where packets go: the destination GID and the IPv4 header fields of the route.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Route {
    pub(crate) dgid: [u8; 16],
    pub(crate) hop_limit: u8,
    pub(crate) traffic_class: u8,
    pub(crate) flow_label: u32,
}

impl Route {
    /// A UD destination: this route, QP `dest_qpn`, Q_Key `qkey`.
    pub(crate) fn ud(&self, dest_qpn: u32, qkey: u32) -> UdAddress {
        UdAddress {
            dest_qpn,
            qkey,
            dgid: self.dgid,
            hop_limit: self.hop_limit,
            traffic_class: self.traffic_class,
            // The device's entry 0, its own GID, which ibverbs shows at OWN_GID_INDEX.
            sgid_index: 0,
        }
    }
}

/// The route of address vector `a`, checked as rnic's port needs it: a GRH
/// (`is_global`), source GID [`OWN_GID_INDEX`], port 1.
pub(crate) fn route(a: &ibv_ah_attr) -> Result<Route, Errno> {
    if a.is_global == 0 {
        log::warn!(
            "an address without a GRH (is_global = 0): rnic's port is RoCE v2, give a GID index (-g {OWN_GID_INDEX} to the pingpongs, -x {OWN_GID_INDEX} to perftest)"
        );
        return Err(libc::EINVAL);
    }
    if a.port_num != 0 && a.port_num != PORT_NUM {
        return Err(invalid(format_args!("address on port {}", a.port_num)));
    }
    let g = &a.grh;
    if usize::from(g.sgid_index) != OWN_GID_INDEX {
        log::warn!(
            "source GID index {}: rnic sends from its IPv4 GID, index {OWN_GID_INDEX} (index 0, the link-local IPv6 GID, cannot carry traffic)",
            g.sgid_index
        );
        return Err(libc::EINVAL);
    }
    Ok(Route {
        // SAFETY: every member of the union is plain bytes.
        dgid: unsafe { g.dgid.raw },
        hop_limit: g.hop_limit,
        traffic_class: g.traffic_class,
        flow_label: g.flow_label,
    })
}

/// The address vector of `r` (what QUERY_QP reports back).
pub(crate) fn ah_attr(r: &Route) -> ibv_ah_attr {
    let mut a = ibv_ah_attr::zeroed();
    a.is_global = 1;
    a.port_num = PORT_NUM;
    a.grh.dgid = ibv_gid { raw: r.dgid };
    a.grh.sgid_index = OWN_GID_INDEX as u8;
    a.grh.hop_limit = r.hop_limit;
    a.grh.traffic_class = r.traffic_class;
    a.grh.flow_label = r.flow_label;
    a
}

/// An address handle.
pub(crate) struct Ah {
    _pd: Arc<PdObj>,
    pub(crate) route: Route,
}

/// `ibv_create_ah`.
///
/// # Safety
///
/// `attr` is NULL or readable.
pub(crate) unsafe extern "C" fn ibv_create_ah(
    pd: *mut ibv_pd,
    attr: *mut ibv_ah_attr,
) -> *mut ibv_ah {
    null_on_err("ibv_create_ah", || {
        let pdo = pd_of(pd)?;
        if attr.is_null() {
            return Err(invalid(format_args!("ibv_create_ah: attr is NULL")));
        }
        // SAFETY: non-NULL and readable by the caller's promise.
        let route = route(&unsafe { attr.read_unaligned() })?;
        let ctx = pdo.r.ctx.ibv_context();
        let mut c = ibv_ah::zeroed();
        c.context = ctx;
        c.pd = pd;
        let ah = Ah { _pd: pdo, route };
        Ok(register(ctx, c, ah, |_| ()).c_ptr())
    })
}

/// `ibv_destroy_ah`: 0 or an errno.
///
/// # Safety
///
/// Any pointer.
pub(crate) unsafe extern "C" fn ibv_destroy_ah(ah: *mut ibv_ah) -> c_int {
    errno_result("ibv_destroy_ah", || {
        unregister::<ibv_ah, Ah>(ah, |_| Ok(())).map(drop)
    })
}

/// The index of `gid` in `gids`, the function's GID table.
fn gid_index(gids: &[[u8; 16]], gid: &[u8; 16]) -> Result<u8, Errno> {
    gids.iter()
        .position(|g| g == gid)
        .map(|i| i as u8)
        .ok_or_else(|| {
            invalid(format_args!(
                "the packet was sent to {}, not a GID of this function",
                rnic_abi::gid::ip(gid)
            ))
        })
}

/// The address vector that answers a UD message received with completion `wc` and GRH
/// `grh` (an IPv4 header in its last 20 bytes, as RoCE v2 over IPv4 delivers it; or an
/// IPv6 GRH), on a function whose GID table is `gids`.
fn reply_attr(
    gids: &[[u8; 16]],
    port: u8,
    wc: &ibv_wc,
    grh: &[u8; 40],
) -> Result<ibv_ah_attr, Errno> {
    let mut a = ibv_ah_attr::zeroed();
    a.dlid = wc.slid;
    a.sl = wc.sl;
    a.src_path_bits = wc.dlid_path_bits;
    a.port_num = port;
    if wc.wc_flags & IBV_WC_GRH == 0 {
        // No GRH, no route back: RoCE needs one.
        return Err(invalid(format_args!("a completion without a GRH")));
    }
    a.is_global = 1;
    let (sgid, dgid, hop, tclass, flow) = if grh[20] >> 4 == 4 {
        // The IPv4 header: TOS at 1, source address at 12, destination at 16.
        let ip = &grh[20..];
        let mapped = |a: &[u8]| {
            let mut g = [0u8; 16];
            g[10] = 0xff;
            g[11] = 0xff;
            g[12..].copy_from_slice(&a[..4]);
            g
        };
        (mapped(&ip[12..16]), mapped(&ip[16..20]), 0xff, ip[1], 0)
    } else if grh[0] >> 4 == 6 {
        let vtf = u32::from_be_bytes([grh[0], grh[1], grh[2], grh[3]]);
        let mut s = [0u8; 16];
        let mut d = [0u8; 16];
        s.copy_from_slice(&grh[8..24]);
        d.copy_from_slice(&grh[24..40]);
        (s, d, 0xff, (vtf >> 20) as u8, vtf & 0xf_ffff)
    } else {
        return Err(invalid(format_args!("a GRH of unknown IP version")));
    };
    a.grh.dgid = ibv_gid { raw: sgid };
    a.grh.sgid_index = gid_index(gids, &dgid)?;
    a.grh.hop_limit = hop;
    a.grh.traffic_class = tclass;
    a.grh.flow_label = flow;
    Ok(a)
}

/// `ibv_init_ah_from_wc`: the address vector that answers a received UD message; 0 or
/// -1 with `errno`.
///
/// # Safety
///
/// `wc` and `grh` are NULL or readable (`grh` for 40 bytes), `ah_attr` NULL or writable.
pub(crate) unsafe extern "C" fn ibv_init_ah_from_wc(
    ctx: *mut ibv_context,
    port: u8,
    wc: *mut ibv_wc,
    grh: *mut ibv_grh,
    ah_attr: *mut ibv_ah_attr,
) -> c_int {
    minus_one("ibv_init_ah_from_wc", || {
        let rctx = RnicContext::lookup(ctx)?;
        if wc.is_null() || grh.is_null() || ah_attr.is_null() {
            return Err(invalid(format_args!(
                "ibv_init_ah_from_wc: a NULL argument"
            )));
        }
        // SAFETY: non-NULL and readable (40 bytes of GRH) by the caller's promise.
        let (w, g) = unsafe { (wc.read_unaligned(), grh.cast::<[u8; 40]>().read_unaligned()) };
        let gids = crate::attr::gid_table(&rctx.query_device()?);
        let a = reply_attr(&gids, port, &w, &g)?;
        // SAFETY: non-NULL and writable by the caller's promise.
        unsafe { ah_attr.write_unaligned(a) };
        Ok(0)
    })
}

/// `ibv_create_ah_from_wc`: [`ibv_init_ah_from_wc`] then [`ibv_create_ah`].
///
/// # Safety
///
/// As [`ibv_init_ah_from_wc`].
pub(crate) unsafe extern "C" fn ibv_create_ah_from_wc(
    pd: *mut ibv_pd,
    wc: *mut ibv_wc,
    grh: *mut ibv_grh,
    port: u8,
) -> *mut ibv_ah {
    null_on_err("ibv_create_ah_from_wc", || {
        let pdo = pd_of(pd)?;
        let mut a = ibv_ah_attr::zeroed();
        // SAFETY: the caller's promise; `a` is ours.
        if unsafe { ibv_init_ah_from_wc(pdo.r.ctx.ibv_context(), port, wc, grh, &mut a) } != 0 {
            // SAFETY: see ffi::set_errno; reading our own thread's errno.
            return Err(unsafe { *libc::__errno_location() });
        }
        // SAFETY: `a` is a valid address vector of ours.
        let ah = unsafe { ibv_create_ah(pd, &mut a) };
        if ah.is_null() {
            // SAFETY: as above.
            return Err(unsafe { *libc::__errno_location() });
        }
        Ok(ah)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attr(global: u8, sgid_index: u8) -> ibv_ah_attr {
        let mut a = ibv_ah_attr::zeroed();
        a.is_global = global;
        a.port_num = 1;
        a.grh.sgid_index = sgid_index;
        a.grh.hop_limit = 7;
        a.grh.dgid = ibv_gid {
            raw: [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 82, 0, 3],
        };
        a
    }

    #[test]
    fn routes_need_a_grh_from_the_functions_gid() {
        let r = route(&attr(1, 1)).unwrap();
        assert_eq!(r.dgid[12..], [10, 82, 0, 3]);
        assert_eq!(r.hop_limit, 7);
        assert_eq!(route(&attr(0, 1)), Err(libc::EINVAL));
        assert_eq!(route(&attr(1, 0)), Err(libc::EINVAL));
        let back = ah_attr(&r);
        assert_eq!(route(&back), Ok(r));
        let ud = r.ud(0x12, 0x1111_1111);
        assert_eq!((ud.dest_qpn, ud.qkey, ud.hop_limit), (0x12, 0x1111_1111, 7));
    }

    #[test]
    fn a_reply_goes_back_to_the_ipv4_source_from_the_gid_it_came_to() {
        let own = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 82, 0, 2];
        let gids = [[0xfe; 16], own];
        let mut grh = [0u8; 40];
        // 20 zero bytes, then an IPv4 header: TOS 0x28, 10.82.0.3 -> 10.82.0.2.
        grh[20] = 0x45;
        grh[21] = 0x28;
        grh[32..36].copy_from_slice(&[10, 82, 0, 3]);
        grh[36..40].copy_from_slice(&[10, 82, 0, 2]);
        let mut wc = ibv_wc::zeroed();
        wc.wc_flags = IBV_WC_GRH;
        let a = reply_attr(&gids, 1, &wc, &grh).unwrap();
        assert_eq!(a.is_global, 1);
        assert_eq!(a.grh.sgid_index, 1);
        // SAFETY: plain bytes.
        assert_eq!(unsafe { a.grh.dgid.raw }[10..], [0xff, 0xff, 10, 82, 0, 3]);
        assert_eq!(
            (a.grh.traffic_class, a.grh.hop_limit, a.port_num),
            (0x28, 0xff, 1)
        );
        // Sent to an address that is not the function's, or without a GRH: no reply.
        grh[39] = 9;
        assert!(reply_attr(&gids, 1, &wc, &grh).is_err());
        wc.wc_flags = 0;
        assert!(reply_attr(&gids, 1, &wc, &grh).is_err());
    }

    #[test]
    fn garbage_is_einval() {
        let mut a = attr(1, 1);
        // SAFETY: the functions take any pointer; garbage is never dereferenced.
        unsafe {
            assert!(ibv_create_ah(0x40 as *mut ibv_pd, &mut a).is_null());
            assert_eq!(ibv_destroy_ah(0x40 as *mut ibv_ah), libc::EINVAL);
            assert!(ibv_create_ah_from_wc(
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                1
            )
            .is_null());
        }
    }
}
