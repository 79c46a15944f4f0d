//! The checkers of labs 8 and 9, tested: the reference solutions pass every step, and
//! deliberately broken solutions fail at the step that is wrong, with the cause.

use rnic_abi::cmd::Opcode;
use rnic_abi::doorbell;
use rnic_abi::eth::SetEthReq;
use rnic_abi::migration::{AdoptQpReq, AdoptQpResp, MigrateQpReq, MigrateQpResp};
use rnic_labs::lab2::{call, Queue};
use rnic_labs::lab8::{self, Admin, Mover};
use rnic_labs::lab9::{self, Port};
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

/// The reference solution of lab 9.
const LAB9: lab9::Code = lab9::Code {
    open: solutions::lab9::open,
    send: solutions::lab9::send,
    reclaim: solutions::lab9::reclaim,
    recv: solutions::lab9::recv,
};

#[test]
fn lab9_reference_passes_every_step() {
    let r = lab9::check(LAB9);
    println!("{r}");
    assert!(r.passed(), "{r}");
    assert_eq!(r.steps.len(), lab9::STEPS.len());
}

#[test]
fn lab9_no_multicast_group_fails_step_2() {
    /// Lab 2's queue, with the MacEntry taken off SET_ETH.
    struct NoGroup<'q>(&'q mut dyn Queue);
    impl Queue for NoGroup<'_> {
        fn execute(
            &mut self,
            nic: &dyn Nic,
            opcode: Opcode,
            body: &[u8],
            resp_len: usize,
        ) -> Result<Vec<u8>> {
            if opcode != Opcode::SetEth {
                return self.0.execute(nic, opcode, body, resp_len);
            }
            let (mut req, _) = SetEthReq::read_from_prefix(body).map_err(|_| "body")?;
            req.mc_count = 0;
            self.0.execute(nic, opcode, req.as_bytes(), resp_len)
        }
    }
    fn open(nic: &dyn Nic, q: &mut dyn Queue, m: lab9::Memory) -> Result<Port> {
        solutions::lab9::open(nic, &mut NoGroup(q), m)
    }
    let code = lab9::Code { open, ..LAB9 };
    fails_at(&lab9::check(code), 2, "SET_ETH names 0 multicast addresses");
}

#[test]
fn lab9_posted_count_before_the_descriptor_fails_step_4() {
    /// Stores the new posted count first, then does it right.
    fn send(nic: &dyn Nic, p: &mut Port, frame: &[u8]) -> Result<()> {
        let slot = p.tx.queue.doorbell;
        nic.db_write(doorbell::slot_offset(slot.page, slot.slot), p.tx.posted + 1);
        solutions::lab9::send(nic, p, frame)
    }
    let code = lab9::Code { send, ..LAB9 };
    fails_at(
        &lab9::check(code),
        4,
        "while send descriptor 0 was still empty: write the descriptor first",
    );
}

#[test]
fn lab9_reclaim_reading_the_flags_for_the_status_fails_step_6() {
    /// Looks for DESC_DONE in the flags (+0x0C) instead of the status (+0x0E).
    fn reclaim(p: &mut Port) -> Result<u32> {
        let q = &mut p.tx;
        let mut n = 0;
        while q.done != q.posted {
            let at = (q.done % lab9::ENTRIES) as usize * 16;
            if q.ring.load_u16(at + 0x0C) & rnic_abi::eth::DESC_DONE == 0 {
                break;
            }
            q.done += 1;
            n += 1;
        }
        Ok(n)
    }
    let code = lab9::Code { reclaim, ..LAB9 };
    fails_at(
        &lab9::check(code),
        6,
        "the first reclaim took back 0 descriptors",
    );
}

#[test]
fn lab9_buffers_never_posted_again_fail_step_8() {
    /// Takes each frame but leaves its buffer out of the ring.
    fn recv(nic: &dyn Nic, p: &mut Port) -> Result<Vec<u8>> {
        let q = &mut p.rx;
        let at = (q.done % lab9::ENTRIES) as usize * 16;
        let ring = &q.ring;
        rnic_labs::nic::wait_for(nic, "a frame", || {
            Ok(ring.load_u16(at + 0x0E) & rnic_abi::eth::DESC_DONE != 0)
        })?;
        let len = q.ring.load_u32(at + 8) as usize;
        let mut frame = vec![0u8; len];
        q.buffers
            .read((q.done % lab9::ENTRIES) as usize * lab9::BUFFER, &mut frame);
        q.done += 1;
        Ok(frame)
    }
    let code = lab9::Code { recv, ..LAB9 };
    fails_at(
        &lab9::check(code),
        8,
        "frames found no buffer (rx_no_buffer): post each buffer again",
    );
}

#[test]
fn lab8_adopt_written_up_to_step_5_passes_step_4_and_stops_at_5() {
    /// Step 4 done, step 5 still `todo!()`, as a student's half-written skeleton.
    fn adopt(nic: &dyn Nic, q: &mut dyn Queue, m: &mut Mover) -> Result<()> {
        solutions::lab8::next_event(nic, &mut m.eqs[1])?;
        let req = AdoptQpReq {
            qpn: m.qpn,
            reserved: 0,
        };
        let _: AdoptQpResp = call(q, nic, Opcode::AdoptQp, req.as_bytes())?;
        m.at = Some(1);
        todo!("step 5: the counts on the new doorbells")
    }
    let code = lab8::Code { adopt, ..LAB8 };
    let r = lab8::check(code);
    fails_at(&r, 5, "still to write");
    assert!(matches!(r.steps[3].verdict, Verdict::Pass(_)), "{r}");
}

#[test]
fn lab9_open_written_up_to_step_3_passes_steps_1_and_2_and_stops_at_3() {
    /// Lab 2's queue, stopping the code where step 3 starts (after SET_ETH).
    struct StopAfterSetEth<'q>(&'q mut dyn Queue);
    impl Queue for StopAfterSetEth<'_> {
        fn execute(
            &mut self,
            nic: &dyn Nic,
            opcode: Opcode,
            body: &[u8],
            resp_len: usize,
        ) -> Result<Vec<u8>> {
            let answer = self.0.execute(nic, opcode, body, resp_len);
            if opcode == Opcode::SetEth {
                todo!("step 3: the receive ring");
            }
            answer
        }
    }
    fn open(nic: &dyn Nic, q: &mut dyn Queue, m: lab9::Memory) -> Result<Port> {
        solutions::lab9::open(nic, &mut StopAfterSetEth(q), m)
    }
    let code = lab9::Code { open, ..LAB9 };
    let r = lab9::check(code);
    fails_at(&r, 3, "still to write");
    assert!(matches!(r.steps[1].verdict, Verdict::Pass(_)), "{r}");
}
