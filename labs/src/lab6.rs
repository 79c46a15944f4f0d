//! Lab 6: reading RoCEv2 frames (docs/labs/lab6.md). The student writes a parser of the
//! frames the device puts on the wire (datasheet §7.11): Ethernet, IPv4, UDP, the BTH, the
//! extension headers of the opcode, the payload and the ICRC. The checker runs real
//! traffic between two functions of a capturing device (`rnicd --pcap`, §7.12), reads
//! the capture back, and compares what the parser says of every frame with the device's
//! own parser (`rnic_device::roce::parse`); then it feeds it broken frames.

use std::ops::Range;
use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use rnic_device::roce::opcode::opcode_name;
use rnic_driver::verbs::{
    self as verbs, mtu, Cq, Mr, Pd, Qp, QpCaps, RecvWr, SendWr, WrOpcode, ACCESS_LOCAL_WRITE,
    ACCESS_REMOTE_ATOMIC, ACCESS_REMOTE_READ, ACCESS_REMOTE_WRITE,
};
use rnic_harness::bench::{Bench, Net};
use rnic_harness::transport::Owner;

use crate::nic::Result;
use crate::report::{run_student, Report};

/// The RDMA Extended Transport Header (16 bytes): the remote buffer of a WRITE or READ.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Reth {
    /// Remote virtual address.
    pub va: u64,
    /// Remote key.
    pub rkey: u32,
    /// Length of the whole transfer (not of this packet).
    pub dma_len: u32,
}

/// The ACK Extended Transport Header (4 bytes).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Aeth {
    /// The syndrome byte, whole: type in bits 6:5, value in bits 4:0.
    pub syndrome: u8,
    /// Message sequence number (24 bits).
    pub msn: u32,
}

/// The Atomic Extended Transport Header (28 bytes) of compare-and-swap and fetch-and-add.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AtomicEth {
    /// Remote virtual address.
    pub va: u64,
    /// Remote key.
    pub rkey: u32,
    /// Swap value (compare and swap) or addend (fetch and add).
    pub swap_add: u64,
    /// Compare value.
    pub compare: u64,
}

/// What a parser says of one RoCEv2 frame. Every number is the value of its field
/// (network fields are big-endian on the wire, §7.11); the extension headers the opcode
/// does not carry are `None`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Packet {
    /// Ethernet destination MAC.
    pub dst_mac: [u8; 6],
    /// Ethernet source MAC.
    pub src_mac: [u8; 6],
    /// IPv4 source address.
    pub src_ip: [u8; 4],
    /// IPv4 destination address.
    pub dst_ip: [u8; 4],
    /// UDP source port (the destination port is always 4791).
    pub src_port: u16,
    /// BTH opcode.
    pub opcode: u8,
    /// BTH SE (solicited event) bit.
    pub solicited: bool,
    /// BTH pad count (0-3).
    pub pad: u8,
    /// BTH P_Key.
    pub pkey: u16,
    /// BTH destination QP (24 bits).
    pub dest_qp: u32,
    /// BTH AckReq bit.
    pub ack_req: bool,
    /// BTH PSN (24 bits).
    pub psn: u32,
    /// RETH: WRITE FIRST and ONLY, READ request.
    pub reth: Option<Reth>,
    /// AETH: ACK, atomic ACK, READ response FIRST, LAST and ONLY.
    pub aeth: Option<Aeth>,
    /// AtomicETH: compare and swap, fetch and add.
    pub atomic: Option<AtomicEth>,
    /// AtomicAckETH: the original value at the remote address (atomic ACK).
    pub atomic_ack: Option<u64>,
    /// ImmDt, the four bytes as on the wire: the WITH_IMMEDIATE opcodes.
    pub imm: Option<[u8; 4]>,
    /// IETH, the R_Key to invalidate: the WITH_INVALIDATE opcodes.
    pub ieth: Option<u32>,
    /// Where the payload is in the frame: after the extension headers, before the pad
    /// and the ICRC (`frame[payload]` is the data; empty when there is none).
    pub payload: Range<usize>,
    /// The ICRC field, as the number rxe stores in it.
    pub icrc: u32,
}

