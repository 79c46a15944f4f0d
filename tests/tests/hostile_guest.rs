//! A hostile guest: one VF runs random commands (with the numbers and keys of other
//! functions' objects among their fields), random work requests on a QP aimed at another
//! function's QP, random doorbell writes and random register writes, random frames (to
//! the others, broadcast, of any length) and raw descriptors on its Ethernet queues,
//! seeded and bounded,
//! while two other VFs run verified traffic. Those two must see every byte and every
//! completion right, and rnicd's memory must stay bounded.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rnic_abi::cmd::Opcode;
use rnic_abi::eth::{self, EthDesc};
use rnic_abi::regs;
use rnic_driver::eth::EthPort;
use rnic_driver::transport::vfio_user::VfioUserTransport;
use rnic_driver::verbs::{self, RecvWr, SendWr, Sge, WcOpcode, WcStatus, WrOpcode};
use rnic_tests::verbs_pair::{
    connect, pattern, poll_n, read_mr, side, signaled, to_rts, PairOptions, Side,
};
use rnic_tests::{Rng, Rnicd};

/// The numbers of the victims' objects, which the hostile VF writes into its commands
/// and work requests.
#[derive(Debug, Clone)]
struct Victims {
    words: Vec<u32>,
    qpn: u32,
    gid: [u8; 16],
    addr: u64,
    rkey: u32,
    /// The MACs of the two functions with verified traffic.
    macs: [[u8; 6]; 2],
}

/// rnicd's resident memory, in KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .expect("VmRSS")
}

/// What the hostile VF did.
#[derive(Debug, Default)]
struct Mischief {
    commands: u64,
    commands_refused: u64,
    work_requests: u64,
    doorbells: u64,
    registers: u64,
    reopened: u64,
    /// Frames and raw descriptors on its Ethernet queues.
    ethernet: u64,
}

/// Opcodes the hostile VF sends: every command the device knows, admin ones (a VF's are
/// refused) and unknown numbers.
const OPCODES: [u16; 24] = [
    Opcode::Nop as u16,
    Opcode::QueryDevice as u16,
    Opcode::CreateEq as u16,
    Opcode::DestroyEq as u16,
    Opcode::AllocPd as u16,
    Opcode::DeallocPd as u16,
    Opcode::RegMr as u16,
    Opcode::DeregMr as u16,
    Opcode::CreateIndirectKey as u16,
    Opcode::CreatePatternKey as u16,
    Opcode::CreateCq as u16,
    Opcode::DestroyCq as u16,
    Opcode::CreateQp as u16,
    Opcode::ModifyQp as u16,
    Opcode::QueryQp as u16,
    Opcode::DestroyQp as u16,
    Opcode::CreateSrq as u16,
    Opcode::DestroySrq as u16,
    Opcode::AdoptQp as u16,
    Opcode::CreateSqWindow as u16,
    Opcode::CreateCtrlq as u16,
    Opcode::CreateSharedSq as u16,
    0x1008,
    0x0199,
];

