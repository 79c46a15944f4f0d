//! The `ops` target's input: a sequence of what a guest and its VMM can do to function B
//! (and, as the PF's administrator, to the device), interleaved with engine passes.
//!
//! Each record of the input ([`crate::input::records`]) is one operation: its flags byte
//! says which ([`Op`]), its bytes are the operation's arguments, little-endian, missing
//! ones read as zero.
//!
//! - `Command`: opcode, response room, body: a command on B's command queue, through the
//!   driver (the body names any function's objects: B's, A's, C's numbers and keys are
//!   all in reach).
//! - `Admin`: the same on the PF's admin queue (set up on first use as a driver does).
//! - `Bar0Write`/`Bar0Read`: offset, width, value: an access to B's registers, of any
//!   width, at any offset (also past the BAR, which the function refuses).
//! - `DoorbellWrite`/`DoorbellRead`: a 32-bit access to B's doorbell BAR through
//!   `REGION_WRITE`/`READ`, as a client that does not map it makes.
//! - `ConfigWrite`/`ConfigRead`: an access to B's config space (bus mastering, MSI-X, FLR).
//! - `Step`: one engine pass.
//!
//! A command waits for its completion, as the driver does, so commands run only while
//! the queue they go to can complete them: B's until an access to B's registers, config
//! space or command queue doorbell (which may stop, move or confuse the queue, on
//! purpose) or an admin command (which may disable or reset B). The admin queue always
//! answers: nothing here touches the PF's registers. What the device does with a queue
//! the guest broke is still fuzzed: the engine keeps running it.

use rnic_abi::doorbell::{ADMINQ_DOORBELL, BAR_SIZE, CMDQ_DOORBELL};
use rnic_abi::pci::{CONFIG_SPACE_SIZE, DOORBELL_BAR, REG_BAR, REG_BAR_SIZE};
use rnic_abi::regs::{ADMINQ_REGS, DEVICE_STATUS, STATUS_CMDQ_RUNNING};
use rnic_abi::vfio_user::REGION_CONFIG;
use rnic_driver::cmdq::CommandQueue;

use crate::input::{Args, Record};
use crate::world::{World, A, B};

/// One operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// A command on B's command queue.
    Command,
    /// A command on the PF's admin queue.
    Admin,
    /// A write to B's BAR0.
    Bar0Write,
    /// A read of B's BAR0.
    Bar0Read,
    /// A write to B's doorbell BAR through a region write.
    DoorbellWrite,
    /// A read of B's doorbell BAR through a region read.
    DoorbellRead,
    /// A write to B's config space.
    ConfigWrite,
    /// A read of B's config space.
    ConfigRead,
    /// One engine pass.
    Step,
}

impl Op {
    /// The operation a record's flags byte names.
    pub fn of(flags: u8) -> Self {
        match flags % 9 {
            0 => Op::Command,
            1 => Op::Admin,
            2 => Op::Bar0Write,
            3 => Op::Bar0Read,
            4 => Op::DoorbellWrite,
            5 => Op::DoorbellRead,
            6 => Op::ConfigWrite,
            7 => Op::ConfigRead,
            _ => Op::Step,
        }
    }

    /// The flags byte of the operation.
    pub fn flags(self) -> u8 {
        self as u8
    }
}

/// An access's width: 1, 2, 4 or 8 bytes, or (rarely) 0 or 16, which the function must
/// refuse or take as it says.
fn width(sel: u8) -> usize {
    [4, 4, 8, 1, 2, 4, 0, 16][usize::from(sel % 8)]
}

/// What running an input did, for the checks that depend on it.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Effects {
    /// Commands ran on B: they may have created queues anywhere in B's RAM, and
    /// completions the driver cannot know of.
    pub b_commands: bool,
    /// B's registers, config space or command queue doorbell were written.
    pub b_queue_touched: bool,
    /// Admin commands ran: the PF may change any function.
    pub admin: bool,
}

