//! Lab 3, the reference solution: the objects, and each QP from RESET to RTS.

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

/// Steps 1-4 (§7.4, §7.15 steps 2-4): EQ, PD, MR, CQ, two RC QPs.
pub fn create(nic: &dyn Nic, q: &mut dyn Queue, m: &Memory) -> Result<Objects> {
    create_with_eq_vector(nic, q, m, regs::NO_VECTOR) // the EQ is polled
}

/// [`create`], with the EQ's events signalled on MSI-X `vector` (lab 5).
pub fn create_with_eq_vector(
    nic: &dyn Nic,
    q: &mut dyn Queue,
    m: &Memory,
    vector: u32,
) -> Result<Objects> {
    let eq = v::CreateEqReq {
        ring: page_list(&m.lists, 0, &m.eq_ring),
        entries: ENTRIES,
        vector,
        doorbell_page: DB_PAGE,
        reserved: 0,
    };
    let eq: v::CreateEqResp = call(q, nic, Opcode::CreateEq, eq.as_bytes())?;
    let pd: v::ObjectResp = call(q, nic, Opcode::AllocPd, &[])?;
    let iova = m.mr_buf.device_addr(0);
    let mr = v::RegMrReq {
        pdn: pd.handle,
        access: v::ACCESS_LOCAL_WRITE | v::ACCESS_REMOTE_WRITE,
        iova,
        length: rnic_abi::PAGE_SIZE,
        pages: page_list(&m.lists, 1, &m.mr_buf),
    };
    let mr: v::RegMrResp = call(q, nic, Opcode::RegMr, mr.as_bytes())?;
    let cq = v::CreateCqReq {
        ring: page_list(&m.lists, 2, &m.cq_ring),
        entries: ENTRIES,
        doorbell_page: DB_PAGE,
    };
    let cq: v::CreateCqResp = call(q, nic, Opcode::CreateCq, cq.as_bytes())?;
    let mut qps = [v::CreateQpResp::default(); 2];
    for (i, qp) in qps.iter_mut().enumerate() {
        let req = v::CreateQpReq {
            pdn: pd.handle,
            send_cqn: cq.cqn,
            recv_cqn: cq.cqn,
            sq_entries: ENTRIES,
            rq_entries: 1,
            max_send_sge: 1,
            max_recv_sge: 1,
            doorbell_page: DB_PAGE,
            qp_type: v::QPT_RC,
            sq: page_list(&m.lists, 3 + 2 * i, &m.sq[i]),
            rq: page_list(&m.lists, 4 + 2 * i, &m.rq[i]),
            ..Default::default()
        };
        *qp = call(q, nic, Opcode::CreateQp, req.as_bytes())?;
    }
    Ok(Objects {
        eq,
        pdn: pd.handle,
        mr,
        iova,
        cq,
        qps,
    })
}

/// Steps 5-7 (§7.8, §7.15 steps 5-7): RESET -> INIT -> RTR -> RTS, with the masks of
/// §7.8's "Required" column; one `QpAttr` serves all three, as MODIFY_QP reads only the
/// fields its mask names.
pub fn connect(nic: &dyn Nic, q: &mut dyn Queue, qpn: u32, peer: u32, gid: [u8; 16]) -> Result<()> {
    connect_with_timeout(nic, q, qpn, peer, gid, 14)
}

/// [`connect`] with the ACK timeout code `timeout` (4.096 µs × 2^timeout; lab 7).
pub fn connect_with_timeout(
    nic: &dyn Nic,
    q: &mut dyn Queue,
    qpn: u32,
    peer: u32,
    gid: [u8; 16],
    timeout: u8,
) -> Result<()> {
    let mut attr = v::QpAttr {
        port_num: 1,
        qp_access_flags: v::ACCESS_REMOTE_WRITE,
        dgid: gid,
        hop_limit: 64,
        path_mtu: v::mtu::MTU_1024,
        dest_qp_num: peer,
        max_dest_rd_atomic: 1,
        min_rnr_timer: 12,
        timeout,
        retry_cnt: 7,
        rnr_retry: 7,
        max_rd_atomic: 1,
        ..Default::default()
    };
    for (state, attr_mask) in [
        (
            QpState::Init,
            attr::STATE | attr::PKEY_INDEX | attr::PORT | attr::ACCESS_FLAGS,
        ),
        (
            QpState::Rtr,
            attr::STATE
                | attr::AV
                | attr::PATH_MTU
                | attr::DEST_QPN
                | attr::RQ_PSN
                | attr::MAX_DEST_RD_ATOMIC
                | attr::MIN_RNR_TIMER,
        ),
        (
            QpState::Rts,
            attr::STATE
                | attr::SQ_PSN
                | attr::TIMEOUT
                | attr::RETRY_CNT
                | attr::RNR_RETRY
                | attr::MAX_QP_RD_ATOMIC,
        ),
    ] {
        attr.qp_state = state as u8;
        let req = v::ModifyQpReq {
            qpn,
            attr_mask,
            attr,
        };
        call::<()>(q, nic, Opcode::ModifyQp, req.as_bytes())?;
    }
    Ok(())
}
