//! The checkers of labs 6 and 7, tested against deliberately broken solutions: each
//! fails at the step that is wrong, with the cause. (That the reference solutions pass
//! and the skeletons stop at a step still to write is `checkers.rs`'s, for every lab.)

use rnic_abi::verbs::{self as v, WcStatus};
use rnic_labs::lab2::Queue;
use rnic_labs::lab3::Connect;
use rnic_labs::lab6::{self, Packet};
use rnic_labs::lab7::{self, Setup, Write};
use rnic_labs::nic::{Nic, Result};
use rnic_labs::report::{Report, Verdict};
use rnic_labs::solutions;

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

#[test]
fn lab6_the_devices_own_parser_passes_so_every_broken_frame_is_one_the_device_drops() {
    let r = lab6::check(lab6::truth);
    println!("{r}");
    assert!(r.passed());
}

#[test]
fn lab6_the_psn_with_the_ackreq_bit_fails_step_2() {
    /// Takes the PSN as the whole 32-bit word, AckReq and reserved bits included.
    fn parse(frame: &[u8]) -> Result<Packet> {
        let mut p = solutions::lab6::parse(frame)?;
        p.psn = u32::from_be_bytes([frame[50], frame[51], frame[52], frame[53]]);
        Ok(p)
    }
    fails_at(
        &lab6::check(parse),
        2,
        "the PSN is 0x80fffffd, the frame holds 0xfffffd (BTH bytes 9-11",
    );
}

#[test]
fn lab6_no_reth_on_a_read_request_fails_step_3() {
    /// Knows the RETH of WRITEs only.
    fn parse(frame: &[u8]) -> Result<Packet> {
        let mut p = solutions::lab6::parse(frame)?;
        if p.opcode == 0x0C {
            p.reth = None;
        }
        Ok(p)
    }
    fails_at(
        &lab6::check(parse),
        3,
        "(RC_RDMA_READ_REQUEST, PSN 0x1): the RETH is absent, the frame holds va",
    );
}

#[test]
fn lab6_the_pad_in_the_payload_fails_step_7() {
    /// Forgets the BTH pad count.
    fn parse(frame: &[u8]) -> Result<Packet> {
        let mut p = solutions::lab6::parse(frame)?;
        p.payload.end += usize::from(p.pad);
        Ok(p)
    }
    fails_at(
        &lab6::check(parse),
        7,
        "frame 1 (RC_SEND_ONLY, PSN 0xfffffd): the payload is frame[54..94] (40 bytes), the \
         frame holds frame[54..91] (37 bytes)",
    );
}

#[test]
fn lab6_a_big_endian_icrc_fails_step_8() {
    fn parse(frame: &[u8]) -> Result<Packet> {
        let mut p = solutions::lab6::parse(frame)?;
        p.icrc = p.icrc.swap_bytes();
        Ok(p)
    }
    fails_at(
        &lab6::check(parse),
        8,
        "read big-endian: rxe stores the ICRC little-endian",
    );
}

#[test]
fn lab6_a_parser_that_indexes_before_checking_fails_step_9() {
    /// Takes the ICRC from the frame's last 4 bytes before any length check.
    fn parse(frame: &[u8]) -> Result<Packet> {
        let icrc = &frame[frame.len() - 4..];
        let mut p = solutions::lab6::parse(frame)?;
        p.icrc = u32::from_le_bytes([icrc[0], icrc[1], icrc[2], icrc[3]]);
        Ok(p)
    }
    fails_at(
        &lab6::check(parse),
        9,
        "cut to 0 bytes: your parser panicked instead of returning an Err",
    );
}

#[test]
fn lab6_a_parser_that_ignores_the_total_length_fails_step_9() {
    /// Trusts the frame's length over the IPv4 total length.
    fn parse(frame: &[u8]) -> Result<Packet> {
        let mut whole = frame.to_vec();
        if whole.len() >= 18 {
            let total = (whole.len() - 14) as u16;
            whole[16..18].copy_from_slice(&total.to_be_bytes());
            if whole.len() >= 40 {
                whole[38..40].copy_from_slice(&(total.saturating_sub(20)).to_be_bytes());
            }
        }
        solutions::lab6::parse(&whole)
    }
    fails_at(
        &lab6::check(parse),
        9,
        "your parser returned a Packet; it must be an Err: it is shorter than its IPv4 total length says",
    );
}

/// Lab 7 with the reference solution but for the parts given.
fn lab7_with(
    connect: Option<Connect>,
    run: Option<lab7::Run>,
    recover: Option<lab7::Recover>,
) -> Report {
    lab7::check(lab7::Code {
        connect: connect.unwrap_or(solutions::lab7::connect),
        run: run.unwrap_or(solutions::lab7::run),
        recover: recover.unwrap_or(solutions::lab7::recover),
    })
}

#[test]
fn lab7_lab_3s_connect_unchanged_fails_step_1() {
    // Lab 3's connect asks for timeout 14: about 67 ms per loss.
    fails_at(
        &lab7_with(Some(solutions::lab3::connect), None, None),
        1,
        "has timeout 14 (67.109 ms)",
    );
}

