//! The checkers, tested: every reference solution passes every step; each skeleton, as
//! shipped, stops at a step still to write; and deliberately broken solutions fail at the
//! step that is wrong, with the cause.

use rnic_abi::cmd::Opcode;
use rnic_abi::pci::cfg;
use rnic_abi::verbs::{self as v, attr};
use rnic_abi::{doorbell, regs};
use rnic_driver::transport::DmaBuffer;
use rnic_labs::lab2::Queue;
use rnic_labs::nic::{Nic, Result};
use rnic_labs::report::{Report, Verdict};
use rnic_labs::{lab1, lab2, lab3, lab4, lab5, solutions};

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
fn every_reference_solution_passes() {
    for (lab, _) in rnic_labs::LABS {
        let r = rnic_labs::check(lab, true).expect("a lab");
        println!("{r}");
        assert!(r.passed(), "lab {lab}'s reference solution fails:\n{r}");
    }
}

#[test]
fn every_skeleton_stops_where_there_is_code_to_write() {
    for (lab, _) in rnic_labs::LABS {
        let r = rnic_labs::check(lab, false).expect("a lab");
        println!("{r}");
        let (_, why) = r.failure().expect("a skeleton does not pass");
        assert!(why.contains("still to write"), "lab {lab}: {why}");
        assert!(
            why.contains(&format!("labs/src/exercises/lab{lab}.rs")),
            "lab {lab}: {why}"
        );
    }
}

/// A function seen through a driver bug: it forwards every access but the ones its
/// mode drops.
struct Broken<'a> {
    nic: &'a dyn Nic,
    mode: Mode,
}

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    /// Never writes COMMAND (so Memory Space Enable is never set).
    NoCommandWrites,
    /// Never writes BAR2 back after sizing it.
    NoBarRestore,
    /// Enables the command queue before programming its rings.
    EnableFirst,
    /// Never kicks.
    NoKick,
    /// Never sets a rung bit.
    NoRungBit,
    /// Never stores to this doorbell-BAR offset.
    DropStoresAt(u64),
}

impl Nic for Broken<'_> {
    fn describe(&self) -> String {
        self.nic.describe()
    }
    fn config_read(&self, offset: u16, buf: &mut [u8]) -> Result<()> {
        self.nic.config_read(offset, buf)
    }
    fn config_write(&self, offset: u16, data: &[u8]) -> Result<()> {
        let bar2 = (cfg::BAR0 + 8) as u16;
        match self.mode {
            Mode::NoCommandWrites if offset == cfg::COMMAND as u16 => Ok(()),
            Mode::NoBarRestore if offset == bar2 && data != [0xFF; 4] => Ok(()),
            _ => self.nic.config_write(offset, data),
        }
    }
    fn reg_read(&self, offset: u64) -> Result<u32> {
        self.nic.reg_read(offset)
    }
    fn reg_write(&self, offset: u64, value: u32) -> Result<()> {
        match self.mode {
            Mode::EnableFirst if offset == regs::CMDQ_DESC_LO => {
                self.nic.reg_write(regs::CMDQ_CONTROL, regs::CMDQ_ENABLE)?;
                self.nic.reg_write(offset, value)
            }
            Mode::EnableFirst if offset == regs::CMDQ_CONTROL => Ok(()),
            Mode::NoKick if offset == regs::DOORBELL_KICK => Ok(()),
            _ => self.nic.reg_write(offset, value),
        }
    }
    fn db_read(&self, offset: u64) -> u32 {
        self.nic.db_read(offset)
    }
    fn db_write(&self, offset: u64, value: u32) {
        let in_bitmap = (doorbell::RUNG_BITMAP..doorbell::SLOTS_BASE).contains(&(offset % 4096));
        let dropped = match self.mode {
            Mode::NoRungBit => in_bitmap,
            Mode::DropStoresAt(at) => offset == at,
            _ => false,
        };
        if !dropped {
            self.nic.db_write(offset, value)
        }
    }
    fn alloc_dma(&self, size: usize) -> Result<DmaBuffer> {
        self.nic.alloc_dma(size)
    }
    fn enable_msix(&self, vectors: u16) -> Result<()> {
        self.nic.enable_msix(vectors)
    }
    fn wait_interrupt(&self, vector: u16) -> Result<bool> {
        self.nic.wait_interrupt(vector)
    }
    fn pause(&self) {
        self.nic.pause()
    }
}

