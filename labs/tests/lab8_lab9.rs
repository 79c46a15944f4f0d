//! The checkers of labs 8 and 9, tested: the reference solutions pass every step, and
//! deliberately broken solutions fail at the step that is wrong, with the cause.

use rnic_abi::cmd::Opcode;
use rnic_abi::migration::{AdoptQpReq, AdoptQpResp, MigrateQpReq, MigrateQpResp};
use rnic_labs::lab2::{call, Queue};
use rnic_labs::lab8::{self, Admin, Mover};
use rnic_labs::nic::{Nic, Result};
use rnic_labs::report::{Report, Verdict};
use rnic_labs::solutions;
use zerocopy::{FromBytes, IntoBytes};

/// Asserts that `r` fails first at step `step` (1-based) with a cause containing `cause`.
fn fails_at(r: &Report, step: usize, cause: &str) {
    println!("{r}");
    let (at, why) = r.failure().expect("the report has a failure");
    assert_eq!(at, step, "failed at step {at}: {why}");
    assert!(
        why.contains(cause),
        "step {step}'s cause {why:?} does not say {cause:?}"
    );
    assert!(r.steps[step..]
        .iter()
        .all(|s| s.verdict == Verdict::NotReached));
}

/// The reference solution of lab 8.
const LAB8: lab8::Code = lab8::Code {
    migrate: solutions::lab8::migrate,
    depart: solutions::lab8::depart,
    adopt: solutions::lab8::adopt,
};

#[test]
fn lab8_reference_passes_every_step() {
    let r = lab8::check(LAB8);
    println!("{r}");
    assert!(r.passed(), "{r}");
    assert_eq!(r.steps.len(), lab8::STEPS.len());
}

#[test]
fn lab8_vf_numbers_for_member_ids_fail_step_1() {
    /// MIGRATE_QP with the VF numbers where member ids go: from 0 is the PF.
    fn migrate(admin: &mut dyn Admin, m: &Mover) -> Result<MigrateQpResp> {
        let req = MigrateQpReq {
            from: m.vfs[0],
            to: m.vfs[1],
            qpn: m.qpn,
            doorbell_page: m.page,
            ..Default::default()
        };
        let body = admin.command(Opcode::MigrateQp, req.as_bytes(), 32)?;
        MigrateQpResp::read_from_bytes(&body).map_err(|_| "answer".to_string())
    }
    let code = lab8::Code { migrate, ..LAB8 };
    fails_at(
        &lab8::check(code),
        1,
        "members are numbered 0 for the PF and n for VF n - 1",
    );
}

#[test]
fn lab8_ringing_the_old_function_after_qp_departed_fails_step_3() {
    /// Takes the event but keeps ringing VF 0.
    fn depart(nic: &dyn Nic, m: &mut Mover) -> Result<()> {
        solutions::lab8::depart(nic, m)?;
        m.at = Some(0);
        Ok(())
    }
    let code = lab8::Code { depart, ..LAB8 };
    fails_at(
        &lab8::check(code),
        3,
        "the driver still rings the QP's doorbells on VF 0",
    );
}

#[test]
fn lab8_adopting_without_announcing_the_counts_fails_step_5() {
    /// Takes QP_ARRIVED and adopts the QP, but trusts the device's copy of the old
    /// slots and writes nothing to the new ones.
    fn adopt(nic: &dyn Nic, q: &mut dyn Queue, m: &mut Mover) -> Result<()> {
        solutions::lab8::next_event(nic, &mut m.eqs[1])?;
        let req = AdoptQpReq {
            qpn: m.qpn,
            reserved: 0,
        };
        let a: AdoptQpResp = call(q, nic, Opcode::AdoptQp, req.as_bytes())?;
        m.pdn = a.pdn;
        m.cqn = a.send_cq;
        m.sq_doorbell = a.sq_doorbell;
        m.rq_doorbell = a.rq_doorbell;
        m.cq_doorbell = a.send_cq_doorbell;
        m.at = Some(1);
        Ok(())
    }
    let code = lab8::Code { adopt, ..LAB8 };
    fails_at(&lab8::check(code), 5, "the send queue's new slot");
}
