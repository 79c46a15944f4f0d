//! The checkers of labs 6 and 7, tested against deliberately broken solutions: each
//! fails at the step that is wrong, with the cause. (That the reference solutions pass
//! and the skeletons stop at a step still to write is `checkers.rs`'s, for every lab.)

use rnic_labs::lab6::{self, Packet};
use rnic_labs::nic::Result;
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
