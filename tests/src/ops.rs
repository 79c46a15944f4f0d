//! Every RC operation between two connected sides, with every byte checked: the
//! workload the network tests (UDP, Ethernet) run across rnicd processes.

use std::time::Duration;

use rnic_driver::verbs::{Mr, RecvWr, Wc, WcOpcode, WcStatus, WrOpcode};

use crate::verbs_pair::{pattern, poll_n, read_mr, read_u64, signaled, Side};

/// How long one completion may take.
pub const T: Duration = Duration::from_secs(10);
/// The largest message: 1 MiB, a thousand 1 KiB packets in one burst.
pub const BIG: usize = 1 << 20;
/// Where READs land on the requester and atomics work on the responder.
pub const READ_AT: usize = 2 << 20;
pub const ATOMIC_AT: usize = 3 << 20;

/// The one completion of `side`, which must be a success.
#[track_caller]
pub fn one(side: &Side) -> Wc {
    let wcs = poll_n(&side.cq, 1, T);
    assert_eq!(wcs.len(), 1, "no completion within {T:?}");
    let wc = wcs.into_iter().next().unwrap();
    assert_eq!(wc.status, Ok(WcStatus::Success), "{wc:?}");
    wc
}

/// The scatter list of `len` bytes of `mr` at `offset` (none for 0 bytes).
pub fn sges(mr: &Mr, offset: usize, len: usize) -> Vec<rnic_driver::verbs::Sge> {
    if len == 0 {
        Vec::new()
    } else {
        vec![mr.sge(offset, len)]
    }
}

/// The IPv4-mapped address of a GID.
pub fn ip(gid: [u8; 16]) -> [u8; 4] {
    assert_eq!(gid[..12], [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff]);
    gid[12..].try_into().unwrap()
}

/// Every operation of `a` on `b` with a message of `len` bytes, data checked (and the
/// bytes after it untouched).
pub fn all_ops(a: &Side, b: &Side, len: usize, seed: u64) {
    const POISON: u8 = 0x5A;
    let fresh = |mr: &Mr, at: usize| mr.write(at, &vec![POISON; len + 16]);
    let check = |mr: &Mr, at: usize, data: &[u8], what: &str| {
        assert!(
            read_mr(mr, at, len) == data,
            "{what} of {len} bytes: data differs"
        );
        assert_eq!(
            read_mr(mr, at + len, 16),
            vec![POISON; 16],
            "{what} of {len} bytes: wrote past the end"
        );
    };

    // SEND and SEND with immediate.
    for (i, imm) in [None, Some(0x0102_0304u32)].into_iter().enumerate() {
        let data = pattern(len, seed * 8 + i as u64);
        a.mr.write(0, &data);
        fresh(&b.mr, 0);
        b.qp.post_recv(&RecvWr {
            wr_id: 100,
            sges: vec![b.mr.sge(0, BIG)],
        })
        .expect("post_recv");
        let opcode = imm.map_or(WrOpcode::Send, WrOpcode::SendWithImm);
        a.qp.post_send(&signaled(1, opcode, sges(&a.mr, 0, len)))
            .expect("post_send");
        assert_eq!(one(a).opcode, WcOpcode::Send);
        let got = one(b);
        assert_eq!(
            (got.opcode, got.byte_len as usize, got.imm_data),
            (WcOpcode::Recv, len, imm)
        );
        assert_eq!(got.src_qp, a.qp.qp_num());
        check(&b.mr, 0, &data, "SEND");
    }

    // RDMA WRITE and RDMA WRITE with immediate.
    for (i, imm) in [None, Some(0xCAFE_F00Du32)].into_iter().enumerate() {
        let data = pattern(len, seed * 8 + 2 + i as u64);
        a.mr.write(0, &data);
        fresh(&b.mr, 0);
        let (remote_addr, rkey) = (b.mr.addr(0), b.mr.rkey());
        let opcode = match imm {
            None => WrOpcode::RdmaWrite { remote_addr, rkey },
            Some(imm) => {
                b.qp.post_recv(&RecvWr {
                    wr_id: 200,
                    sges: Vec::new(),
                })
                .expect("post_recv");
                WrOpcode::RdmaWriteWithImm {
                    remote_addr,
                    rkey,
                    imm,
                }
            }
        };
        a.qp.post_send(&signaled(2, opcode, sges(&a.mr, 0, len)))
            .expect("post_send");
        assert_eq!(one(a).opcode, WcOpcode::RdmaWrite);
        if let Some(imm) = imm {
            let got = one(b);
            assert_eq!(
                (got.opcode, got.byte_len as usize, got.imm_data),
                (WcOpcode::RecvRdmaWithImm, len, Some(imm))
            );
        }
        check(&b.mr, 0, &data, "RDMA WRITE");
    }

    // RDMA READ.
    let data = pattern(len, seed * 8 + 4);
    b.mr.write(0, &data);
    fresh(&a.mr, READ_AT);
    a.qp.post_send(&signaled(
        3,
        WrOpcode::RdmaRead {
            remote_addr: b.mr.addr(0),
            rkey: b.mr.rkey(),
        },
        sges(&a.mr, READ_AT, len),
    ))
    .expect("post_send");
    let wc = one(a);
    assert_eq!((wc.opcode, wc.byte_len as usize), (WcOpcode::RdmaRead, len));
    check(&a.mr, READ_AT, &data, "RDMA READ");
}

/// Both atomics of `a` on `b`.
pub fn atomics(a: &Side, b: &Side) {
    b.mr.write(ATOMIC_AT, &40u64.to_le_bytes());
    a.qp.post_send(&signaled(
        4,
        WrOpcode::AtomicFetchAdd {
            remote_addr: b.mr.addr(ATOMIC_AT),
            rkey: b.mr.rkey(),
            add: 2,
        },
        vec![a.mr.sge(READ_AT, 8)],
    ))
    .expect("post_send");
    let wc = one(a);
    assert_eq!((wc.opcode, wc.byte_len), (WcOpcode::FetchAdd, 8));
    assert_eq!(read_u64(&a.mr, READ_AT), 40);
    assert_eq!(read_u64(&b.mr, ATOMIC_AT), 42);
    a.qp.post_send(&signaled(
        5,
        WrOpcode::AtomicCmpSwp {
            remote_addr: b.mr.addr(ATOMIC_AT),
            rkey: b.mr.rkey(),
            compare: 42,
            swap: 0xDEAD_BEEF,
        },
        vec![a.mr.sge(READ_AT + 8, 8)],
    ))
    .expect("post_send");
    let wc = one(a);
    assert_eq!((wc.opcode, wc.byte_len), (WcOpcode::CompSwap, 8));
    assert_eq!(read_u64(&a.mr, READ_AT + 8), 42);
    assert_eq!(read_u64(&b.mr, ATOMIC_AT), 0xDEAD_BEEF);
}
