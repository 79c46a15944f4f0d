//! Lab 9: an Ethernet send and receive path (docs/labs/lab9.md). Through a working
//! command queue (lab 2's reference solution), the driver creates its function's
//! Ethernet send and receive queues (§15.2), enables reception with one multicast group
//! (§15.4), fills the receive ring, sends frames (§15.3), takes back the send
//! descriptors, and receives frames, handing their buffers back.
//!
//! The other end is VF 1 of the same lab device, driven by the guest driver's Ethernet
//! port (`rnic_driver::eth::EthPort`): it receives what the student's VF 0 sends, and
//! sends it unicast frames, a broadcast ARP request and two multicast frames, one for a
//! group VF 0 joined and one for a group it did not.

use std::time::Duration;

use rnic_abi::cmd::Opcode;
use rnic_abi::eth::{self, CreateEthQueueReq, EthDesc, QueryEthResp, SetEthReq};
use rnic_abi::{doorbell, regs, PAGE_SIZE};
use rnic_driver::eth::EthPort;
use rnic_driver::transport::DmaBuffer;
use zerocopy::FromBytes;

use crate::lab2::{call, Queue};
use crate::lab8::still_to_write;
use crate::nic::{wait_for, Access, LabDevice, Nic, Result};
use crate::report::{run_student, Report};
use crate::solutions::lab2 as cmdq;

/// Descriptors of each ring.
pub const ENTRIES: u32 = 16;
/// Bytes of each buffer: the longest frame of the default MTU (1518) fits.
pub const BUFFER: usize = 2048;
/// The MTU the function runs with (§15.4).
pub const MTU: u32 = eth::DEFAULT_MTU;
/// The multicast group the function joins (01:00:5e:00:00:fb, mDNS's).
pub const GROUP: [u8; 6] = [0x01, 0x00, 0x5e, 0x00, 0x00, 0xfb];
/// A multicast group the function does not join.
pub const OTHER_GROUP: [u8; 6] = [0x01, 0x00, 0x5e, 0x00, 0x00, 0x6a];
/// The doorbell page the queues' slots are asked in.
pub const DB_PAGE: u32 = 1;
/// The EtherType of the lab's frames (IEEE local experimental).
pub const ETHERTYPE: u16 = 0x88B5;

/// The memory the checker hands out for the queues.
pub struct Memory {
    /// Room for page lists (8 bytes each).
    pub lists: DmaBuffer,
    /// The send ring: [`ENTRIES`] descriptors of 16 bytes.
    pub tx_ring: DmaBuffer,
    /// [`ENTRIES`] send buffers of [`BUFFER`] bytes, buffer `i` at `i * BUFFER`.
    pub tx_buffers: DmaBuffer,
    /// The receive ring.
    pub rx_ring: DmaBuffer,
    /// [`ENTRIES`] receive buffers of [`BUFFER`] bytes.
    pub rx_buffers: DmaBuffer,
}

/// One Ethernet queue, as the driver keeps it.
pub struct EthQueue {
    /// The ring.
    pub ring: DmaBuffer,
    /// Its buffers.
    pub buffers: DmaBuffer,
    /// CREATE_ETH_QUEUE's answer: its number and doorbell slot.
    pub queue: eth::CreateEthQueueResp,
    /// Descriptors posted so far (free-running): the slot's posted count.
    pub posted: u32,
    /// Descriptors taken back so far (free-running).
    pub done: u32,
}

/// The function's Ethernet port: what [`Code::open`] made.
pub struct Port {
    /// The send queue.
    pub tx: EthQueue,
    /// The receive queue.
    pub rx: EthQueue,
}

/// The student's code.
#[derive(Clone, Copy)]
pub struct Code {
    /// Creates the send and receive queues over `Memory`, enables reception with MTU
    /// [`MTU`] and group [`GROUP`], and posts every receive buffer.
    pub open: fn(&dyn Nic, &mut dyn Queue, Memory) -> Result<Port>,
    /// Sends one frame (whole, in one descriptor).
    pub send: fn(&dyn Nic, &mut Port, &[u8]) -> Result<()>,
    /// Takes back the send descriptors the device is done with: how many.
    pub reclaim: fn(&mut Port) -> Result<u32>,
    /// Waits for the next received frame, returns it and posts its buffer again.
    pub recv: fn(&dyn Nic, &mut Port) -> Result<Vec<u8>>,
}

