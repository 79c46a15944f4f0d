//! RDMA verbs, sizes: every size boundary, and random transfers and random batches
//! (proptest) over the opcodes, path MTUs, SGE layouts and inline data.
//!
//! Between two VFs of one rnicd, through the host transport: every operation travels as
//! RoCEv2 frames through the device's internal switch, and every test checks the data that
//! arrived, the completions as ibverbs defines them, and (for errors) that nothing outside
//! the registered memory changed.

use proptest::prelude::*;
use rnic_driver::verbs::{self, SendWr, Sge, WcOpcode, WrOpcode};
use rnic_tests::verbs_checks::{assert_ok, connected, one, recv, T};
use rnic_tests::verbs_pair::{pattern, poll_n, read_mr, signaled, PairOptions};

/// Moves `size` bytes with `op` from `a` to `b` (for READ, from `b` to `a`) between
/// SGE lists of `local` and `remote` pieces and checks the data, the completions and that
/// nothing else in either buffer changed.
#[derive(Debug, Clone)]
struct Transfer {
    op: u8,
    mtu: u8,
    size: usize,
    local_sges: usize,
    remote_sges: usize,
    inline: bool,
    seed: u64,
}

const OPS: [&str; 5] = ["SEND", "SEND_WITH_IMM", "WRITE", "WRITE_WITH_IMM", "READ"];

/// Cuts `[0, size)` into `n` pieces of at least one byte (none for 0 bytes) and lays them
/// out through a buffer of `buf_len` bytes with random gaps, in a random order. Returns
/// (buffer offset, length) of each piece, in message order.
fn layout(size: usize, n: usize, buf_len: usize, rng: &mut u64) -> Vec<(usize, usize)> {
    let mut next = || {
        *rng ^= *rng << 13;
        *rng ^= *rng >> 7;
        *rng ^= *rng << 17;
        *rng
    };
    let n = n.min(size);
    if n == 0 {
        return Vec::new();
    }
    let mut cuts: Vec<usize> = (1..n)
        .map(|_| 1 + (next() as usize) % (size - 1).max(1))
        .collect();
    cuts.sort_unstable();
    cuts.dedup();
    let mut lens = Vec::new();
    let mut last = 0;
    for c in cuts.into_iter().chain([size]) {
        if c > last {
            lens.push(c - last);
            last = c;
        }
    }
    // Physical order: a rotation of message order, with gaps from the spare room.
    let k = lens.len();
    let rot = (next() as usize) % k;
    let mut spare = buf_len - size;
    let mut offsets = vec![0; k];
    let mut at = (next() as usize) % (spare.min(5000) + 1);
    spare -= at;
    for j in 0..k {
        let i = (j + rot) % k;
        offsets[i] = at;
        at += lens[i];
        let gap = (next() as usize) % (spare.min(300) + 1);
        spare -= gap;
        at += gap;
    }
    offsets.into_iter().zip(lens).collect()
}