/// The student's parser: a frame as captured, whole, or an `Err` saying why it is not a
/// RoCEv2 frame it can read. It must never panic.
pub type Parse = fn(&[u8]) -> Result<Packet>;

/// The steps, as docs/labs/lab6.md numbers them.
pub const STEPS: [&str; 9] = [
    "Ethernet, IPv4 and UDP: addresses and ports",
    "the BTH: opcode, SE, pad, P_Key, QP, AckReq, PSN",
    "RETH on WRITE FIRST/ONLY and READ requests",
    "AETH on ACKs, READ responses and atomic ACKs",
    "AtomicETH and AtomicAckETH",
    "ImmDt and IETH",
    "the payload, without pad and ICRC",
    "the ICRC field",
    "a broken frame is an Err, not a panic",
];

/// Title of the report.
pub const TITLE: &str = "lab 6: reading RoCEv2 frames";

/// The first PSN each side sends: close to 2^24, so that the PSNs wrap during the run.
const FIRST_PSN: [u32; 2] = [0xFF_FFFD, 0x12_3456];
/// Bytes of each side's registered buffer.
const MR_LEN: usize = 16 << 10;

/// One side of the traffic: a function opened with the guest driver's verbs.
struct Side {
    qp: Qp,
    mr: Mr,
    cq: Cq,
    _pd: Pd,
    ctx: verbs::Context,
}