/// The steps, as docs/labs/lab9.md numbers them.
pub const STEPS: [&str; 8] = [
    "CREATE_ETH_QUEUE: a send and the receive queue",
    "SET_ETH: reception on, MTU, the group joined",
    "the receive ring filled before its posted count",
    "a frame: descriptor, posted count, kick",
    "the frame arrived intact at the peer",
    "send descriptors taken back, around the ring",
    "frames for the function, in order; others filtered",
    "receive buffers posted again, around the ring",
];

/// Title of the report.
pub const TITLE: &str = "lab 9: an Ethernet send and receive path";

/// The peer's function in the bench: VF 1.
const PEER: usize = 2;

/// One command sent: opcode, request body, outcome.
type Sent = (Opcode, Vec<u8>, Result<Vec<u8>>);

/// A command queue keeping what went through it.
struct Logged<'q> {
    inner: &'q mut dyn Queue,
    log: Vec<Sent>,
}

impl Queue for Logged<'_> {
    fn execute(
        &mut self,
        nic: &dyn Nic,
        opcode: Opcode,
        body: &[u8],
        resp_len: usize,
    ) -> Result<Vec<u8>> {
        let outcome = self.inner.execute(nic, opcode, body, resp_len);
        self.log.push((opcode, body.to_vec(), outcome.clone()));
        outcome
    }
}

/// A frame from `src` to `dst` of the lab's EtherType, carrying `text`.
pub fn frame(dst: [u8; 6], src: [u8; 6], text: &str) -> Vec<u8> {
    let mut f = Vec::with_capacity(64);
    f.extend_from_slice(&dst);
    f.extend_from_slice(&src);
    f.extend_from_slice(&ETHERTYPE.to_be_bytes());
    f.extend_from_slice(text.as_bytes());
    f.resize(f.len().max(60), 0);
    f
}

/// A broadcast ARP request from `src` (IPv4 `spa`) asking for `tpa`.
fn arp_request(src: [u8; 6], spa: [u8; 4], tpa: [u8; 4]) -> Vec<u8> {
    let mut f = Vec::with_capacity(60);
    f.extend_from_slice(&[0xff; 6]);
    f.extend_from_slice(&src);
    f.extend_from_slice(&0x0806u16.to_be_bytes());
    f.extend_from_slice(&[0, 1, 8, 0, 6, 4, 0, 1]);
    f.extend_from_slice(&src);
    f.extend_from_slice(&spa);
    f.extend_from_slice(&[0; 6]);
    f.extend_from_slice(&tpa);
    f.resize(60, 0);
    f
}

/// The descriptor at `index` (free-running) of a ring held in `bytes`.
fn desc(bytes: &[u8], index: u32) -> EthDesc {
    let at = (index % ENTRIES) as usize * size_of::<EthDesc>();
    EthDesc::read_from_bytes(&bytes[at..at + size_of::<EthDesc>()]).unwrap_or_default()
}