fn run_transfer(t: &Transfer) {
    let mtu = verbs::mtu_bytes(t.mtu).unwrap() as usize;
    let o = PairOptions {
        mtu: t.mtu,
        ..PairOptions::default()
    };
    let (_d, a, b) = connected(&o);
    let buf_len = o.buf_len;
    let mut rng = t.seed | 1;
    let op = OPS[t.op as usize];
    let a_before = pattern(buf_len, t.seed);
    let b_before = pattern(buf_len, !t.seed);
    a.mr.write(0, &a_before);
    b.mr.write(0, &b_before);
    let local = layout(t.size, t.local_sges, buf_len, &mut rng);
    let remote_off = (rng as usize) % (buf_len - t.size + 1);
    let remote = if matches!(op, "SEND" | "SEND_WITH_IMM") {
        layout(t.size, t.remote_sges, buf_len, &mut rng)
    } else {
        vec![(remote_off, t.size)]
    };
    let gather = |bytes: &[u8], pieces: &[(usize, usize)]| -> Vec<u8> {
        pieces
            .iter()
            .flat_map(|&(o, l)| bytes[o..o + l].iter().copied())
            .collect()
    };
    let scatter = |bytes: &mut [u8], pieces: &[(usize, usize)], data: &[u8]| {
        let mut at = 0;
        for &(o, l) in pieces {
            bytes[o..o + l].copy_from_slice(&data[at..at + l]);
            at += l;
        }
    };
    let sges: Vec<Sge> = local.iter().map(|&(o, l)| a.mr.sge(o, l)).collect();
    let takes_recv = matches!(op, "SEND" | "SEND_WITH_IMM" | "WRITE_WITH_IMM");
    if takes_recv {
        let rsges = if op == "WRITE_WITH_IMM" {
            vec![b.mr.sge(0, 1)]
        } else {
            remote.iter().map(|&(o, l)| b.mr.sge(o, l)).collect()
        };
        b.qp.post_recv(&recv(0xB0B, rsges)).unwrap();
    }
    let imm = (t.seed >> 32) as u32;
    let opcode = match op {
        "SEND" => WrOpcode::Send,
        "SEND_WITH_IMM" => WrOpcode::SendWithImm(imm),
        "WRITE" => WrOpcode::RdmaWrite {
            remote_addr: b.mr.addr(remote_off),
            rkey: b.mr.rkey(),
        },
        "WRITE_WITH_IMM" => WrOpcode::RdmaWriteWithImm {
            remote_addr: b.mr.addr(remote_off),
            rkey: b.mr.rkey(),
            imm,
        },
        _ => WrOpcode::RdmaRead {
            remote_addr: b.mr.addr(remote_off),
            rkey: b.mr.rkey(),
        },
    };
    let inline = t.inline && op != "READ" && t.size <= o.caps.max_inline_data as usize;
    let wr = if inline {
        SendWr {
            inline: Some(gather(&a_before, &local)),
            ..signaled(0xA0A, opcode, vec![])
        }
    } else {
        signaled(0xA0A, opcode, sges)
    };
    a.qp.post_send(&wr).unwrap();
    let wc = one(&a.cq);
    assert_ok(&wc);
    let want = match op {
        "SEND" | "SEND_WITH_IMM" => WcOpcode::Send,
        "READ" => WcOpcode::RdmaRead,
        _ => WcOpcode::RdmaWrite,
    };
    assert_eq!((wc.wr_id, wc.opcode), (0xA0A, want));
    if op == "READ" {
        assert_eq!(wc.byte_len as usize, t.size);
    }
    // The responder's completion, if any, was written before the ACK that completed the
    // request: it is there now or never.
    let got = b.cq.poll(2);
    if takes_recv {
        assert_eq!(got.len(), 1, "{got:?}");
        let r = &got[0];
        assert_ok(r);
        assert_eq!((r.wr_id, r.byte_len as usize), (0xB0B, t.size));
        assert_eq!(r.src_qp, a.qp.qp_num());
        let (opc, imm_data) = match op {
            "SEND" => (WcOpcode::Recv, None),
            "SEND_WITH_IMM" => (WcOpcode::Recv, Some(imm)),
            _ => (WcOpcode::RecvRdmaWithImm, Some(imm)),
        };
        assert_eq!((r.opcode, r.imm_data), (opc, imm_data));
    } else {
        assert!(got.is_empty(), "{got:?}");
    }
    let mut a_after = a_before.clone();
    let mut b_after = b_before.clone();
    if op == "READ" {
        scatter(&mut a_after, &local, &gather(&b_before, &remote));
    } else {
        scatter(&mut b_after, &remote, &gather(&a_before, &local));
    }
    let a_now = read_mr(&a.mr, 0, buf_len);
    let b_now = read_mr(&b.mr, 0, buf_len);
    let first_diff = |x: &[u8], y: &[u8]| x.iter().zip(y).position(|(p, q)| p != q);
    assert!(
        a_now == a_after,
        "{op} of {} bytes (mtu {mtu}): requester's buffer differs at {:?}",
        t.size,
        first_diff(&a_now, &a_after)
    );
    assert!(
        b_now == b_after,
        "{op} of {} bytes (mtu {mtu}): responder's buffer differs at {:?}",
        t.size,
        first_diff(&b_now, &b_after)
    );
}