fn side(bench: &Bench, index: usize) -> Result<Side> {
    let e = |what: &str, err: rnic_driver::Error| format!("{what}: {err}");
    let ctx = bench.open(index);
    let pd = ctx.alloc_pd().map_err(|x| e("ALLOC_PD", x))?;
    let cq = ctx.create_cq(64).map_err(|x| e("CREATE_CQ", x))?;
    let buf = bench.rams[index]
        .alloc(MR_LEN, Owner::Harness)
        .map_err(|x| e("memory", x))?;
    let access =
        ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ | ACCESS_REMOTE_ATOMIC;
    let mr = pd
        .reg_mr(Arc::new(buf), 0, MR_LEN, access)
        .map_err(|x| e("REG_MR", x))?;
    let caps = QpCaps {
        max_send_wr: 16,
        max_recv_wr: 16,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let qp = pd
        .create_qp(&cq, &cq, caps, false)
        .map_err(|x| e("CREATE_QP", x))?;
    let (a, m) = verbs::init_attr(access & !ACCESS_LOCAL_WRITE);
    qp.modify(&a, m).map_err(|x| e("MODIFY_QP to INIT", x))?;
    Ok(Side {
        qp,
        mr,
        cq,
        _pd: pd,
        ctx,
    })
}

/// Connects `s` (INIT) to `peer` towards GID `gid`: MTU 1024, a long ACK timeout.
fn connect(s: &Side, peer: &Side, gid: [u8; 16], mine: usize) -> Result<()> {
    let (a, m) = verbs::rtr_attr(
        peer.qp.qp_num(),
        gid,
        FIRST_PSN[1 - mine],
        mtu::MTU_1024,
        4,
        12,
    );
    s.qp.modify(&a, m).map_err(|e| format!("RTR: {e}"))?;
    let (a, m) = verbs::rts_attr(FIRST_PSN[mine], 18, 7, 7, 4);
    s.qp.modify(&a, m).map_err(|e| format!("RTS: {e}"))
}

/// Runs the engine until `cq` has a completion; fails on an error completion.
fn complete(bench: &Bench, cq: &Cq, what: &str) -> Result<()> {
    for _ in 0..100_000 {
        if let Some(wc) = cq.poll(1).into_iter().next() {
            return if wc.is_success() {
                Ok(())
            } else {
                Err(format!("{what} completed with {}", wc.status_str()))
            };
        }
        bench.step();
    }
    Err(format!("{what} did not complete"))
}

/// Runs the lab's traffic between the PF and VF 0 of a device that captures every frame
/// to `pcap` (as `rnicd --pcap`, §7.12): a SEND (solicited, 37 bytes), an RDMA WRITE of
/// 2501 bytes (FIRST, MIDDLE, LAST at MTU 1024), an RDMA READ of 2050 bytes (a request,
/// three responses), a fetch-and-add, a compare-and-swap, a SEND with immediate and an
/// RDMA WRITE with immediate, each with its answers. The PSNs of the requester wrap past
/// 2^24 on the way. The same calls give the same frames every time (timestamps aside).
pub fn capture(pcap: &Path) -> Result<()> {
    let bench = Bench::new(2, Net::Capture(pcap.to_path_buf()));
    let a = side(&bench, 0)?;
    let b = side(&bench, 1)?;
    let gid = |s: &Side| s.ctx.attr().gid;
    connect(&a, &b, gid(&b), 0)?;
    connect(&b, &a, gid(&a), 1)?;
    for i in 0..4 {
        b.qp.post_recv(&RecvWr {
            wr_id: 100 + i,
            sges: vec![b.mr.sge(8192 + 1024 * i as usize, 1024)],
        })
        .map_err(|e| format!("post a receive: {e}"))?;
    }
    let pattern: Vec<u8> = (0..MR_LEN).map(|i| (i * 7 + 3) as u8).collect();
    a.mr.write(0, &pattern);
    b.mr.write(0, &pattern);
    let remote = |offset: usize| (b.mr.addr(offset), b.mr.rkey());
    let (w, wk) = remote(4096);
    let (r, rk) = remote(0);
    let (at, atk) = remote(12288);
    let wrs = [
        ("a SEND", WrOpcode::Send, 0, 37, true),
        (
            "an RDMA WRITE",
            WrOpcode::RdmaWrite {
                remote_addr: w,
                rkey: wk,
            },
            0,
            2501,
            false,
        ),
        (
            "an RDMA READ",
            WrOpcode::RdmaRead {
                remote_addr: r,
                rkey: rk,
            },
            4096,
            2050,
            false,
        ),
        (
            "a FETCH_ADD",
            WrOpcode::AtomicFetchAdd {
                remote_addr: at,
                rkey: atk,
                add: 0x0102_0304_0506_0708,
            },
            8192,
            8,
            false,
        ),
        (
            "a COMPARE_SWAP",
            WrOpcode::AtomicCmpSwp {
                remote_addr: at,
                rkey: atk,
                compare: 0x1111_2222_3333_4444,
                swap: 0x5555_6666_7777_8888,
            },
            8200,
            8,
            false,
        ),
        (
            "a SEND with immediate",
            WrOpcode::SendWithImm(u32::from_ne_bytes([0xDE, 0xAD, 0xBE, 0xEF])),
            0,
            5,
            false,
        ),
        (
            "an RDMA WRITE with immediate",
            WrOpcode::RdmaWriteWithImm {
                remote_addr: w,
                rkey: wk,
                imm: u32::from_ne_bytes([1, 2, 3, 4]),
            },
            64,
            1030,
            false,
        ),
    ];
    for (i, (what, opcode, offset, len, solicited)) in wrs.into_iter().enumerate() {
        a.qp.post_send(&SendWr {
            wr_id: i as u64,
            opcode,
            sges: vec![a.mr.sge(offset, len)],
            signaled: true,
            solicited,
            ..SendWr::default()
        })
        .map_err(|e| format!("post {what}: {e}"))?;
        complete(&bench, &a.cq, what)?;
    }
    bench.settle(1000);
    Ok(())
}

/// The frames of a classic pcap file (24-byte global header, then per frame a 16-byte
/// record header and the bytes), in order.
pub fn read_pcap(file: &[u8]) -> Result<Vec<Vec<u8>>> {
    let magic = file
        .get(0..4)
        .ok_or("not a pcap file: shorter than its header")?;
    let le = match magic {
        [0xD4, 0xC3, 0xB2, 0xA1] => true,
        [0xA1, 0xB2, 0xC3, 0xD4] => false,
        _ => return Err("not a classic pcap file (magic)".into()),
    };
    let u32_at = |at: usize| -> Result<u32> {
        let b: [u8; 4] = file
            .get(at..at + 4)
            .and_then(|b| b.try_into().ok())
            .ok_or("a pcap record header is cut short")?;
        Ok(if le {
            u32::from_le_bytes(b)
        } else {
            u32::from_be_bytes(b)
        })
    };
    let mut frames = Vec::new();
    let mut at = 24;
    while at < file.len() {
        let len = u32_at(at + 8)? as usize;
        let bytes = file
            .get(at + 16..at + 16 + len)
            .ok_or("a pcap record is cut short")?;
        frames.push(bytes.to_vec());
        at += 16 + len;
    }
    Ok(frames)
}

/// What the device's own parser says of `frame`, in the lab's terms: the truth the
/// student's [`Packet`] is compared with.
pub fn truth(frame: &[u8]) -> Result<Packet> {
    let p = rnic_device::roce::parse::parse(frame).map_err(|e| e.to_string())?;
    let h = p.hdrs;
    let start = p.payload.as_ptr() as usize - frame.as_ptr() as usize;
    let ip_end = 14 + usize::from(u16::from_be_bytes([frame[16], frame[17]]));
    let icrc: [u8; 4] = frame[ip_end - 4..ip_end].try_into().expect("4 bytes");
    Ok(Packet {
        dst_mac: p.dst_mac,
        src_mac: p.src_mac,
        src_ip: p.src_ip,
        dst_ip: p.dst_ip,
        src_port: p.src_port,
        opcode: h.bth.opcode,
        solicited: h.bth.solicited,
        pad: h.bth.pad,
        pkey: h.bth.pkey,
        dest_qp: h.bth.dest_qp,
        ack_req: h.bth.ack_req,
        psn: h.bth.psn,
        reth: h.reth.map(|r| Reth {
            va: r.va,
            rkey: r.rkey,
            dma_len: r.dma_len,
        }),
        aeth: h.aeth.map(|a| Aeth {
            syndrome: a.syndrome,
            msn: a.msn,
        }),
        atomic: h.atomic.map(|a| AtomicEth {
            va: a.va,
            rkey: a.rkey,
            swap_add: a.swap_add,
            compare: a.compare,
        }),
        atomic_ack: h.atomic_ack.map(|a| a.orig),
        imm: h.imm,
        ieth: h.ieth,
        payload: start..start + p.payload.len(),
        icrc: u32::from_le_bytes(icrc),
    })
}

/// One field compared: its name, the student's value, the truth, and where it is.
struct Field {
    name: &'static str,
    got: String,
    want: String,
    at: &'static str,
}

fn field(name: &'static str, got: String, want: String, at: &'static str) -> Field {
    Field {
        name,
        got,
        want,
        at,
    }
}

fn mac(m: &[u8; 6]) -> String {
    m.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

fn ip(a: &[u8; 4]) -> String {
    format!("{}.{}.{}.{}", a[0], a[1], a[2], a[3])
}

fn opt<T>(v: &Option<T>, show: impl Fn(&T) -> String) -> String {
    v.as_ref().map_or_else(|| "absent".into(), show)
}

/// The fields step `step` (0-based) compares.
fn fields(step: usize, got: &Packet, want: &Packet) -> Vec<Field> {
    let hex = |v: u64| format!("{v:#x}");
    match step {
        0 => vec![
            field("the destination MAC", mac(&got.dst_mac), mac(&want.dst_mac), "frame bytes 0-5"),
            field("the source MAC", mac(&got.src_mac), mac(&want.src_mac), "frame bytes 6-11"),
            field("the source IPv4 address", ip(&got.src_ip), ip(&want.src_ip), "IPv4 bytes 12-15, frame bytes 26-29"),
            field("the destination IPv4 address", ip(&got.dst_ip), ip(&want.dst_ip), "IPv4 bytes 16-19, frame bytes 30-33"),
            field("the UDP source port", got.src_port.to_string(), want.src_port.to_string(), "UDP bytes 0-1, frame bytes 34-35, big-endian"),
        ],
        1 => vec![
            field("the opcode", hex(got.opcode.into()), hex(want.opcode.into()), "BTH byte 0"),
            field("SE", got.solicited.to_string(), want.solicited.to_string(), "BTH byte 1 bit 7"),
            field("the pad count", got.pad.to_string(), want.pad.to_string(), "BTH byte 1 bits 5:4"),
            field("the P_Key", hex(got.pkey.into()), hex(want.pkey.into()), "BTH bytes 2-3"),
            field("the destination QP", hex(got.dest_qp.into()), hex(want.dest_qp.into()), "BTH bytes 5-7: 24 bits, byte 4 is FECN, BECN and reserved"),
            field("AckReq", got.ack_req.to_string(), want.ack_req.to_string(), "BTH byte 8 bit 7"),
            field("the PSN", hex(got.psn.into()), hex(want.psn.into()), "BTH bytes 9-11: 24 bits, byte 8 holds AckReq"),
        ],
        2 => vec![field(
            "the RETH",
            opt(&got.reth, |r| format!("va {:#x} rkey {:#x} dma_len {}", r.va, r.rkey, r.dma_len)),
            opt(&want.reth, |r| format!("va {:#x} rkey {:#x} dma_len {}", r.va, r.rkey, r.dma_len)),
            "16 bytes right after the BTH: va (8), R_Key (4), DMA length (4), on WRITE FIRST, WRITE ONLY and READ REQUEST (§7.9)",
        )],
        3 => vec![field(
            "the AETH",
            opt(&got.aeth, |a| format!("syndrome {:#04x} msn {:#x}", a.syndrome, a.msn)),
            opt(&want.aeth, |a| format!("syndrome {:#04x} msn {:#x}", a.syndrome, a.msn)),
            "4 bytes after the BTH (and RETH): syndrome (1), MSN (3), on ACKNOWLEDGE, ATOMIC_ACKNOWLEDGE and READ responses but MIDDLE (§7.9)",
        )],
        4 => vec![
            field(
                "the AtomicETH",
                opt(&got.atomic, |a| format!("va {:#x} rkey {:#x} swap_add {:#x} compare {:#x}", a.va, a.rkey, a.swap_add, a.compare)),
                opt(&want.atomic, |a| format!("va {:#x} rkey {:#x} swap_add {:#x} compare {:#x}", a.va, a.rkey, a.swap_add, a.compare)),
                "28 bytes after the BTH: va (8), R_Key (4), swap or add (8), compare (8), on COMPARE_SWAP and FETCH_ADD",
            ),
            field(
                "the AtomicAckETH",
                opt(&got.atomic_ack, |v| format!("{v:#x}")),
                opt(&want.atomic_ack, |v| format!("{v:#x}")),
                "8 bytes after the AETH of an ATOMIC_ACKNOWLEDGE: the original value",
            ),
        ],
        5 => vec![
            field(
                "the ImmDt",
                opt(&got.imm, |b| format!("{b:02x?}")),
                opt(&want.imm, |b| format!("{b:02x?}")),
                "4 bytes after the BTH and RETH, on the WITH_IMMEDIATE opcodes, kept as on the wire",
            ),
            field(
                "the IETH",
                opt(&got.ieth, |v| format!("{v:#x}")),
                opt(&want.ieth, |v| format!("{v:#x}")),
                "4 bytes after the BTH, on the WITH_INVALIDATE opcodes",
            ),
        ],
        6 => vec![field(
            "the payload",
            show_range(&got.payload),
            show_range(&want.payload),
            "after the BTH and extension headers, up to the pad (BTH pad count) and the 4-byte ICRC",
        )],
        _ => vec![field(
            "the ICRC field",
            format!("{:#010x}", got.icrc),
            format!("{:#010x}", want.icrc),
            if got.icrc == want.icrc.swap_bytes() {
                "its 4 bytes are right but read big-endian: rxe stores the ICRC little-endian"
            } else {
                "the last 4 bytes of the IPv4 packet (its total length says where it ends), little-endian"
            },
        )],
    }
}

fn show_range(r: &Range<usize>) -> String {
    format!("frame[{}..{}] ({} bytes)", r.start, r.end, r.len())
}

/// "frame N (NAME, PSN p)", as Wireshark numbers frames (from 1).
fn frame_name(index: usize, truth: &Packet) -> String {
    format!(
        "frame {} ({}, PSN {:#x})",
        index + 1,
        opcode_name(truth.opcode),
        truth.psn
    )
}

/// Step `step` (0-based) over every frame: the first field the student got wrong.
fn judge_fields(step: usize, truths: &[Packet], answers: &[Packet]) -> Result<String> {
    let mut seen = 0;
    for (i, (want, got)) in truths.iter().zip(answers).enumerate() {
        let fs = fields(step, got, want);
        if fs.iter().any(|f| f.want != "absent") {
            seen += 1;
        }
        if let Some(f) = fs.iter().find(|f| f.got != f.want) {
            return Err(format!(
                "{}: {} is {}, the frame holds {} ({}; §7.11)",
                frame_name(i, want),
                f.name,
                f.got,
                f.want,
                f.at
            ));
        }
    }
    let n = truths.len();
    Ok(if seen == n {
        format!("right in all {n} frames")
    } else {
        format!("right in all {n} frames, {seen} of which carry it")
    })
}

/// A frame spoiled on purpose, with why a parser must refuse it.
struct Broken {
    what: String,
    bytes: Vec<u8>,
    why: &'static str,
}

/// Spoils `frames` in the ways step 9 tries: every truncation of a WRITE FIRST and of an
/// ACK, another EtherType, IPv4 options, another UDP port, a UDP length beyond the
/// packet, a reserved opcode, a pad count beyond the bytes present.
fn broken_frames(frames: &[Vec<u8>], truths: &[Packet]) -> Vec<Broken> {
    let mut out = Vec::new();
    let find = |op: u8| truths.iter().position(|t| t.opcode == op);
    let mut spoil =
        |index: Option<usize>, what: &str, why: &'static str, f: &dyn Fn(&mut Vec<u8>)| {
            if let Some(i) = index {
                let mut bytes = frames[i].clone();
                f(&mut bytes);
                out.push(Broken {
                    what: format!("{} {what}", frame_name(i, &truths[i])),
                    bytes,
                    why,
                });
            }
        };
    for op in [0x06, 0x11, 0x12] {
        let i = find(op);
        let len = i.map_or(0, |i| frames[i].len());
        for cut in 0..len {
            spoil(
                i,
                &format!("cut to {cut} bytes"),
                "it is shorter than its IPv4 total length says, or than its headers",
                &|b| b.truncate(cut),
            );
        }
    }
    let ack = find(0x11);
    spoil(
        ack,
        "with EtherType 0x86dd",
        "it is not IPv4 (EtherType 0x0800)",
        &|b| b[12..14].copy_from_slice(&[0x86, 0xDD]),
    );
    spoil(
        ack,
        "with IHL 6",
        "an IPv4 header with options (IHL not 5) is not one rxe sends or reads",
        &|b| b[14] = 0x46,
    );
    spoil(
        ack,
        "to UDP port 4790",
        "RoCEv2 goes to UDP port 4791",
        &|b| b[36..38].copy_from_slice(&4790u16.to_be_bytes()),
    );
    spoil(
        ack,
        "with a UDP length of 400",
        "the UDP length is beyond the IPv4 packet",
        &|b| b[38..40].copy_from_slice(&400u16.to_be_bytes()),
    );
    spoil(
        ack,
        "with opcode 0x1f",
        "0x1f is a reserved RC opcode: its headers are unknown",
        &|b| b[42] = 0x1F,
    );
    spoil(
        find(0x0C),
        "with pad count 3",
        "a READ request has no payload, so no pad to count",
        &|b| b[43] |= 0x30,
    );
    out
}

/// A temporary capture file of this process.
fn temp_pcap() -> std::path::PathBuf {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    std::env::temp_dir().join(format!(
        "rnic-lab6-{}-{}.pcap",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ))
}

/// The frames of a fresh capture of the lab's traffic ([`capture`]).
pub fn frames() -> Result<Vec<Vec<u8>>> {
    let path = temp_pcap();
    let captured = capture(&path)
        .and_then(|()| std::fs::read(&path).map_err(|e| format!("read {}: {e}", path.display())));
    let _ = std::fs::remove_file(&path);
    read_pcap(&captured?)
}

/// Runs the lab's traffic, then `parse` on every frame of its capture, and judges it.
pub fn check(parse: Parse) -> Report {
    let mut r = Report::new(TITLE, &STEPS);
    let set_up = frames().and_then(|frames| {
        let truths = frames
            .iter()
            .enumerate()
            .map(|(i, f)| truth(f).map_err(|e| format!("frame {}: {e}", i + 1)))
            .collect::<Result<Vec<_>>>()?;
        Ok((frames, truths))
    });
    let (frames, truths) = match set_up {
        Ok(x) => x,
        Err(e) => {
            r.judge(0, Err(format!("the lab's own capture failed: {e}")));
            return r;
        }
    };
    let results: Vec<Result<Packet>> = frames.iter().map(|f| run_student(|| parse(f))).collect();

    // A part still to write: the first one a frame ran into.
    let todo = results
        .iter()
        .filter_map(|x| x.as_ref().err())
        .filter(|e| e.contains("still to write"))
        .min_by_key(|e| {
            e.split("step ")
                .nth(1)
                .and_then(|s| s.split(|c: char| !c.is_ascii_digit()).next())
                .and_then(|n| n.parse::<usize>().ok())
                .unwrap_or(usize::MAX)
        });
    if let Some(e) = todo {
        r.stopped(e.clone());
        return r;
    }
    let mut answers = Vec::new();
    for (i, x) in results.into_iter().enumerate() {
        match x {
            Ok(p) => answers.push(p),
            Err(e) => {
                r.judge(
                    0,
                    Err(format!(
                        "{}: your parser refused a sound frame: {e} (§7.11)",
                        frame_name(i, &truths[i])
                    )),
                );
                return r;
            }
        }
    }
    for step in 0..8 {
        if !r.judge(step, judge_fields(step, &truths, &answers)) {
            return r;
        }
    }

    let broken = broken_frames(&frames, &truths);
    let step = broken
        .iter()
        .find_map(|b| match run_student(|| parse(&b.bytes)) {
            Err(e) if e.starts_with("the code panicked") => Some(format!(
                "{}: your parser panicked instead of returning an Err: {e} (check a length \
                 before indexing; §7.11 \"Receive checks\")",
                b.what
            )),
            Err(_) => None,
            Ok(_) => Some(format!(
                "{}: your parser returned a Packet; it must be an Err: {} (§7.11 \"Receive \
                 checks\")",
                b.what, b.why
            )),
        })
        .map_or_else(
            || Ok(format!("{} broken frames refused", broken.len())),
            Err,
        );
    r.judge(8, step);
    r
}