/// Runs `code` on a fresh lab device's VF 0, with VF 1 as the peer, and judges it.
pub fn check(code: Code) -> Report {
    let (bench, devs) = LabDevice::group(3, &[1], &[]);
    let dev = &devs[0];
    let mut r = Report::new(TITLE, &STEPS);
    let set_up = || -> Result<_> {
        let peer = rnic_driver::Device::open(Box::new(bench.transport(PEER)))
            .map_err(|e| format!("the peer: {e}"))?;
        let q = cmdq::start(dev)?;
        let page = |n: usize| dev.alloc_dma(n * PAGE_SIZE as usize);
        let buffers = BUFFER * ENTRIES as usize / PAGE_SIZE as usize;
        let mem = Memory {
            lists: page(1)?,
            tx_ring: page(1)?,
            tx_buffers: page(buffers)?,
            rx_ring: page(1)?,
            rx_buffers: page(buffers)?,
        };
        Ok((peer, q, mem))
    };
    let (peer_dev, mut q, mem) = match run_student(set_up) {
        Ok(s) => s,
        Err(e) => {
            r.judge(0, Err(format!("the lab's own set-up failed: {e}")));
            return r;
        }
    };
    let mut peer = match EthPort::open(&peer_dev, ENTRIES, MTU, eth::RX_ENABLE) {
        Ok(p) => p,
        Err(e) => {
            r.judge(0, Err(format!("the lab's peer failed: {e}")));
            return r;
        }
    };
    let macs = call::<QueryEthResp>(&mut q, dev, Opcode::QueryEth, &[]).and_then(|me| {
        rnic_driver::eth::query(&peer_dev)
            .map(|p| (me.mac, p.mac))
            .map_err(|e| format!("the peer: {e}"))
    });
    let (my_mac, peer_mac) = match macs {
        Ok(m) => m,
        Err(e) => {
            r.judge(0, Err(format!("the lab's QUERY_ETH: {e}")));
            return r;
        }
    };
    let (rx_ring, tx_ring) = (mem.rx_ring.device_addr(0), mem.tx_ring.device_addr(0));
    let (tx_buffers, tx_len) = (mem.tx_buffers.device_addr(0), mem.tx_buffers.len());
    let rx_buffers = (mem.rx_buffers.device_addr(0), mem.rx_buffers.len());
    dev.watch("rx ring", rx_ring, PAGE_SIZE as usize);
    dev.watch("tx ring", tx_ring, PAGE_SIZE as usize);
    dev.watch("tx buffers", tx_buffers, tx_len);
    dev.idle();
    dev.clear_trace();

    // 1-3: open.
    let mut logged = Logged {
        inner: &mut q,
        log: Vec::new(),
    };
    let opened = run_student(|| (code.open)(dev, &mut logged, mem));
    let log = logged.log;
    let trace = dev.trace();
    let step = judge_queues(&log);
    if let Err(e) = &step {
        if let Err(o) = &opened {
            if still_to_write(o, 1) {
                r.stopped(o.clone());
                return r;
            }
        }
        r.judge(0, Err(e.clone()));
        return r;
    }
    r.judge(0, step);
    // Code stopped at a later step's todo!() is judged up to it.
    let todo = |step: usize| match &opened {
        Err(o) if still_to_write(o, step) => Some(o.clone()),
        _ => None,
    };
    if let Some(e) = todo(2) {
        r.judge(1, Err(e));
        return r;
    }
    if !r.judge(1, judge_set_eth(&log)) {
        return r;
    }
    if let Some(e) = todo(3) {
        r.judge(2, Err(e));
        return r;
    }
    let mut port = match opened {
        Ok(p) => p,
        Err(e) => {
            r.judge(2, Err(e));
            return r;
        }
    };
    if !r.judge(2, judge_rx_filled(&trace, &port, rx_buffers)) {
        return r;
    }

    // 4-5: one frame to the peer.
    let first = frame(peer_mac, my_mac, "lab 9: frame 0 from VF 0");
    dev.idle();
    dev.clear_trace();
    let sent = run_student(|| (code.send)(dev, &mut port, &first));
    let step = sent.and_then(|()| judge_tx(&dev.trace(), &port, 1, &first, tx_buffers));
    if let Err(e) = step {
        if e.contains("still to write") {
            r.stopped(e);
        } else {
            r.judge(3, Err(e));
        }
        return r;
    }
    r.judge(
        3,
        Ok("descriptor 0, posted count 1, NOTIFY_REQUEST read".into()),
    );
    let got = run_student(|| peer_frames(dev, &mut peer, 1));
    let step = match got {
        Ok(f) if f[0] == first => Ok(format!("{} bytes, intact", first.len())),
        Ok(f) => Err(format!(
            "the peer received {} bytes that are not the frame sent (§15.3)",
            f[0].len()
        )),
        Err(e) => Err(format!(
            "the frame did not reach the peer: {e} (§15.3: descriptor addr, len, flags 0)"
        )),
    };
    if !r.judge(4, step) {
        return r;
    }

    // 6: the first descriptor back, then 24 frames in batches of 4, around the ring.
    let step = run_student(|| {
        let back = (code.reclaim)(&mut port)?;
        if back != 1 {
            return Err(format!(
                "the first reclaim took back {back} descriptors; the device had completed 1: \
                 DESC_DONE is set in its status (§15.2 \"Descriptors\")"
            ));
        }
        for batch in 0..6 {
            let frames: Vec<Vec<u8>> = (0..4)
                .map(|i| {
                    frame(
                        peer_mac,
                        my_mac,
                        &format!("lab 9: frame {} from VF 0", 1 + batch * 4 + i),
                    )
                })
                .collect();
            for f in &frames {
                (code.send)(dev, &mut port, f)?;
            }
            let got = peer_frames(dev, &mut peer, 4)?;
            if got != frames {
                return Err(format!(
                    "frames {}-{} did not reach the peer as sent",
                    1 + batch * 4,
                    4 + batch * 4
                ));
            }
            let back = (code.reclaim)(&mut port)?;
            if back != 4 {
                return Err(format!(
                    "after frames {}-{} were sent, reclaim took back {back} descriptors, not 4 \
                     (§15.2 \"Descriptors\")",
                    1 + batch * 4,
                    4 + batch * 4
                ));
            }
        }
        if port.tx.done != 25 || port.tx.posted != 25 {
            return Err(format!(
                "the send queue's counts are posted {} and done {}, not 25 and 25",
                port.tx.posted, port.tx.done
            ));
        }
        Ok("25 frames through a ring of 16, each descriptor taken back once".to_string())
    });
    if !r.judge(5, step) {
        return r;
    }

    // 7: what the peer sends.
    let unicast: Vec<Vec<u8>> = (0..4)
        .map(|i| frame(my_mac, peer_mac, &format!("lab 9: frame {i} from VF 1")))
        .collect();
    let arp = arp_request(peer_mac, [10, 82, 0, 3], [10, 82, 0, 2]);
    let joined = frame(GROUP, peer_mac, "lab 9: for the group VF 0 joined");
    let other = frame(
        OTHER_GROUP,
        peer_mac,
        "lab 9: for a group VF 0 did not join",
    );
    // In groups: a broadcast or multicast frame goes through the switch, which floods
    // it, a unicast frame straight to its port (§15.1), so order holds within a group.
    let groups: [&[&Vec<u8>]; 4] = [
        &[&unicast[0], &unicast[1], &unicast[2]],
        &[&arp],
        &[&joined, &other],
        &[&unicast[3]],
    ];
    let names = [
        "unicast 0",
        "unicast 1",
        "unicast 2",
        "the broadcast ARP",
        "the joined group's",
        "unicast 3",
    ];
    let step = run_student(|| {
        let mut got = Vec::new();
        for group in groups {
            for f in group {
                peer.send(&[f])
                    .map_err(|e| format!("the lab's peer: {e}"))?;
            }
            for _ in group.iter().filter(|f| ***f != other) {
                got.push((code.recv)(dev, &mut port)?);
            }
        }
        Ok(got)
    })
    .and_then(|got| {
        let want = groups
            .iter()
            .flat_map(|g| g.iter())
            .filter(|f| ***f != other);
        for (i, (g, w)) in got.iter().zip(want).enumerate() {
            if g == *w {
                continue;
            }
            return Err(if *g == other {
                format!(
                    "frame {i} received is the one for a multicast group the function did not \
                     join: SET_ETH without RX_PROMISC or RX_ALLMULTI, with GROUP only (§15.4)"
                )
            } else {
                format!(
                    "frame {i} received ({} bytes) is not {}: take the frames in ring order, \
                     each of the length the device wrote into the descriptor (§15.2, §15.4)",
                    g.len(),
                    names[i]
                )
            });
        }
        let c = call::<QueryEthResp>(&mut q, dev, Opcode::QueryEth, &[])?.counters;
        if c.rx_filtered == 0 {
            return Err(
                "the other group's frame was not filtered (QUERY_ETH rx_filtered 0)".into(),
            );
        }
        Ok(format!(
            "unicast, broadcast ARP and the joined group in order; the other group filtered \
             (rx_filtered {})",
            c.rx_filtered
        ))
    });
    if !r.judge(6, step) {
        return r;
    }

    // 8: 24 more, in batches of 4: every buffer comes back to the ring.
    dev.clear_trace();
    let received = run_student(|| {
        for batch in 0..6 {
            let frames: Vec<Vec<u8>> = (0..4)
                .map(|i| {
                    frame(
                        my_mac,
                        peer_mac,
                        &format!("lab 9: frame {} from VF 1", 4 + batch * 4 + i),
                    )
                })
                .collect();
            for f in &frames {
                peer.send(&[f])
                    .map_err(|e| format!("the lab's peer: {e}"))?;
            }
            for (i, f) in frames.iter().enumerate() {
                let g = (code.recv)(dev, &mut port)?;
                if &g != f {
                    return Err(format!(
                        "frame {} from VF 1 arrived as {} other bytes",
                        4 + batch * 4 + i,
                        g.len()
                    ));
                }
            }
        }
        Ok(())
    });
    let counters = call::<QueryEthResp>(&mut q, dev, Opcode::QueryEth, &[]).map(|c| c.counters);
    let step = match (received, counters) {
        (_, Err(e)) => Err(format!("the lab's QUERY_ETH: {e}")),
        (received, Ok(c)) if c.rx_no_buffer != 0 => Err(format!(
            "{} frames found no buffer (rx_no_buffer): post each buffer again once its frame \
             is read, or the ring runs dry after {ENTRIES} frames (§15.4){}",
            c.rx_no_buffer,
            received
                .err()
                .map(|e| format!("; then {e}"))
                .unwrap_or_default()
        )),
        (Err(e), _) => Err(e),
        (Ok(()), _) => {
            let slot = port.rx.queue.doorbell;
            let at = doorbell::slot_offset(slot.page, slot.slot);
            let last = dev.trace().iter().rev().find_map(|a| match a {
                Access::DbWrite { offset, value, .. } if *offset == at => Some(*value),
                _ => None,
            });
            if last == Some(ENTRIES + 30) {
                Ok(format!("30 frames received; posted count {}", ENTRIES + 30))
            } else {
                Err(format!(
                    "the receive slot last held {last:?}; with every buffer posted again it \
                     holds {} ({ENTRIES} + 30 frames received) (§15.2)",
                    ENTRIES + 30
                ))
            }
        }
    };
    r.judge(7, step);
    drop(peer);
    r
}