#[test]
fn every_size_boundary_arrives_intact_by_send_write_and_read() {
    let mtu = 1024;
    for size in [0, 1, mtu - 1, mtu, mtu + 1, 10 * mtu + 3, 1 << 20] {
        for op in [0, 2, 4] {
            run_transfer(&Transfer {
                op,
                mtu: verbs::mtu::MTU_1024,
                size,
                local_sges: 3,
                remote_sges: 2,
                inline: false,
                seed: size as u64 * 31 + u64::from(op),
            });
        }
    }
}

fn transfers() -> impl Strategy<Value = Transfer> {
    (
        0u8..5,
        1u8..=5,
        0usize..8,
        0usize..=65536,
        1usize..=16,
        1usize..=16,
        any::<bool>(),
        any::<u64>(),
    )
        .prop_map(
            |(op, mtu, kind, random, local_sges, remote_sges, inline, seed)| {
                let m = verbs::mtu_bytes(mtu).unwrap() as usize;
                let size = [0, 1, m - 1, m, m + 1, 10 * m + 3, 1 << 20, random][kind];
                Transfer {
                    op,
                    mtu,
                    size,
                    local_sges,
                    remote_sges,
                    inline,
                    seed,
                }
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 24,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn random_transfers_arrive_intact_and_change_nothing_else(t in transfers()) {
        run_transfer(&t);
    }

    #[test]
    fn random_batches_complete_exactly_their_signaled_wrs_in_order(wrs in batches()) {
        run_batch(&wrs);
    }
}

/// One work request of a random batch.
#[derive(Debug, Clone)]
struct BatchWr {
    /// SEND, SEND_WITH_IMM, WRITE, WRITE_WITH_IMM, READ, CMP_AND_SWP, FETCH_AND_ADD.
    kind: u8,
    size: usize,
    offset: usize,
    signaled: bool,
    solicited: bool,
    inline: bool,
    cas_matches: bool,
    operand: u64,
}

fn batches() -> impl Strategy<Value = Vec<BatchWr>> {
    let wr = (
        0u8..7,
        0usize..=3000,
        0usize..1000,
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
        any::<u64>(),
    )
        .prop_map(
            |(kind, size, offset, signaled, solicited, inline, cas_matches, operand)| BatchWr {
                kind,
                size,
                offset,
                signaled,
                solicited,
                inline,
                cas_matches,
                operand,
            },
        );
    prop::collection::vec(wr, 1..=12)
}

/// Posts `wrs` as one list (work request `k` uses bytes `k * 8192 + offset ..` of both
/// buffers), then a signaled zero-length WRITE as a barrier, and checks every completion,
/// in order, and both buffers whole.
fn run_batch(wrs: &[BatchWr]) {
    const REGION: usize = 8192;
    let o = PairOptions::default();
    let (_d, a, b) = connected(&o);
    let len = 12 * REGION;
    let seed = wrs.iter().fold(7u64, |h, w| h.wrapping_mul(31) ^ w.operand);
    let mut a_exp = pattern(len, seed);
    let mut b_exp = pattern(len, seed ^ 0xFFFF);
    a.mr.write(0, &a_exp);
    b.mr.write(0, &b_exp);
    let mut posts = Vec::new();
    let mut recvs = Vec::new();
    // (wr_id, opcode, byte_len where ibverbs defines it) of the send completions, and
    // (wr_id, opcode, byte_len, imm, solicited) of the receive completions, expected.
    let mut sends = Vec::new();
    let mut received = Vec::new();
    for (k, w) in wrs.iter().enumerate() {
        let id = k as u64;
        let base = k * REGION;
        let (at, size) = if w.kind >= 5 {
            (base + w.offset / 8 * 8, 8)
        } else {
            (base + w.offset, w.size)
        };
        let imm = w.operand as u32;
        let remote_addr = b.mr.addr(at);
        let rkey = b.mr.rkey();
        let old = u64::from_le_bytes(b_exp[at..at + 8].try_into().unwrap());
        let (opcode, wc) = match w.kind {
            0 => (WrOpcode::Send, WcOpcode::Send),
            1 => (WrOpcode::SendWithImm(imm), WcOpcode::Send),
            2 => (
                WrOpcode::RdmaWrite { remote_addr, rkey },
                WcOpcode::RdmaWrite,
            ),
            3 => (
                WrOpcode::RdmaWriteWithImm {
                    remote_addr,
                    rkey,
                    imm,
                },
                WcOpcode::RdmaWrite,
            ),
            4 => (WrOpcode::RdmaRead { remote_addr, rkey }, WcOpcode::RdmaRead),
            5 => (
                WrOpcode::AtomicCmpSwp {
                    remote_addr,
                    rkey,
                    compare: if w.cas_matches { old } else { !old },
                    swap: w.operand,
                },
                WcOpcode::CompSwap,
            ),
            _ => (
                WrOpcode::AtomicFetchAdd {
                    remote_addr,
                    rkey,
                    add: w.operand,
                },
                WcOpcode::FetchAdd,
            ),
        };
        let sges = if size == 0 {
            vec![]
        } else {
            vec![a.mr.sge(at, size)]
        };
        let inline = w.inline && w.kind <= 3 && size <= o.caps.max_inline_data as usize;
        posts.push(SendWr {
            wr_id: id,
            opcode,
            sges: if inline { vec![] } else { sges },
            inline: inline.then(|| a_exp[at..at + size].to_vec()),
            signaled: w.signaled,
            solicited: w.solicited,
            fence: false,
        });
        match w.kind {
            0 | 1 => {
                let sges = if size == 0 {
                    vec![]
                } else {
                    vec![b.mr.sge(at, size)]
                };
                recvs.push(recv(id, sges));
                let imm = (w.kind == 1).then_some(imm);
                received.push((id, WcOpcode::Recv, size, imm, w.solicited));
            }
            3 => {
                recvs.push(recv(id, vec![]));
                received.push((id, WcOpcode::RecvRdmaWithImm, size, Some(imm), w.solicited));
            }
            _ => {}
        }
        match w.kind {
            0..=3 => {
                let data = a_exp[at..at + size].to_vec();
                b_exp[at..at + size].copy_from_slice(&data);
            }
            4 => {
                let data = b_exp[at..at + size].to_vec();
                a_exp[at..at + size].copy_from_slice(&data);
            }
            _ => {
                a_exp[at..at + 8].copy_from_slice(&old.to_le_bytes());
                let new = match (w.kind, w.cas_matches) {
                    (5, true) => w.operand,
                    (5, false) => old,
                    _ => old.wrapping_add(w.operand),
                };
                b_exp[at..at + 8].copy_from_slice(&new.to_le_bytes());
            }
        }
        if w.signaled {
            // READs and atomics report the bytes they fetched.
            sends.push((id, wc, (w.kind >= 4).then_some(size)));
        }
    }
    posts.push(signaled(
        999,
        WrOpcode::RdmaWrite {
            remote_addr: 0,
            rkey: 0,
        },
        vec![],
    ));
    sends.push((999, WcOpcode::RdmaWrite, None));
    b.qp.post_recv_list(&recvs).unwrap();
    a.qp.post_send_list(&posts).unwrap();
    // Completions come in order: once the barrier's is there, all are.
    let got = poll_n(&a.cq, sends.len(), T);
    got.iter().for_each(assert_ok);
    let got: Vec<_> = got
        .iter()
        .map(|w| {
            let fetched = matches!(
                w.opcode,
                WcOpcode::RdmaRead | WcOpcode::CompSwap | WcOpcode::FetchAdd
            );
            (w.wr_id, w.opcode, fetched.then_some(w.byte_len as usize))
        })
        .collect();
    assert_eq!(got, sends);
    assert!(a.cq.poll(1).is_empty());
    let got: Vec<_> =
        b.cq.poll(recvs.len() + 1)
            .iter()
            .map(|w| {
                assert_ok(w);
                assert_eq!(w.src_qp, a.qp.qp_num());
                (
                    w.wr_id,
                    w.opcode,
                    w.byte_len as usize,
                    w.imm_data,
                    w.solicited(),
                )
            })
            .collect();
    assert_eq!(got, received);
    assert!(
        read_mr(&a.mr, 0, len) == a_exp,
        "requester's buffer differs"
    );
    assert!(
        read_mr(&b.mr, 0, len) == b_exp,
        "responder's buffer differs"
    );
    assert_eq!(a.qp.sq_free_slots(), a.qp.caps().max_send_wr);
}