/// One incarnation of the hostile VF: a device opened on its socket, with a QP connected
/// to the victim's QP (as if it were the victim's peer) and a registered buffer.
fn misbehave(
    socket: &std::path::Path,
    victims: &Victims,
    rng: &mut Rng,
    until: Instant,
    m: &mut Mischief,
) {
    let o = PairOptions::default();
    let me = side(socket, &o);
    // Its QP claims to be the peer of the victim's QP.
    let (at, mask) = verbs::rtr_attr(
        victims.qpn,
        victims.gid,
        rng.next_u64() as u32 & 0xFF_FFFF,
        o.mtu,
        16,
        o.min_rnr_timer,
    );
    me.qp.modify(&at, mask).expect("RTR");
    to_rts(&me.qp, &o, rng.next_u64() as u32 & 0xFF_FFFF);
    let transport = me.ctx.device().transport();
    let bar = transport.doorbells().len() as u64;
    // Its Ethernet queues too (datasheet §15), with reception on.
    let mut port = EthPort::open(me.ctx.device(), 16, 9000, eth::RX_ENABLE).ok();
    while Instant::now() < until {
        match rng.below(12) {
            0..=4 => {
                let opcode = OPCODES[rng.below(OPCODES.len() as u64) as usize];
                let mut body = vec![0u8; rng.below(160) as usize];
                for b in body.iter_mut() {
                    *b = rng.next_u64() as u8;
                }
                // Real numbers where the device looks for them.
                for at in (0..body.len() / 4).map(|w| w * 4) {
                    if rng.percent(40) {
                        let w = victims.words[rng.below(victims.words.len() as u64) as usize];
                        body[at..at + 4].copy_from_slice(&w.to_le_bytes());
                    }
                }
                m.commands += 1;
                match me
                    .ctx
                    .device()
                    .raw_command(opcode, &body, rng.below(128) as usize)
                {
                    Ok(c) if c.header.status != 0 => m.commands_refused += 1,
                    Ok(_) => {}
                    // The queue is gone (a command stopped it): open the device again.
                    Err(_) => break,
                }
            }
            5..=7 => {
                let sge = |rng: &mut Rng| Sge {
                    addr: if rng.percent(50) {
                        me.mr.addr(rng.below(4096) as usize)
                    } else {
                        rng.next_u64()
                    },
                    length: rng.below(1 << 17) as u32,
                    lkey: if rng.percent(70) {
                        me.mr.lkey()
                    } else {
                        victims.words[rng.below(victims.words.len() as u64) as usize]
                    },
                };
                let remote_addr = victims.addr.wrapping_add(rng.below(1 << 20));
                let opcode = match rng.below(6) {
                    0 => WrOpcode::Send,
                    1 => WrOpcode::SendWithInv(victims.rkey),
                    2 => WrOpcode::RdmaWrite {
                        remote_addr,
                        rkey: victims.rkey,
                    },
                    3 => WrOpcode::RdmaRead {
                        remote_addr,
                        rkey: victims.rkey,
                    },
                    4 => WrOpcode::AtomicFetchAdd {
                        remote_addr: remote_addr & !7,
                        rkey: victims.rkey,
                        add: rng.next_u64(),
                    },
                    _ => WrOpcode::RdmaWriteWithImm {
                        remote_addr,
                        rkey: victims.rkey,
                        imm: rng.next_u64() as u32,
                    },
                };
                let sges = (0..rng.below(4)).map(|_| sge(rng)).collect();
                let wr = SendWr {
                    wr_id: rng.next_u64(),
                    opcode,
                    sges,
                    signaled: rng.percent(50),
                    ..SendWr::default()
                };
                m.work_requests += 1;
                let _ = me.qp.post_send(&wr);
                let _ = me.cq.poll(64);
            }
            8 => {
                let offset = rng.below(bar / 4) * 4;
                transport.doorbells().write32(offset, rng.next_u64() as u32);
                let page = rng.below(bar / 4096 + 2) as u32;
                let _ = transport.reg_write32(regs::DOORBELL_KICK, page);
                m.doorbells += 1;
            }
            9..=10 => {
                let Some(port) = port.as_mut() else {
                    continue;
                };
                m.ethernet += 1;
                if rng.percent(50) {
                    // A frame to the victims, to everyone, or to no one, of any length.
                    let dst = match rng.below(4) {
                        0 => [0xff; 6],
                        1 => victims.macs[0],
                        2 => victims.macs[1],
                        _ => rng.next_u64().to_le_bytes()[..6].try_into().expect("6"),
                    };
                    let mut frame: Vec<u8> =
                        (0..rng.below(9100)).map(|_| rng.next_u64() as u8).collect();
                    if frame.len() >= 6 {
                        frame[..6].copy_from_slice(&dst);
                    }
                    let _ = port.send(&[&frame]);
                } else {
                    let tx = rng.percent(50);
                    let desc = EthDesc {
                        addr: if rng.percent(50) {
                            port.buffer_address(tx, rng.below(16) as u32) + rng.below(20000)
                        } else {
                            rng.next_u64()
                        },
                        len: rng.below(20000) as u32,
                        flags: rng.below(4) as u16,
                        status: 0,
                    };
                    let _ = port.post_raw(tx, desc);
                    if rng.percent(10) {
                        let _ = port.write_slot_raw(tx, rng.below(2) * 4, rng.next_u64() as u32);
                    }
                }
                let _ = port.take_send_errors();
                let _ = port.recv(Duration::ZERO);
            }
            _ => {
                // Any register, any value; then the next incarnation starts from a reset.
                let offset = rng.below(regs::REGS_END / 4 + 8) * 4;
                let _ = transport.reg_write32(offset, rng.next_u64() as u32);
                m.registers += 1;
                break;
            }
        }
    }
    // Whatever it destroyed behind the driver's back, its objects are not torn down
    // politely: it leaves the socket, and the next incarnation's reset takes them all.
    std::mem::forget(port);
    if let Some(t) = transport.as_any().downcast_ref::<VfioUserTransport>() {
        let _ = t.disconnect();
    }
    std::mem::forget(me);
}