#[test]
fn lab1_bar0_before_memory_space_enable_fails_step_2() {
    fn identify(nic: &dyn Nic) -> Result<lab1::Identity> {
        solutions::lab1::identify(&Broken {
            nic,
            mode: Mode::NoCommandWrites,
        })
    }
    fails_at(
        &lab1::check(identify),
        2,
        "Memory Space Enable (COMMAND bit 1) was never set",
    );
}

#[test]
fn lab1_a_bar_not_restored_fails_step_7() {
    fn identify(nic: &dyn Nic) -> Result<lab1::Identity> {
        solutions::lab1::identify(&Broken {
            nic,
            mode: Mode::NoBarRestore,
        })
    }
    fails_at(&lab1::check(identify), 7, "write the old value back");
}

#[test]
fn lab2_enable_before_the_ring_addresses_fails_step_2() {
    fn start(nic: &dyn Nic) -> Result<solutions::lab2::CommandQueue> {
        solutions::lab2::start(&Broken {
            nic,
            mode: Mode::EnableFirst,
        })
    }
    fails_at(
        &lab2::check(start),
        2,
        "the command queue never started: CMDQ_CONTROL.ENABLE was written before CMDQ_DESC_LO",
    );
}

#[test]
fn lab2_no_kick_fails_step_5() {
    /// The reference queue, on a function whose kicks are lost.
    struct Unkicked(solutions::lab2::CommandQueue);
    impl Queue for Unkicked {
        fn execute(
            &mut self,
            nic: &dyn Nic,
            opcode: Opcode,
            body: &[u8],
            resp_len: usize,
        ) -> Result<Vec<u8>> {
            self.0.execute(
                &Broken {
                    nic,
                    mode: Mode::NoKick,
                },
                opcode,
                body,
                resp_len,
            )
        }
    }
    fn start(nic: &dyn Nic) -> Result<Unkicked> {
        solutions::lab2::start(nic).map(Unkicked)
    }
    fails_at(
        &lab2::check(start),
        5,
        "NOTIFY_REQUEST was set after CMDQ_DOORBELL and no kick followed",
    );
}

#[test]
fn lab3_rtr_without_path_mtu_fails_step_6() {
    /// Lab 2's queue, with PATH_MTU taken out of every MODIFY_QP to RTR.
    struct NoMtu<'q>(&'q mut dyn Queue);
    impl Queue for NoMtu<'_> {
        fn execute(
            &mut self,
            nic: &dyn Nic,
            opcode: Opcode,
            body: &[u8],
            resp_len: usize,
        ) -> Result<Vec<u8>> {
            use zerocopy::{FromBytes, IntoBytes};
            let mut body = body.to_vec();
            if let (Opcode::ModifyQp, Ok((mut m, _))) =
                (opcode, v::ModifyQpReq::read_from_prefix(&body))
            {
                if m.attr.qp_state == v::QpState::Rtr as u8 {
                    m.attr_mask &= !attr::PATH_MTU;
                    body[..size_of::<v::ModifyQpReq>()].copy_from_slice(m.as_bytes());
                }
            }
            self.0.execute(nic, opcode, &body, resp_len)
        }
    }
    fn connect(nic: &dyn Nic, q: &mut dyn Queue, qpn: u32, peer: u32, gid: [u8; 16]) -> Result<()> {
        solutions::lab3::connect(nic, &mut NoMtu(q), qpn, peer, gid)
    }
    let code = lab3::Code {
        create: solutions::lab3::create,
        connect,
    };
    fails_at(&lab3::check(code), 6, "attr_mask lacks PATH_MTU");
}