#[test]
fn lab7_no_retransmission_timer_fails_step_1() {
    /// Lab 3's connect with timeout 0, through a queue that rewrites it.
    fn connect(nic: &dyn Nic, q: &mut dyn Queue, qpn: u32, peer: u32, gid: [u8; 16]) -> Result<()> {
        struct NoTimer<'q>(&'q mut dyn Queue);
        impl Queue for NoTimer<'_> {
            fn execute(
                &mut self,
                nic: &dyn Nic,
                opcode: rnic_abi::cmd::Opcode,
                body: &[u8],
                resp_len: usize,
            ) -> Result<Vec<u8>> {
                use zerocopy::{FromBytes, IntoBytes};
                let mut body = body.to_vec();
                if let Ok((mut m, _)) = v::ModifyQpReq::read_from_prefix(&body) {
                    m.attr.timeout = 0;
                    body[..size_of::<v::ModifyQpReq>()].copy_from_slice(m.as_bytes());
                }
                self.0.execute(nic, opcode, &body, resp_len)
            }
        }
        solutions::lab7::connect(nic, &mut NoTimer(q), qpn, peer, gid)
    }
    fails_at(
        &lab7_with(Some(connect), None, None),
        1,
        "has timeout 0: no retransmission timer, so a lost request is never sent again",
    );
}

#[test]
fn lab7_posting_into_a_full_ring_fails_step_2() {
    /// Posts every WR at once, then polls.
    fn run(nic: &dyn Nic, s: &mut Setup, writes: &[Write]) -> Result<Vec<v::Cqe>> {
        for w in writes {
            solutions::lab4::post(nic, s, w)?;
        }
        writes
            .iter()
            .map(|_| solutions::lab4::poll(nic, s))
            .collect()
    }
    fails_at(
        &lab7_with(None, Some(run), None),
        2,
        "the send slot was given posted count 17 when 0 CQEs had been consumed: 17 WQEs \
         outstanding in a ring of 16 entries",
    );
}

#[test]
fn lab7_leaving_the_flushed_completions_fails_step_4() {
    /// Returns at the first failed WR.
    fn run(nic: &dyn Nic, s: &mut Setup, writes: &[Write]) -> Result<Vec<v::Cqe>> {
        let mut done: Vec<v::Cqe> = Vec::new();
        let mut next = writes.iter();
        loop {
            while s.sq_posted.wrapping_sub(s.cq_consumed) < 16 {
                match next.next() {
                    Some(w) => solutions::lab4::post(nic, s, w)?,
                    None => break,
                }
            }
            if s.sq_posted == s.cq_consumed {
                return Ok(done);
            }
            let cqe = solutions::lab4::poll(nic, s)?;
            done.push(cqe);
            if cqe.status != WcStatus::Success as u8 {
                return Ok(done);
            }
        }
    }
    fails_at(
        &lab7_with(None, Some(run), None),
        4,
        "1 completions returned for the 16 WRs posted: after RETRY_EXC_ERR every WR still in \
         the queue completes with WR_FLUSH_ERR",
    );
}

#[test]
fn lab7_recovering_one_end_only_fails_step_5() {
    /// Resets QP 0 only.
    fn recover(
        nic: &dyn Nic,
        s: &mut Setup,
        q: &mut dyn Queue,
        connect: Connect,
        gid: [u8; 16],
    ) -> Result<()> {
        use zerocopy::IntoBytes;
        let [a, b] = s.objects.qps;
        let req = v::ModifyQpReq {
            qpn: a.qpn,
            attr_mask: v::attr::STATE,
            attr: v::QpAttr {
                qp_state: v::QpState::Reset as u8,
                ..Default::default()
            },
        };
        rnic_labs::lab2::call::<()>(q, nic, rnic_abi::cmd::Opcode::ModifyQp, req.as_bytes())?;
        for slot in [a.sq_doorbell, a.rq_doorbell] {
            nic.db_write(rnic_abi::doorbell::slot_offset(slot.page, slot.slot), 0);
        }
        s.sq_posted = 0;
        connect(nic, q, a.qpn, b.qpn, gid)
    }
    fails_at(
        &lab7_with(None, None, Some(recover)),
        5,
        "the peer, was not moved to RESET: its responder still expects the PSN",
    );
}

#[test]
fn lab7_slots_left_after_reset_fail_step_5() {
    /// The reference recovery, on a function whose doorbell stores of 0 are lost.
    fn recover(
        nic: &dyn Nic,
        s: &mut Setup,
        q: &mut dyn Queue,
        connect: Connect,
        gid: [u8; 16],
    ) -> Result<()> {
        struct NoZero<'a>(&'a dyn Nic);
        impl Nic for NoZero<'_> {
            fn describe(&self) -> String {
                self.0.describe()
            }
            fn config_read(&self, offset: u16, buf: &mut [u8]) -> Result<()> {
                self.0.config_read(offset, buf)
            }
            fn config_write(&self, offset: u16, data: &[u8]) -> Result<()> {
                self.0.config_write(offset, data)
            }
            fn reg_read(&self, offset: u64) -> Result<u32> {
                self.0.reg_read(offset)
            }
            fn reg_write(&self, offset: u64, value: u32) -> Result<()> {
                self.0.reg_write(offset, value)
            }
            fn db_read(&self, offset: u64) -> u32 {
                self.0.db_read(offset)
            }
            fn db_write(&self, offset: u64, value: u32) {
                if value != 0 {
                    self.0.db_write(offset, value)
                }
            }
            fn alloc_dma(&self, size: usize) -> Result<rnic_driver::transport::DmaBuffer> {
                self.0.alloc_dma(size)
            }
            fn enable_msix(&self, vectors: u16) -> Result<()> {
                self.0.enable_msix(vectors)
            }
            fn wait_interrupt(&self, vector: u16) -> Result<bool> {
                self.0.wait_interrupt(vector)
            }
            fn pause(&self) {
                self.0.pause()
            }
        }
        solutions::lab7::recover(&NoZero(nic), s, q, connect, gid)
    }
    fails_at(
        &lab7_with(None, None, Some(recover)),
        5,
        "'s send slot still holds 80: RESET sets the device's taken counts to 0 but does not \
         touch the slots",
    );
}
