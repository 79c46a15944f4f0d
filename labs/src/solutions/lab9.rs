//! Lab 9, the reference solution: the Ethernet queues of one function.

use rnic_abi::cmd::Opcode;
use rnic_abi::eth::{self, CreateEthQueueReq, EthDesc, MacEntry, SetEthReq};
use rnic_abi::verbs::PageList;
use rnic_abi::{doorbell, regs, PAGE_SIZE};
use rnic_driver::transport::DmaBuffer;
use zerocopy::IntoBytes;

use crate::lab2::{call, Queue};
use crate::lab9::{EthQueue, Memory, Port, BUFFER, DB_PAGE, ENTRIES, GROUP, MTU};
use crate::nic::{wait_for, Nic, Result};

/// Bytes of a descriptor.
const DESC: usize = size_of::<EthDesc>();

/// Byte offset in the ring of descriptor `index` (free-running).
fn at(index: u32) -> usize {
    (index % ENTRIES) as usize * DESC
}

/// Writes descriptor `index`: everything but `status`, then `status` 0 (§15.2).
fn write_desc(q: &EthQueue, index: u32, d: EthDesc) {
    q.ring.write(at(index), &d.as_bytes()[..DESC - 2]);
    q.ring.store_u16(at(index) + DESC - 2, 0);
}

/// The posted count into the queue's slot, then the notification protocol (§15.2, §4.4):
/// no RUNG_BITMAP bit for an Ethernet queue.
fn ring_doorbell(nic: &dyn Nic, q: &EthQueue) -> Result<()> {
    let slot = q.queue.doorbell;
    nic.db_write(doorbell::slot_offset(slot.page, slot.slot), q.posted);
    if nic.db_read(u64::from(slot.page) * PAGE_SIZE + doorbell::NOTIFY_REQUEST) != 0 {
        nic.reg_write(regs::DOORBELL_KICK, slot.page)?;
    }
    Ok(())
}

/// Posts receive buffer `posted % ENTRIES` at descriptor `posted` (§15.4).
fn post_rx(q: &mut EthQueue) {
    let index = q.posted;
    let addr = q.buffers.device_addr((index % ENTRIES) as usize * BUFFER);
    write_desc(
        q,
        index,
        EthDesc {
            addr,
            len: BUFFER as u32,
            flags: 0,
            status: 0,
        },
    );
    q.posted = q.posted.wrapping_add(1);
}

/// Steps 1-3 (§15.2, §15.4): the queues, reception with the group, the receive ring
/// filled and its count stored.
pub fn open(nic: &dyn Nic, q: &mut dyn Queue, m: Memory) -> Result<Port> {
    let mut create = |kind: u8, index: usize, ring: DmaBuffer, buffers: DmaBuffer| {
        m.lists.write(8 * index, &ring.device_addr(0).to_le_bytes());
        let req = CreateEthQueueReq {
            kind,
            reserved0: 0,
            msix_vector: regs::NO_VECTOR as u16, // polled
            entries: ENTRIES,
            doorbell_page: DB_PAGE,
            moderation_usecs: 0,
            ring: PageList::flat(m.lists.device_addr(8 * index), 1),
        };
        let queue = call(q, nic, Opcode::CreateEthQueue, req.as_bytes())?;
        Ok::<_, String>(EthQueue {
            ring,
            buffers,
            queue,
            posted: 0,
            done: 0,
        })
    };
    let tx = create(eth::KIND_TX, 0, m.tx_ring, m.tx_buffers)?;
    let mut rx = create(eth::KIND_RX, 1, m.rx_ring, m.rx_buffers)?;
    let set = SetEthReq {
        mtu: MTU,
        rx_mode: eth::RX_ENABLE,
        event_vector: regs::NO_VECTOR as u16,
        reserved: 0,
        mc_count: 1,
    };
    let mut body = set.as_bytes().to_vec();
    body.extend_from_slice(
        MacEntry {
            mac: GROUP,
            reserved: 0,
        }
        .as_bytes(),
    );
    call::<()>(q, nic, Opcode::SetEth, &body)?;
    for _ in 0..ENTRIES {
        post_rx(&mut rx);
    }
    ring_doorbell(nic, &rx)?;
    Ok(Port { tx, rx })
}

/// Step 4 (§15.2, §15.3): the frame into the next buffer, its descriptor, the count, the
/// kick.
pub fn send(nic: &dyn Nic, p: &mut Port, frame: &[u8]) -> Result<()> {
    let q = &mut p.tx;
    if q.posted.wrapping_sub(q.done) == ENTRIES {
        return Err("the send ring is full: reclaim first".into());
    }
    if frame.len() > BUFFER {
        return Err(format!("a frame of {} bytes", frame.len()));
    }
    let index = q.posted;
    let buf = (index % ENTRIES) as usize * BUFFER;
    q.buffers.write(buf, frame);
    write_desc(
        q,
        index,
        EthDesc {
            addr: q.buffers.device_addr(buf),
            len: frame.len() as u32,
            flags: 0,
            status: 0,
        },
    );
    q.posted = q.posted.wrapping_add(1);
    ring_doorbell(nic, q)
}

/// Step 6 (§15.2 "Descriptors", §15.3): the send descriptors with DESC_DONE, in order.
pub fn reclaim(p: &mut Port) -> Result<u32> {
    let q = &mut p.tx;
    let mut n = 0;
    while q.done != q.posted {
        let status = q.ring.load_u16(at(q.done) + DESC - 2);
        if status & eth::DESC_DONE == 0 {
            break;
        }
        let error = (status >> eth::DESC_ERROR_SHIFT) as u8;
        if error != eth::desc_error::NONE {
            return Err(format!("send descriptor {}: error {error} (§15.3)", q.done));
        }
        q.done = q.done.wrapping_add(1);
        n += 1;
    }
    Ok(n)
}

/// Steps 7-8 (§15.4): the next frame once DESC_DONE shows, of the length the device
/// wrote; its buffer posted again.
pub fn recv(nic: &dyn Nic, p: &mut Port) -> Result<Vec<u8>> {
    let q = &mut p.rx;
    let index = q.done;
    let ring = &q.ring;
    wait_for(nic, "a frame", || {
        Ok(ring.load_u16(at(index) + DESC - 2) & eth::DESC_DONE != 0)
    })?;
    let status = q.ring.load_u16(at(index) + DESC - 2);
    let error = (status >> eth::DESC_ERROR_SHIFT) as u8;
    if error != eth::desc_error::NONE {
        return Err(format!("receive descriptor {index}: error {error}"));
    }
    let len = q.ring.load_u32(at(index) + 8) as usize;
    let mut frame = vec![0u8; len.min(BUFFER)];
    q.buffers
        .read((index % ENTRIES) as usize * BUFFER, &mut frame);
    q.done = q.done.wrapping_add(1);
    post_rx(q);
    ring_doorbell(nic, q)?;
    Ok(frame)
}