#[test]
fn lab4_doorbell_rung_before_the_wqe_is_written_fails_step_1() {
    /// Rings first (count, bit, kick), then writes the WQE.
    fn post(nic: &dyn Nic, s: &mut lab4::Setup, w: &lab4::Write) -> Result<()> {
        let (page, slot) = (
            s.objects.qps[0].sq_doorbell.page,
            s.objects.qps[0].sq_doorbell.slot,
        );
        nic.db_write(doorbell::slot_offset(page, slot), s.sq_posted + 1);
        let word = u64::from(page) * 4096 + doorbell::RUNG_BITMAP + 4 * u64::from(slot / 32);
        nic.db_write(word, nic.db_read(word) | 1 << (slot % 32));
        if nic.db_read(u64::from(page) * 4096 + doorbell::NOTIFY_REQUEST) != 0 {
            nic.reg_write(regs::DOORBELL_KICK, page)?;
        }
        // The reference post writes the WQE and rings again with the same values.
        solutions::lab4::post(nic, s, w)
    }
    let code = lab4::Code {
        post,
        poll: solutions::lab4::poll,
    };
    fails_at(
        &lab4::check(code),
        1,
        "while send ring entry 0 was still empty: write the WQE first",
    );
}

#[test]
fn lab4_no_rung_bit_fails_step_2() {
    fn post(nic: &dyn Nic, s: &mut lab4::Setup, w: &lab4::Write) -> Result<()> {
        solutions::lab4::post(
            &Broken {
                nic,
                mode: Mode::NoRungBit,
            },
            s,
            w,
        )
    }
    let code = lab4::Code {
        post,
        poll: solutions::lab4::poll,
    };
    fails_at(
        &lab4::check(code),
        2,
        "the device does not look at the send queue",
    );
}

#[test]
fn lab4_no_kick_fails_step_3() {
    fn post(nic: &dyn Nic, s: &mut lab4::Setup, w: &lab4::Write) -> Result<()> {
        solutions::lab4::post(
            &Broken {
                nic,
                mode: Mode::NoKick,
            },
            s,
            w,
        )
    }
    let code = lab4::Code {
        post,
        poll: solutions::lab4::poll,
    };
    fails_at(
        &lab4::check(code),
        3,
        "NOTIFY_REQUEST was set and no kick followed",
    );
}

#[test]
fn lab5_armed_after_posting_fails_step_3() {
    /// Posts first, arms after: the order a polling driver's habits suggest.
    fn write_and_wait(
        nic: &dyn Nic,
        s: &mut lab5::State,
        w: &lab4::Write,
    ) -> Result<(v::Eqe, v::Cqe)> {
        solutions::lab4::post(nic, &mut s.lab4, w)?;
        s.arm_seq += 1;
        let cq = s.lab4.objects.cq.doorbell;
        nic.db_write(doorbell::slot_offset(cq.page, cq.slot) + 4, s.arm_seq << 1);
        // The reference arms once more and posts again with the same count; the trace
        // already shows the first post before the first arm.
        s.arm_seq -= 1;
        s.lab4.sq_posted -= 1;
        solutions::lab5::write_and_wait(nic, s, w)
    }
    let code = lab5::Code {
        enable: solutions::lab5::enable,
        write_and_wait,
    };
    fails_at(
        &lab5::check(code),
        3,
        "the CQ was armed after the WQE was posted",
    );
}

#[test]
fn lab5_function_mask_left_set_fails_step_1() {
    fn enable(nic: &dyn Nic) -> Result<()> {
        solutions::lab5::enable(nic)?;
        let at = cfg::MSIX_CAP + cfg::MSIX_MSG_CTRL;
        nic.config_write16(at, nic.config_read16(at)? | cfg::MSIX_FUNCTION_MASK)
    }
    let code = lab5::Code {
        enable,
        write_and_wait: solutions::lab5::write_and_wait,
    };
    fails_at(&lab5::check(code), 1, "Function Mask (bit 14) is set");
}

#[test]
fn lab5_eq_entry_not_handed_back_fails_step_6() {
    fn write_and_wait(
        nic: &dyn Nic,
        s: &mut lab5::State,
        w: &lab4::Write,
    ) -> Result<(v::Eqe, v::Cqe)> {
        let eq = s.lab4.objects.eq.doorbell;
        let slot = doorbell::slot_offset(eq.page, eq.slot);
        solutions::lab5::write_and_wait(
            &Broken {
                nic,
                mode: Mode::DropStoresAt(slot),
            },
            s,
            w,
        )
    }
    let code = lab5::Code {
        enable: solutions::lab5::enable,
        write_and_wait,
    };
    fails_at(&lab5::check(code), 6, "the EQ's slot");
}
