//! Send work requests as send WQEs (datasheet §7.6; UD per `rnic_abi::ud`, memory window
//! binds per `rnic_abi::mw`): what `ibv_post_send` writes into a send ring entry for one
//! `struct ibv_send_wr`.

use std::ffi::{c_int, c_uint};

use rnic_abi::mw::{BindMwWqe, MW_ACCESS_ALL};
use rnic_abi::ud::UdSendWqe;
use rnic_abi::verbs::{send_flags, wr, SendWqe, Sge};
use rnic_verbs_abi::*;
use zerocopy::IntoBytes;

/// Where a UD send goes: the address handle's part of the address vector.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UdAv {
    /// Destination GID.
    pub dgid: [u8; 16],
    /// Hop limit (IPv4 TTL).
    pub hop_limit: u8,
    /// Traffic class (IPv4 TOS).
    pub traffic_class: u8,
    /// Flow label (not carried over IPv4; kept for completeness).
    pub flow_label: u32,
    /// The source: the GID table entry (the kernel's GID index, which rnic.ko keeps
    /// equal to the device's).
    pub sgid_index: u8,
}

/// What a send queue allows.
#[derive(Clone, Copy, Debug)]
pub struct SendLimits {
    /// SGEs per WQE.
    pub max_sge: u32,
    /// Inline bytes per WQE.
    pub max_inline: u32,
    /// Whether the QP is UD (only SENDs, each with an address).
    pub ud: bool,
}

/// `ibv_inc_rkey`: the key with the next tag (the low byte), as a bind's new key.
pub fn inc_rkey(rkey: u32) -> u32 {
    (rkey & 0xffff_ff00) | (rkey.wrapping_add(1) & 0xff)
}

/// The window rights of a bind's `mw_access_flags`, or `EINVAL`. `IBV_ACCESS_LOCAL_WRITE`
/// means nothing for a window (rdma-core's tests give it) and is dropped; the remote
/// rights and `IBV_ACCESS_ZERO_BASED` are the device's bits.
pub fn bind_access(flags: c_uint) -> Result<u32, c_int> {
    const _: () = assert!(
        IBV_ACCESS_REMOTE_WRITE
            | IBV_ACCESS_REMOTE_READ
            | IBV_ACCESS_REMOTE_ATOMIC
            | IBV_ACCESS_ZERO_BASED
            == MW_ACCESS_ALL
    );
    let access = flags & !IBV_ACCESS_LOCAL_WRITE;
    if access & !MW_ACCESS_ALL != 0 {
        return Err(libc::EINVAL);
    }
    Ok(access)
}

/// The `BIND_MW` WQE of `IBV_WR_BIND_MW` work request `w`: window `w.bind_mw.mw` (by its
/// current key) under the new key `w.bind_mw.rkey`, bound to `bind_info`. No SGEs, no
/// immediate data, no inline data.
///
/// # Safety
///
/// `w.bind_mw.mw` is null or a window, `bind_info.mr` null or a region.
unsafe fn bind_mw_wqe(w: &ibv_send_wr) -> Result<BindMwWqe, c_int> {
    // SAFETY: `bind_mw` is the union member of binds.
    let b = unsafe { w.anon_bind_mw_tso.bind_mw };
    if b.mw.is_null() || w.num_sge != 0 || w.imm_data != 0 {
        return Err(libc::EINVAL);
    }
    let info = b.bind_info;
    let mr_lkey = if info.mr.is_null() {
        if info.length != 0 || info.addr != 0 {
            return Err(libc::EINVAL);
        }
        0
    } else {
        // SAFETY: the caller's contract.
        unsafe { (*info.mr).lkey }
    };
    Ok(BindMwWqe {
        wr_id: w.wr_id,
        opcode: wr::BIND_MW,
        flags: (w.send_flags & c_uint::from(send_flags::SIGNALED | send_flags::FENCE)) as u8,
        // SAFETY: the caller's contract.
        mw_key: unsafe { (*b.mw).rkey },
        addr: info.addr,
        new_key: b.rkey,
        mr_lkey,
        length: info.length,
        access: bind_access(info.mw_access_flags)?,
        ..BindMwWqe::default()
    })
}