/// Waits (pausing the device) until the peer has received `n` frames.
fn peer_frames(dev: &LabDevice, peer: &mut EthPort, n: usize) -> Result<Vec<Vec<u8>>> {
    let mut got = Vec::new();
    let outcome = wait_for(dev, "the peer's frames", || {
        while let Some(f) = peer
            .recv(Duration::ZERO)
            .map_err(|e| format!("the peer: {e}"))?
        {
            got.push(f);
        }
        Ok(got.len() >= n)
    });
    outcome
        .map(|()| got)
        .map_err(|e| format!("the peer did not receive {n} frames: {e}"))
}

/// Step 1: one send and one receive queue created.
fn judge_queues(log: &[Sent]) -> Result<String> {
    let creates: Vec<(CreateEthQueueReq, &Result<Vec<u8>>)> = log
        .iter()
        .filter(|(op, _, _)| *op == Opcode::CreateEthQueue)
        .filter_map(|(_, b, o)| CreateEthQueueReq::read_from_bytes(b).ok().map(|r| (r, o)))
        .collect();
    if let Some((req, Err(e))) = creates.iter().find(|(_, o)| o.is_err()) {
        return Err(format!(
            "CREATE_ETH_QUEUE of kind {} failed: {e} (§15.2: entries a power of two from 8 to \
             4096, the ring's page list, reserved 0)",
            req.kind
        ));
    }
    for (kind, name) in [(eth::KIND_TX, "send"), (eth::KIND_RX, "receive")] {
        match creates.iter().find(|(r, _)| r.kind == kind) {
            None => {
                return Err(format!(
                    "no {name} queue was created (CREATE_ETH_QUEUE kind {kind}, §15.2)"
                ))
            }
            Some((r, _)) if r.entries != ENTRIES || r.doorbell_page != DB_PAGE => {
                return Err(format!(
                    "the {name} queue has {} entries in doorbell page {}; the lab's rings hold \
                     {ENTRIES} and its queues use page {DB_PAGE}",
                    r.entries, r.doorbell_page
                ))
            }
            Some(_) => {}
        }
    }
    Ok(format!("a send and a receive queue of {ENTRIES}"))
}

