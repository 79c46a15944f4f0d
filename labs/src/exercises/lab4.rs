//! Lab 4, your solution: post an RDMA WRITE and poll its completion by hand
//! (docs/labs/lab4.md). `cargo run -p rnic-labs -- check 4` judges it step by step.

#![allow(unreachable_code, unused_variables, unused_imports)]
// The skeleton compiles as shipped: what is still to write is `todo!()`.
#![allow(clippy::diverging_sub_expression)]

use rnic_abi::verbs::{self as v};
use rnic_abi::{doorbell, regs, PAGE_SIZE};
use zerocopy::{FromBytes, IntoBytes};

use crate::lab3::ENTRIES;
use crate::lab4::{Setup, Write};
use crate::nic::{wait_for, Nic, Result};

/// Posts `w` on QP 0 (`s.objects.qps[0]`); `s.sq_posted` counts the WQEs posted so far.
pub fn post(nic: &dyn Nic, s: &mut Setup, w: &Write) -> Result<()> {
    // Step 1 (§7.6 "Send WQE"): a v::SendWqe (RDMA_WRITE, SIGNALED, one SGE, the
    // destination as remote_addr = iova + w.dst with the MR's rkey) and its v::Sge
    // (iova + w.src, w.len, the lkey) at entry s.sq_posted % ENTRIES of s.memory.sq[0];
    // entries are v::sq_stride(1, 0) bytes apart.
    todo!("step 1: the WQE");

    // Step 2 (§7.5 "Posting"): the new posted count into the send queue's slot
    // (doorbell::slot_offset(page, slot) of qps[0].sq_doorbell), then the slot's bit in
    // the page's RUNG_BITMAP.
    todo!("step 2: the count and the rung bit");

    // Step 3 (§4.4): if the page's NOTIFY_REQUEST is set, write the page number to
    // regs::DOORBELL_KICK.
    todo!("step 3: the kick")
}

/// Waits for the next CQE of s.memory.cq_ring, returns it and hands it back;
/// s.cq_consumed counts the CQEs consumed so far.
pub fn poll(nic: &dyn Nic, s: &mut Setup) -> Result<v::Cqe> {
    // Step 5 (§7.6 "CQE", "Ownership phase"): wait (wait_for) until the owner bit of
    // entry s.cq_consumed % ENTRIES is v::owner_phase(s.cq_consumed, ENTRIES); read it.
    todo!("step 5: the CQE");

    // Step 6 (§7.5 "Consuming"): store the new consumer index in the CQ's slot.
    todo!("step 6: the consumer index")
}