/// Verified traffic between `a` and `b`: WRITEs, READs and SENDs of random sizes, one at a
/// time; every completion must be the one expected, with success, and every byte right.
fn verified_traffic(a: &Side, b: &Side, seed: u64, until: Instant) -> u64 {
    let mut rng = Rng(seed);
    let mut done = 0u64;
    while Instant::now() < until || done < 100 {
        let len = 1 + rng.below(64 << 10) as usize;
        let data = pattern(len, rng.next_u64());
        let wr_id = done;
        match rng.below(3) {
            0 => {
                a.mr.write(0, &data);
                let wr = signaled(
                    wr_id,
                    WrOpcode::RdmaWrite {
                        remote_addr: b.mr.addr(1 << 17),
                        rkey: b.mr.rkey(),
                    },
                    vec![a.mr.sge(0, len)],
                );
                a.qp.post_send(&wr).expect("post WRITE");
                expect(a, wr_id, WcOpcode::RdmaWrite);
                assert!(
                    read_mr(&b.mr, 1 << 17, len) == data,
                    "WRITE {done}: bytes differ"
                );
            }
            1 => {
                b.mr.write(1 << 18, &data);
                let wr = signaled(
                    wr_id,
                    WrOpcode::RdmaRead {
                        remote_addr: b.mr.addr(1 << 18),
                        rkey: b.mr.rkey(),
                    },
                    vec![a.mr.sge(1 << 17, len)],
                );
                a.qp.post_send(&wr).expect("post READ");
                expect(a, wr_id, WcOpcode::RdmaRead);
                assert!(
                    read_mr(&a.mr, 1 << 17, len) == data,
                    "READ {done}: bytes differ"
                );
            }
            _ => {
                b.qp.post_recv(&RecvWr {
                    wr_id,
                    sges: vec![b.mr.sge(0, 64 << 10)],
                })
                .expect("post RECV");
                a.mr.write(1 << 18, &data);
                let wr = signaled(wr_id, WrOpcode::Send, vec![a.mr.sge(1 << 18, len)]);
                a.qp.post_send(&wr).expect("post SEND");
                expect(a, wr_id, WcOpcode::Send);
                let wc = expect(b, wr_id, WcOpcode::Recv);
                assert_eq!(wc.byte_len as usize, len, "SEND {done}: length");
                assert!(read_mr(&b.mr, 0, len) == data, "SEND {done}: bytes differ");
            }
        }
        done += 1;
    }
    // Nothing more completes on either side: no WR completed twice.
    std::thread::sleep(Duration::from_millis(50));
    assert!(a.cq.poll(8).is_empty() && b.cq.poll(8).is_empty());
    done
}

#[track_caller]
fn expect(s: &Side, wr_id: u64, opcode: WcOpcode) -> rnic_driver::verbs::Wc {
    let wcs = poll_n(&s.cq, 1, Duration::from_secs(10));
    assert_eq!(wcs.len(), 1, "WR {wr_id}: no completion within 10 s");
    let wc = wcs[0];
    assert_eq!(
        (wc.wr_id, wc.status, wc.opcode),
        (wr_id, Ok(WcStatus::Success), opcode),
        "{}",
        wc.status_str()
    );
    wc
}

#[test]
fn a_hostile_vf_disturbs_neither_the_traffic_of_two_others_nor_rnicd_memory() {
    const SECONDS: u64 = 12;
    let rnicd = Rnicd::start(3, &[]);
    let o = PairOptions::default();
    let a = side(&rnicd.socket("vf0"), &o);
    let b = side(&rnicd.socket("vf1"), &o);
    connect(&a, &b, &o, 0x100, 0x200);
    let victims = Victims {
        words: vec![
            a.qp.qp_num(),
            b.qp.qp_num(),
            a.mr.lkey(),
            a.mr.rkey(),
            b.mr.lkey(),
            b.mr.rkey(),
            0,
            1,
            u32::MAX,
            0x8000_0000,
        ],
        qpn: b.qp.qp_num(),
        gid: b.gid,
        addr: b.mr.addr(0),
        rkey: b.mr.rkey(),
        macs: [
            a.ctx.device().query_device().expect("query").mac,
            b.ctx.device().query_device().expect("query").mac,
        ],
    };
    // Settle the traffic's own memory first.
    verified_traffic(&a, &b, 1, Instant::now());
    let before = rss_kib(rnicd.pid());

    let until = Instant::now() + Duration::from_secs(SECONDS);
    let stop = Arc::new(AtomicBool::new(false));
    let socket = rnicd.socket("vf2");
    let hostile = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut rng = Rng(0x05EE_DBAD);
            let mut m = Mischief::default();
            while Instant::now() < until && !stop.load(Ordering::Relaxed) {
                misbehave(&socket, &victims, &mut rng, until, &mut m);
                m.reopened += 1;
            }
            m
        })
    };
    let messages = verified_traffic(&a, &b, 2, until);
    stop.store(true, Ordering::Relaxed);
    let m = hostile.join().expect("the hostile VF's thread");
    let after = rss_kib(rnicd.pid());
    eprintln!(
        "{messages} verified messages while the hostile VF did {m:?}; rnicd {before} -> {after} KiB"
    );
    assert!(m.commands > 100 && m.work_requests > 100, "{m:?}");
    assert!(m.commands_refused > 0 && m.registers > 0, "{m:?}");
    assert!(m.ethernet > 100, "{m:?}");
    assert!(messages > 100, "{messages} messages");
    assert!(
        after < before + 64 * 1024,
        "rnicd grew from {before} to {after} KiB"
    );
}