/// Step 2: SET_ETH with RX_ENABLE, the MTU and the group.
fn judge_set_eth(log: &[Sent]) -> Result<String> {
    let Some((_, body, outcome)) = log.iter().rev().find(|(op, _, _)| *op == Opcode::SetEth) else {
        return Err(
            "no SET_ETH was sent: without RX_ENABLE every frame that is not RoCEv2 is \
                    dropped (rx_disabled, §15.1, §15.4)"
                .into(),
        );
    };
    let Ok((req, rest)) = SetEthReq::read_from_prefix(body) else {
        return Err("SET_ETH's body is shorter than a SetEthReq".into());
    };
    if let Err(e) = outcome {
        return Err(format!("SET_ETH failed: {e} (§15.4)"));
    }
    if req.rx_mode & eth::RX_ENABLE == 0 {
        return Err(format!(
            "SET_ETH's rx_mode {:#x} lacks RX_ENABLE (§15.4)",
            req.rx_mode
        ));
    }
    if req.mtu != MTU {
        return Err(format!("SET_ETH's mtu is {}, not {MTU}", req.mtu));
    }
    if req.mc_count != 1 || rest.get(..6) != Some(&GROUP[..]) {
        return Err(format!(
            "SET_ETH names {} multicast addresses; the lab joins exactly GROUP, one MacEntry \
             after the SetEthReq (§15.4)",
            req.mc_count
        ));
    }
    Ok("RX_ENABLE, MTU 1500, GROUP".into())
}

