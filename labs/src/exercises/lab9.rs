//! Lab 9, your solution: the Ethernet queues of one function (docs/labs/lab9.md).
//! `cargo run -p rnic-labs -- check 9` judges it step by step.

#![allow(unreachable_code, unused_variables, unused_imports)]
// The skeleton compiles as shipped: what is still to write is `todo!()`.
#![allow(clippy::diverging_sub_expression)]

use rnic_abi::cmd::Opcode;
use rnic_abi::eth::{self, CreateEthQueueReq, EthDesc, MacEntry, SetEthReq};
use rnic_abi::verbs::PageList;
use rnic_abi::{doorbell, regs, PAGE_SIZE};
use zerocopy::IntoBytes;

use crate::lab2::{call, Queue};
use crate::lab9::{EthQueue, Memory, Port, BUFFER, DB_PAGE, ENTRIES, GROUP, MTU};
use crate::nic::{wait_for, Nic, Result};

/// Creates the queues over `m`, enables reception and fills the receive ring.
pub fn open(nic: &dyn Nic, q: &mut dyn Queue, m: Memory) -> Result<Port> {
    // Step 1 (§15.2, §7.3): CREATE_ETH_QUEUE twice, kind eth::KIND_TX over m.tx_ring and
    // eth::KIND_RX over m.rx_ring: ENTRIES descriptors, doorbell page DB_PAGE, no vector
    // (regs::NO_VECTOR as u16), the ring as a one-page PageList (its address written in
    // m.lists). Keep each answer in an EthQueue with its ring and buffers.
    todo!("step 1: the two queues");

    // Step 2 (§15.4): SET_ETH: a SetEthReq (MTU, rx_mode eth::RX_ENABLE, no event
    // vector, mc_count 1) followed by one MacEntry for GROUP.
    todo!("step 2: SET_ETH");

    // Step 3 (§15.2, §15.4): every receive descriptor (addr of buffer i at i * BUFFER,
    // len BUFFER, flags 0, status 0), then the posted count in the receive queue's slot
    // (doorbell::slot_offset of its doorbell; no RUNG_BITMAP bit), then NOTIFY_REQUEST
    // of the page and a kick if it is set (§4.4).
    todo!("step 3: the receive ring")
}

/// Sends `frame` in one descriptor.
pub fn send(nic: &dyn Nic, p: &mut Port, frame: &[u8]) -> Result<()> {
    // Step 4 (§15.2, §15.3): the frame into buffer posted % ENTRIES of p.tx, its
    // descriptor (addr, len the frame's, flags 0, status 0) at posted % ENTRIES, the new
    // posted count into the slot, NOTIFY_REQUEST, the kick.
    todo!("step 4: the send descriptor and its doorbell")
}

/// Takes back the send descriptors the device is done with; returns how many.
pub fn reclaim(p: &mut Port) -> Result<u32> {
    // Step 6 (§15.2 "Descriptors"): from p.tx.done on, while descriptors have DESC_DONE
    // in their status (the u16 at +0x0E, loaded with load_u16), count them; an error in
    // bits 15:8 is the frame's (§15.3).
    todo!("step 6: reclaim")
}

/// Waits for the next received frame, returns it and posts its buffer again.
pub fn recv(nic: &dyn Nic, p: &mut Port) -> Result<Vec<u8>> {
    // Step 7 (§15.4): wait (wait_for) for DESC_DONE in descriptor p.rx.done; the frame is
    // the first `len` bytes (the u32 at +0x08, which the device wrote) of its buffer.
    todo!("step 7: the next frame");

    // Step 8 (§15.2): post that buffer again at descriptor p.rx.posted, store the count,
    // kick if asked.
    todo!("step 8: the buffer back to the ring")
}