/// Runs the operations of `records` on `world`; returns what they did.
pub fn run(world: &World, records: &[Record<'_>]) -> Effects {
    let mut fx = Effects::default();
    let b = &world.bench.functions[B];
    let mut adminq: Option<CommandQueue> = None;
    for r in records {
        let mut args = Args(r.bytes);
        match Op::of(r.flags) {
            Op::Command => {
                let opcode = args.u16();
                let room = usize::from(args.u16() % 4096);
                let body = args.rest();
                if fx.b_queue_touched || fx.admin || !cmdq_running(world) {
                    continue;
                }
                fx.b_commands = true;
                // Errors and failed statuses are answers too: all that matters here is
                // that the device gave one.
                let _ = world.sides[B].ctx.device().raw_command(opcode, body, room);
            }
            Op::Admin => {
                let opcode = args.u16();
                let room = usize::from(args.u16() % 4096);
                let body = args.rest();
                let t = world.sides[A].ctx.device().transport();
                if adminq.is_none() {
                    // Vector 0, shared with the PF's command queue: waiting for it runs
                    // the engine, as every wait of the in-process transport does.
                    match CommandQueue::start_on(t, ADMINQ_REGS, Some(0)) {
                        Ok(q) => adminq = Some(q),
                        Err(e) => panic!("the PF's admin queue does not start: {e}"),
                    }
                }
                fx.admin = true;
                if let Some(q) = adminq.as_mut() {
                    if let Err(e) = q.execute(t, opcode, body, room) {
                        panic!("admin command {opcode:#06x} got no answer: {e}");
                    }
                }
            }
            Op::Bar0Write => {
                let offset = u64::from(args.u16()) % (REG_BAR_SIZE + 16);
                let len = width(args.take(1) as u8);
                let value = args.u64().to_le_bytes();
                let data: Vec<u8> = value.iter().copied().cycle().take(len).collect();
                fx.b_queue_touched = true;
                let _ = b.region_write(u32::from(REG_BAR), offset, &data);
            }
            Op::Bar0Read => {
                let offset = u64::from(args.u16()) % (REG_BAR_SIZE + 16);
                let mut data = vec![0; width(args.take(1) as u8)];
                let _ = b.region_read(u32::from(REG_BAR), offset, &mut data);
            }
            Op::DoorbellWrite => {
                let offset = u64::from(args.u32()) % (BAR_SIZE + 16);
                let value = args.u32();
                if offset & !3 == CMDQ_DOORBELL || offset & !3 == ADMINQ_DOORBELL {
                    fx.b_queue_touched = true;
                }
                let _ = b.region_write(u32::from(DOORBELL_BAR), offset, &value.to_le_bytes());
            }
            Op::DoorbellRead => {
                let offset = u64::from(args.u32()) % (BAR_SIZE + 16);
                let mut data = [0u8; 4];
                let _ = b.region_read(u32::from(DOORBELL_BAR), offset, &mut data);
            }
            Op::ConfigWrite => {
                let offset = u64::from(args.u16()) % (CONFIG_SPACE_SIZE as u64 + 16);
                let len = width(args.take(1) as u8);
                let value = args.u64().to_le_bytes();
                let data: Vec<u8> = value.iter().copied().cycle().take(len).collect();
                fx.b_queue_touched = true;
                let _ = b.region_write(REGION_CONFIG, offset, &data);
            }
            Op::ConfigRead => {
                let offset = u64::from(args.u16()) % (CONFIG_SPACE_SIZE as u64 + 16);
                let mut data = vec![0; width(args.take(1) as u8)];
                let _ = b.region_read(REGION_CONFIG, offset, &mut data);
            }
            Op::Step => world.bench.step(),
        }
    }
    fx
}

/// Whether B's command queue runs (a command sent now will be answered).
fn cmdq_running(world: &World) -> bool {
    let mut s = [0u8; 4];
    world.bench.functions[B]
        .region_read(u32::from(REG_BAR), DEVICE_STATUS, &mut s)
        .is_ok()
        && u32::from_le_bytes(s) & STATUS_CMDQ_RUNNING != 0
}

/// Encodes an operation (for seeds and tests): its flags byte and `args`.
pub fn op(op: Op, args: &[u8]) -> Vec<u8> {
    crate::input::record(op.flags(), args)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::input::records;
    use crate::world::Mode;

    #[test]
    fn every_flags_byte_names_an_operation_and_each_its_own() {
        for op in [
            Op::Command,
            Op::Admin,
            Op::Bar0Write,
            Op::Bar0Read,
            Op::DoorbellWrite,
            Op::DoorbellRead,
            Op::ConfigWrite,
            Op::ConfigRead,
            Op::Step,
        ] {
            assert_eq!(Op::of(op.flags()), op);
        }
        assert_eq!(Op::of(255), Op::of(255 % 9));
    }

    #[test]
    fn a_qp_moved_to_err_by_a_command_completes_each_of_its_work_requests_once() {
        let seeds = crate::seeds::ops_seeds();
        let mut world = World::build(Mode::Fuzz);
        let fx = run(&world, &records(&seeds[2], 64));
        assert_eq!(
            fx,
            Effects {
                b_commands: true,
                ..Effects::default()
            }
        );
        world.bench.settle(8);
        world.check();
        world.check_bystander_counters();
        // qb's four requests and its eight receives were flushed.
        for wr_id in (5000..5004).chain(1000..1008) {
            assert!(
                world.completed[B].contains(&wr_id),
                "wr {wr_id}: {:?}",
                world.completed[B]
            );
        }
    }

    #[test]
    fn re_registering_b_s_region_through_its_list_read_as_page_tables_changes_no_memory() {
        // Seeds 19 to 21: REG_MR of B's writable MR through its flat list, and through the
        // same page read as a one-level and a two-level page table.
        let seeds = crate::seeds::ops_seeds();
        let mut world = World::build(Mode::Fuzz);
        for seed in &seeds[19..22] {
            let fx = run(&world, &records(seed, 64));
            assert!(fx.b_commands && !fx.b_queue_touched && !fx.admin);
        }
        world.bench.settle(8);
        world.check();
        world.check_bystander_counters();
    }

    #[test]
    fn breaking_b_s_queue_stops_commands_to_it_and_admin_commands_are_answered() {
        let seeds = crate::seeds::ops_seeds();
        let world = World::build(Mode::Fuzz);
        // The command queue stopped (seed 10), then a command: not sent.
        let input = [seeds[10].clone(), seeds[1].clone()].concat();
        let fx = run(&world, &records(&input, 64));
        assert!(fx.b_queue_touched && !fx.b_commands);
        // Disabling the VFs from the PF's admin queue (seed 17) is answered.
        let fx = run(&world, &records(&seeds[17], 64));
        assert!(fx.admin);
        world.bench.detach();
    }
}