/// Step 3: when the receive slot's posted count was stored, the descriptors it covers
/// name whole buffers, status 0.
fn judge_rx_filled(trace: &[Access], port: &Port, buffers: (u64, usize)) -> Result<String> {
    let slot = port.rx.queue.doorbell;
    let at = doorbell::slot_offset(slot.page, slot.slot);
    let Some((value, ring)) = trace.iter().find_map(|a| match a {
        Access::DbWrite {
            offset,
            value,
            watched,
        } if *offset == at => Some((*value, &watched[0].1)),
        _ => None,
    }) else {
        return Err(format!(
            "the receive queue's slot (BAR2 {at:#x}, from CREATE_ETH_QUEUE's doorbell) was never \
             written: the device takes a buffer only once its posted count covers it (§15.2)"
        ));
    };
    if value == 0 || value > ENTRIES {
        return Err(format!(
            "the receive slot's posted count is {value}: it counts descriptors posted, at most \
             {ENTRIES} ahead of the device (§15.2)"
        ));
    }
    for i in 0..value {
        let d = desc(ring, i);
        let inside =
            d.addr >= buffers.0 && d.addr + u64::from(d.len) <= buffers.0 + buffers.1 as u64;
        if d.len == 0 && d.addr == 0 {
            return Err(format!(
                "the posted count {value} was stored while receive descriptor {i} was still \
                 empty: write the descriptors first (§15.2, §4.4)"
            ));
        }
        if !inside || (d.len as usize) < eth::max_frame(MTU) as usize || d.status != 0 {
            return Err(format!(
                "receive descriptor {i} is {d:?}: addr a receive buffer, len its size (at least \
                 {}, the longest frame of the MTU), status 0 (§15.2 \"Descriptors\", §15.4)",
                eth::max_frame(MTU)
            ));
        }
    }
    Ok(format!("{value} buffers posted"))
}

/// Step 4: the send descriptor and its buffer when the posted count was stored, then the
/// notification protocol.
fn judge_tx(trace: &[Access], port: &Port, count: u32, frame: &[u8], base: u64) -> Result<()> {
    let slot = port.tx.queue.doorbell;
    let at = doorbell::slot_offset(slot.page, slot.slot);
    let Some((i, ring, buffers)) = trace.iter().enumerate().find_map(|(i, a)| match a {
        Access::DbWrite {
            offset,
            value,
            watched,
        } if *offset == at && *value == count => Some((i, &watched[1].1, &watched[2].1)),
        _ => None,
    }) else {
        return Err(format!(
            "the send queue's slot (BAR2 {at:#x}) was not written with the posted count \
             {count} (§15.2)"
        ));
    };
    let d = desc(ring, count - 1);
    let off = d.addr.wrapping_sub(base) as usize;
    let held = buffers.get(off..off + frame.len());
    if d.addr == 0 && d.len == 0 {
        return Err(format!(
            "the posted count {count} was stored while send descriptor {} was still empty: \
             write the descriptor first (§15.2, §4.4)",
            count - 1
        ));
    }
    if d.len as usize != frame.len() || held != Some(frame) || d.flags != 0 || d.status != 0 {
        return Err(format!(
            "send descriptor {} is {d:?} when its count was stored: addr the buffer holding the \
             frame ({} bytes), len the frame's length, flags 0 (one descriptor: no TX_MORE), \
             status 0 (§15.2 \"Descriptors\", §15.3)",
            count - 1,
            frame.len()
        ));
    }
    let notify = u64::from(slot.page) * PAGE_SIZE + doorbell::NOTIFY_REQUEST;
    let asked = trace[i..].iter().find_map(|a| match a {
        Access::DbRead { offset, value } if *offset == notify => Some(*value),
        _ => None,
    });
    let kicked = trace[i..].iter().any(|a| {
        matches!(a, Access::RegWrite { offset, value } if *offset == regs::DOORBELL_KICK && *value == slot.page)
    });
    match asked {
        None => Err(format!(
            "NOTIFY_REQUEST of page {} was not read after the posted count: the device may be \
             asleep (§15.2, §4.4)",
            slot.page
        )),
        Some(n) if n != 0 && !kicked => Err(format!(
            "NOTIFY_REQUEST was set and no kick followed: write {} to DOORBELL_KICK (§15.2, §4.4)",
            slot.page
        )),
        Some(_) => Ok(()),
    }
}