/// Writes the WQE of `w` into `entry` (a whole send ring entry); for UD, `av` is the
/// address of `w.wr.ud.ah`. Returns the errno `ibv_post_send` reports for a WR it
/// refuses.
///
/// # Safety
///
/// `w.sg_list` holds `w.num_sge` SGEs, and with `IBV_SEND_INLINE` each SGE's `addr` is
/// `length` readable bytes of the process; a bind's window and region are null or
/// objects of theirs.
pub unsafe fn write_send_wqe(
    entry: &mut [u8],
    w: &ibv_send_wr,
    av: Option<&UdAv>,
    limits: SendLimits,
) -> Result<(), c_int> {
    let opcode = u8::try_from(w.opcode).map_err(|_| libc::EINVAL)?;
    let supported = if limits.ud {
        matches!(opcode, wr::SEND | wr::SEND_WITH_IMM)
    } else {
        matches!(
            opcode,
            wr::RDMA_WRITE
                | wr::RDMA_WRITE_WITH_IMM
                | wr::SEND
                | wr::SEND_WITH_IMM
                | wr::RDMA_READ
                | wr::ATOMIC_CMP_AND_SWP
                | wr::ATOMIC_FETCH_AND_ADD
                | wr::LOCAL_INV
                | wr::BIND_MW
                | wr::SEND_WITH_INV
                | wr::FLUSH
                | wr::ATOMIC_WRITE
        )
    };
    if !supported {
        return Err(libc::EINVAL);
    }
    if opcode == wr::BIND_MW {
        // SAFETY: the caller's contract.
        let wqe = unsafe { bind_mw_wqe(w)? };
        entry[..size_of::<BindMwWqe>()].copy_from_slice(wqe.as_bytes());
        return Ok(());
    }
    let num_sge = usize::try_from(w.num_sge).map_err(|_| libc::EINVAL)?;
    let sges: &[ibv_sge] = if num_sge == 0 || w.sg_list.is_null() {
        &[]
    } else {
        // SAFETY: the caller's contract.
        unsafe { std::slice::from_raw_parts(w.sg_list, num_sge) }
    };
    let flags = (w.send_flags & 0xf) as u8;
    let inline = flags & send_flags::INLINE != 0
        && matches!(
            opcode,
            wr::SEND
                | wr::SEND_WITH_IMM
                | wr::SEND_WITH_INV
                | wr::RDMA_WRITE
                | wr::RDMA_WRITE_WITH_IMM
        );
    let (head, body) = entry.split_at_mut(size_of::<SendWqe>());
    let mut inline_len = 0u32;
    if inline {
        let total: u64 = sges.iter().map(|s| u64::from(s.length)).sum();
        if total > u64::from(limits.max_inline) || total as usize > body.len() {
            return Err(libc::EINVAL);
        }
        let mut at = 0;
        for s in sges {
            let n = s.length as usize;
            // SAFETY: the caller's contract: `length` readable bytes at `addr`.
            let src = unsafe { std::slice::from_raw_parts(s.addr as usize as *const u8, n) };
            body[at..at + n].copy_from_slice(src);
            at += n;
        }
        inline_len = total as u32;
    } else {
        if sges.len() > limits.max_sge as usize || sges.len() * size_of::<Sge>() > body.len() {
            return Err(libc::EINVAL);
        }
        for (chunk, s) in body.chunks_exact_mut(size_of::<Sge>()).zip(sges) {
            let sge = Sge {
                addr: s.addr,
                length: s.length,
                lkey: s.lkey,
            };
            chunk.copy_from_slice(sge.as_bytes());
        }
    }
    let num_sge = if inline { 0 } else { sges.len() as u8 };
    let flags = if inline {
        flags
    } else {
        flags & !send_flags::INLINE
    };
    if limits.ud {
        let av = av.ok_or(libc::EINVAL)?;
        // SAFETY: `wr.ud` is the union member of UD sends.
        let ud = unsafe { w.wr.ud };
        let wqe = UdSendWqe {
            wr_id: w.wr_id,
            opcode,
            flags,
            num_sge,
            imm: w.imm_data,
            remote_qkey: ud.remote_qkey,
            remote_qpn: ud.remote_qpn & 0xff_ffff,
            inline_len,
            dgid: av.dgid,
            hop_limit: av.hop_limit,
            traffic_class: av.traffic_class,
            sgid_index: av.sgid_index,
            ..UdSendWqe::default()
        };
        head.copy_from_slice(wqe.as_bytes());
        return Ok(());
    }
    let mut wqe = SendWqe {
        wr_id: w.wr_id,
        opcode,
        flags,
        num_sge,
        imm_or_inv: w.imm_data,
        inline_len,
        ..SendWqe::default()
    };
    match opcode {
        wr::RDMA_WRITE | wr::RDMA_WRITE_WITH_IMM | wr::RDMA_READ => {
            // SAFETY: `wr.rdma` is the union member of RDMA WRs.
            let r = unsafe { w.wr.rdma };
            wqe.remote_addr = r.remote_addr;
            wqe.rkey = r.rkey;
        }
        wr::ATOMIC_CMP_AND_SWP | wr::ATOMIC_FETCH_AND_ADD => {
            // SAFETY: `wr.atomic` is the union member of atomics.
            let a = unsafe { w.wr.atomic };
            wqe.remote_addr = a.remote_addr;
            wqe.rkey = a.rkey;
            wqe.compare_add = a.compare_add;
            wqe.swap = a.swap;
        }
        wr::FLUSH | wr::ATOMIC_WRITE => {
            // No SGEs, no inline data: everything is in the fixed part (ABI 1.11). The
            // operands are where `ibv_wr_flush` and `ibv_wr_atomic_write` put them:
            // `wr.atomic`, the length or the 8 bytes in `compare_add`, FLUSH's FETH word
            // in `swap`.
            if num_sge != 0 || inline {
                return Err(libc::EINVAL);
            }
            // SAFETY: `wr.atomic` is where the builders put the operands.
            let a = unsafe { w.wr.atomic };
            wqe.remote_addr = a.remote_addr;
            wqe.rkey = a.rkey;
            wqe.compare_add = a.compare_add;
            wqe.imm_or_inv = if opcode == wr::FLUSH {
                a.swap as u32
            } else {
                0
            };
            wqe.flags &= !send_flags::INLINE;
        }
        _ => {}
    }
    head.copy_from_slice(wqe.as_bytes());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use rnic_abi::verbs::sq_stride;
    use zerocopy::FromBytes;

    const RC: SendLimits = SendLimits {
        max_sge: 2,
        max_inline: 64,
        ud: false,
    };

    fn wr_with(opcode: u32, sges: &mut [ibv_sge]) -> ibv_send_wr {
        let mut w = ibv_send_wr::zeroed();
        w.wr_id = 7;
        w.opcode = opcode;
        w.sg_list = sges.as_mut_ptr();
        w.num_sge = sges.len() as c_int;
        w.send_flags = IBV_SEND_SIGNALED;
        w
    }

    #[test]
    fn an_rdma_write_with_immediate_carries_address_key_and_sges() {
        let mut sges = [ibv_sge {
            addr: 0x1000,
            length: 100,
            lkey: 5,
        }];
        let mut w = wr_with(IBV_WR_RDMA_WRITE_WITH_IMM, &mut sges);
        w.imm_data = 0x1122_3344;
        w.wr.rdma = ibv_send_wr_rdma {
            remote_addr: 0xdead_0000,
            rkey: 9,
        };
        let mut e = vec![0xaau8; sq_stride(2, 64) as usize];
        // SAFETY: one SGE, not inline.
        unsafe { write_send_wqe(&mut e, &w, None, RC) }.unwrap();
        let wqe = SendWqe::read_from_bytes(&e[..64]).unwrap();
        assert_eq!(wqe.opcode, wr::RDMA_WRITE_WITH_IMM);
        assert_eq!(wqe.flags, send_flags::SIGNALED);
        assert_eq!((wqe.num_sge, wqe.imm_or_inv), (1, 0x1122_3344));
        assert_eq!((wqe.remote_addr, wqe.rkey), (0xdead_0000, 9));
        assert_eq!(wqe.reserved1, [0; 16]);
        let sge = Sge::read_from_bytes(&e[64..80]).unwrap();
        assert_eq!((sge.addr, sge.length, sge.lkey), (0x1000, 100, 5));
    }

    #[test]
    fn inline_data_is_copied_and_limits_hold() {
        let a = *b"hello ";
        let b = *b"world";
        let mut sges = [
            ibv_sge {
                addr: a.as_ptr() as u64,
                length: 6,
                lkey: 0,
            },
            ibv_sge {
                addr: b.as_ptr() as u64,
                length: 5,
                lkey: 0,
            },
        ];
        let mut w = wr_with(IBV_WR_SEND, &mut sges);
        w.send_flags |= IBV_SEND_INLINE;
        let mut e = vec![0u8; sq_stride(2, 64) as usize];
        // SAFETY: the SGEs point at the two arrays.
        unsafe { write_send_wqe(&mut e, &w, None, RC) }.unwrap();
        let wqe = SendWqe::read_from_bytes(&e[..64]).unwrap();
        assert_eq!((wqe.inline_len, wqe.num_sge), (11, 0));
        assert_eq!(&e[64..75], b"hello world");
        let tight = SendLimits {
            max_inline: 10,
            ..RC
        };
        // SAFETY: as above.
        let r = unsafe { write_send_wqe(&mut e, &w, None, tight) };
        assert_eq!(r, Err(libc::EINVAL));
        let mut three = [sges[0], sges[1], sges[1]];
        let w = wr_with(IBV_WR_SEND, &mut three);
        // SAFETY: three SGEs, not inline.
        let r = unsafe { write_send_wqe(&mut e, &w, None, RC) };
        assert_eq!(r, Err(libc::EINVAL));
    }

    #[test]
    fn atomics_carry_their_operands() {
        let mut sges = [ibv_sge {
            addr: 0x1000,
            length: 8,
            lkey: 5,
        }];
        let mut w = wr_with(IBV_WR_ATOMIC_CMP_AND_SWP, &mut sges);
        w.wr.atomic = ibv_send_wr_atomic {
            remote_addr: 0x8000,
            compare_add: 1,
            swap: 2,
            rkey: 3,
        };
        let mut e = vec![0u8; 128];
        // SAFETY: one SGE.
        unsafe { write_send_wqe(&mut e, &w, None, RC) }.unwrap();
        let wqe = SendWqe::read_from_bytes(&e[..64]).unwrap();
        assert_eq!(
            (wqe.remote_addr, wqe.compare_add, wqe.swap, wqe.rkey),
            (0x8000, 1, 2, 3)
        );
    }

    #[test]
    fn inc_rkey_steps_the_tag_and_keeps_the_index() {
        assert_eq!(inc_rkey(0x4000_0100), 0x4000_0101);
        assert_eq!(inc_rkey(0x4000_01ff), 0x4000_0100);
        assert_eq!(inc_rkey(0xffff_ffff), 0xffff_ff00);
    }

    #[test]
    fn a_bind_is_a_bind_mw_wqe_of_the_window_the_region_and_the_rights() {
        let mut mr = ibv_mr::zeroed();
        mr.lkey = 0x0000_0305;
        let mut mw = ibv_mw::zeroed();
        mw.rkey = 0x4000_0700;
        let mut w = ibv_send_wr::zeroed();
        w.wr_id = 9;
        w.opcode = IBV_WR_BIND_MW;
        w.send_flags = IBV_SEND_SIGNALED | IBV_SEND_FENCE | IBV_SEND_SOLICITED;
        w.anon_bind_mw_tso.bind_mw = ibv_send_wr_bind_mw {
            mw: &mut mw,
            rkey: inc_rkey(mw.rkey),
            bind_info: ibv_mw_bind_info {
                mr: &mut mr,
                addr: 0x7f00_1000,
                length: 4096,
                mw_access_flags: IBV_ACCESS_LOCAL_WRITE
                    | IBV_ACCESS_REMOTE_WRITE
                    | IBV_ACCESS_REMOTE_READ,
            },
        };
        let mut e = vec![0xaau8; 128];
        // SAFETY: the window and region above.
        unsafe { write_send_wqe(&mut e, &w, None, RC) }.unwrap();
        let wqe = BindMwWqe::read_from_bytes(&e[..64]).unwrap();
        assert_eq!(
            wqe,
            BindMwWqe {
                wr_id: 9,
                opcode: wr::BIND_MW,
                flags: send_flags::SIGNALED | send_flags::FENCE,
                mw_key: 0x4000_0700,
                addr: 0x7f00_1000,
                new_key: 0x4000_0701,
                mr_lkey: 0x305,
                length: 4096,
                access: rnic_abi::verbs::ACCESS_REMOTE_WRITE | rnic_abi::verbs::ACCESS_REMOTE_READ,
                ..BindMwWqe::default()
            }
        );
        // An unbind (type 1) without a region.
        w.anon_bind_mw_tso.bind_mw.bind_info = ibv_mw_bind_info {
            mr: std::ptr::null_mut(),
            addr: 0,
            length: 0,
            mw_access_flags: 0,
        };
        // SAFETY: as above.
        unsafe { write_send_wqe(&mut e, &w, None, RC) }.unwrap();
        let wqe = BindMwWqe::read_from_bytes(&e[..64]).unwrap();
        assert_eq!((wqe.mr_lkey, wqe.length, wqe.access), (0, 0, 0));
        // Refused: rights a window cannot have, a length without a region, SGEs, UD, no
        // window.
        let refused = |w: &ibv_send_wr, limits: SendLimits| {
            let mut e = vec![0u8; 128];
            // SAFETY: as above.
            unsafe { write_send_wqe(&mut e, w, None, limits) }
        };
        let mut bad = w;
        bad.anon_bind_mw_tso.bind_mw.bind_info.mw_access_flags = IBV_ACCESS_MW_BIND;
        assert_eq!(refused(&bad, RC), Err(libc::EINVAL));
        let mut bad = w;
        bad.anon_bind_mw_tso.bind_mw.bind_info.length = 8;
        assert_eq!(refused(&bad, RC), Err(libc::EINVAL));
        let mut sges = [ibv_sge::zeroed(); 1];
        let mut bad = w;
        bad.sg_list = sges.as_mut_ptr();
        bad.num_sge = 1;
        assert_eq!(refused(&bad, RC), Err(libc::EINVAL));
        assert_eq!(
            refused(&w, SendLimits { ud: true, ..RC }),
            Err(libc::EINVAL)
        );
        let mut bad = w;
        bad.anon_bind_mw_tso.bind_mw.mw = std::ptr::null_mut();
        assert_eq!(refused(&bad, RC), Err(libc::EINVAL));
    }

    #[test]
    fn ud_sends_carry_the_address_vector_and_refuse_rdma() {
        let mut sges = [ibv_sge {
            addr: 0x1000,
            length: 8,
            lkey: 5,
        }];
        let mut w = wr_with(IBV_WR_SEND_WITH_IMM, &mut sges);
        w.imm_data = 0x0102_0304;
        w.wr.ud = ibv_send_wr_ud {
            ah: std::ptr::null_mut(),
            remote_qpn: 0x33,
            remote_qkey: 0x1111_1111,
        };
        let av = UdAv {
            dgid: [7; 16],
            hop_limit: 9,
            traffic_class: 4,
            flow_label: 0,
            sgid_index: 3,
        };
        let ud = SendLimits { ud: true, ..RC };
        let mut e = vec![0u8; 128];
        // SAFETY: one SGE.
        unsafe { write_send_wqe(&mut e, &w, Some(&av), ud) }.unwrap();
        let wqe = UdSendWqe::read_from_bytes(&e[..64]).unwrap();
        assert_eq!(
            (wqe.remote_qpn, wqe.remote_qkey, wqe.imm),
            (0x33, 0x1111_1111, 0x0102_0304)
        );
        assert_eq!(
            (wqe.dgid, wqe.hop_limit, wqe.traffic_class, wqe.sgid_index),
            ([7; 16], 9, 4, 3)
        );
        w.opcode = IBV_WR_RDMA_WRITE;
        // SAFETY: as above.
        let r = unsafe { write_send_wqe(&mut e, &w, Some(&av), ud) };
        assert_eq!(r, Err(libc::EINVAL));
        w.opcode = IBV_WR_SEND;
        // SAFETY: as above.
        let r = unsafe { write_send_wqe(&mut e, &w, None, ud) };
        assert_eq!(r, Err(libc::EINVAL));
    }
}
