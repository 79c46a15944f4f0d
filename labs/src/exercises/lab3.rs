//! Lab 3, your solution: the objects, and each QP from RESET to RTS
//! (docs/labs/lab3.md). `cargo run -p rnic-labs -- check 3` judges it step by step.

#![allow(unreachable_code, unused_variables, unused_imports, dead_code)]
// The skeleton compiles as shipped: what is still to write is `todo!()`.
#![allow(clippy::diverging_sub_expression)]

use rnic_abi::cmd::Opcode;
use rnic_abi::regs;
use rnic_abi::verbs::{self as v, attr, PageList, QpState};
use rnic_driver::transport::DmaBuffer;
use zerocopy::IntoBytes;

use crate::lab2::{call, Queue};
use crate::lab3::{Memory, Objects, DB_PAGE, ENTRIES};
use crate::nic::{Nic, Result};

/// A one-page page list (§7.3) for `buf`, kept in entry `index` of `lists`.
fn page_list(lists: &DmaBuffer, index: usize, buf: &DmaBuffer) -> PageList {
    lists.write(8 * index, &buf.device_addr(0).to_le_bytes());
    PageList::flat(lists.device_addr(8 * index), 1)
}

/// Creates the objects (§7.4, §7.15 steps 2-4). Send each command with
/// `call::<ResponseType>(q, nic, Opcode::X, request.as_bytes())`.
pub fn create(nic: &dyn Nic, q: &mut dyn Queue, m: &Memory) -> Result<Objects> {
    // Step 1: CREATE_EQ (v::CreateEqReq over m.eq_ring, ENTRIES entries, vector
    // regs::NO_VECTOR, doorbell page DB_PAGE), then ALLOC_PD (no request body).
    let eq: v::CreateEqResp = todo!("step 1: CREATE_EQ and ALLOC_PD");
    let pdn: u32 = todo!("step 1: ALLOC_PD");

    // Step 2: REG_MR of m.mr_buf's page: its iova is m.mr_buf.device_addr(0); the peer
    // will write into it.
    let iova = m.mr_buf.device_addr(0);
    let mr: v::RegMrResp = todo!("step 2: REG_MR");

    // Step 3: CREATE_CQ over m.cq_ring.
    let cq: v::CreateCqResp = todo!("step 3: CREATE_CQ");

    // Step 4: two RC QPs (v::QPT_RC) sending and receiving on the CQ, over m.sq[i] and
    // m.rq[i]; ENTRIES send WQEs of one SGE, one receive WQE.
    let qps: [v::CreateQpResp; 2] = todo!("step 4: CREATE_QP, twice");

    Ok(Objects {
        eq,
        pdn,
        mr,
        iova,
        cq,
        qps,
    })
}

/// Moves QP `qpn` RESET -> INIT -> RTR -> RTS, aimed at QP `peer` at `gid` (§7.8,
/// §7.15 steps 5-7): three MODIFY_QP commands (v::ModifyQpReq), each with STATE and the
/// attributes §7.8's table requires for its transition.
pub fn connect(nic: &dyn Nic, q: &mut dyn Queue, qpn: u32, peer: u32, gid: [u8; 16]) -> Result<()> {
    todo!("step 5: RESET -> INIT, then step 6: INIT -> RTR, then step 7: RTR -> RTS")
}
