//! Live migration of an RC queue pair from one function to another (`MIGRATE_QP`,
//! docs/hardware-interface.md "Connection migration").
//!
//! The PF's admin queue calls [`migrate_qp`] between function turns of the engine, so
//! no function is in the middle of a packet: the QP is quiesced at a packet boundary by
//! construction, and its timers (retransmit and RNR deadlines) simply carry over. The
//! command locks the two functions (in index order, so two migrations never deadlock),
//! checks everything (the QP and what moves with it, room and quota on the destination,
//! and that every page it reaches is the same memory through the destination's DMA
//! mappings), and only then moves anything: it either happens whole or changes nothing.

use std::sync::Arc;

use rnic_abi::cmd::Status;
use rnic_abi::migration::{MigrateQpReq, MigrateQpResp};

use crate::commands::Response;
use crate::fabric::switch::Switch;
use crate::function::Function;
use crate::rdma::env::Env;
use crate::resources::{Resource, ResourcePool};

/// Moves QP `req.qpn` with its transport state and the objects it uses from member
/// `req.from` to member `req.to` (member `n` is `functions[n]` and port `n` of `switch`);
/// all or nothing. Errors:
/// - `BadParam`: reserved fields or flags set, `from == to`, a doorbell page out of range;
/// - `NotFound`: no such member, no such QP on `from`, a named CQ not on `to`;
/// - `BadState`: a member is a disabled VF, or a named CQ is in error;
/// - `Busy`: another QP of `from` uses the QP's PD or a CQ that would move, or the QPN or
///   an MR key is in use on `to`;
/// - `NoResources`: `to` lacks room (limits, doorbell slots) or quota;
/// - `DmaError`: a page the QP reaches does not map to the same memory on `to` (the
///   syndrome is its page frame number, `address >> 12`, truncated to 32 bits).
pub fn migrate_qp(
    functions: &[Arc<Function>],
    switch: &mut Switch,
    pool: &ResourcePool,
    req: &MigrateQpReq,
) -> Result<MigrateQpResp, Response> {
    if req.flags != 0 || req.reserved != 0 {
        return Err(Response::error(Status::BadParam, req.flags | req.reserved));
    }
    let (from, to) = (req.from as usize, req.to as usize);
    if from == to {
        return Err(Response::error(Status::BadParam, req.to));
    }
    let member = |i: usize, id: u32| {
        functions
            .get(i)
            .ok_or(Response::error(Status::NotFound, id))
    };
    let (fa, fb) = (member(from, req.from)?, member(to, req.to)?);
    // A disabled VF holds nothing and may take nothing.
    for (f, id) in [(fa, req.from), (fb, req.to)] {
        if !f.is_enabled() {
            return Err(Response::error(Status::BadState, id));
        }
    }
    // Index order, whichever way the QP moves.
    let (mut a, mut b) = if from < to {
        let a = fa.lock_rdma();
        (a, fb.lock_rdma())
    } else {
        let b = fb.lock_rdma();
        (fa.lock_rdma(), b)
    };

    let plan = a.plan_departure(req.qpn, req.send_cq, req.recv_cq, fa.endpoint())?;
    b.check_arrival(&plan, req.doorbell_page)?;
    // Same memory: every page through both functions' mappings is the same page of the
    // same file (the two VFs belong to one guest, whose RAM QEMU maps into both).
    let (here, there) = (
        fa.dma().backings(&plan.pages),
        fb.dma().backings(&plan.pages),
    );
    let differs = plan
        .pages
        .iter()
        .zip(here.iter().zip(&there))
        .find(|(_, (h, t))| h.is_none() || h != t);
    if let Some((&(addr, _), _)) = differs {
        log::info!(
            "migrate qp {:#x}: page {addr:#x} is not the same memory on member {to}",
            req.qpn
        );
        return Err(Response::error(Status::DmaError, (addr >> 12) as u32));
    }
    // Doorbell pages are charged by the RDMA state as slots come and go; check the
    // destination's room for one more page before anything moves.
    if b.doorbell_page_unused(req.doorbell_page) {
        let (quota, usage) = (pool.quota(to), pool.usage(to));
        if req.doorbell_page >= quota.doorbell_pages || usage.doorbell_pages >= quota.doorbell_pages
        {
            return Err(Response::error(
                Status::NoResources,
                Resource::DoorbellPages.index(),
            ));
        }
    }
    // The last check, and the first change: the quota moves atomically or not at all.
    let usage = [
        (Resource::Qp, 1),
        (Resource::Pd, 1),
        (Resource::Mr, plan.mr_keys.len() as u64),
        (Resource::MrPages, plan.mr_pages),
        (Resource::Cq, plan.moving_cqs.len() as u64),
    ];
    pool.transfer(from, to, &usage)
        .map_err(|status| Response::error(status, 0))?;

    let (ra, wa) = (fa.dma().readable(), fa.dma().writable());
    let env_a = Env {
        r: &ra,
        w: &wa,
        doorbells: fa.doorbells(),
    };
    let (rb, wb) = (fb.dma().readable(), fb.dma().writable());
    let env_b = Env {
        r: &rb,
        w: &wb,
        doorbells: fb.doorbells(),
    };
    let Some(departed) = a.depart(&plan, &env_a) else {
        // plan_departure found the QP under this same lock.
        return Err(Response::error(Status::Internal, req.qpn));
    };
    let home = (plan.home != fb.endpoint()).then_some(plan.home);
    let resp = b.arrive(&plan, departed, req.doorbell_page, home, &env_b);
    // Frames for the QP's address go where it is now, including those already queued.
    switch.steer(plan.home.ip, req.qpn, to);
    drop((a, b));
    // Their events are posted; the engine signals each EQ's vector on its next turn.
    fa.wake();
    fb.wake();
    log::info!(
        "migrated qp {:#x} from member {from} to member {to}: pd {}, cqs {}/{}, {} MRs and {} CQs moved",
        resp.qpn,
        resp.pdn,
        resp.send_cq,
        resp.recv_cq,
        resp.mrs_moved,
        resp.cqs_moved
    );
    Ok(resp)
}
