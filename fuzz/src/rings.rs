//! The eth_rings target's inputs: what a hostile driver does to B's Ethernet queues
//! (datasheet §15), one record per action.
//!
//! A record's flags byte says what (bits 3-5, [`Action`]), whether an engine pass follows
//! (bit 2, as every target's) and, for descriptors, whether the address is taken as an
//! offset into the port's own buffers (bit 6) rather than as it is; its bytes are the
//! action's arguments, little-endian ([`crate::input::Args`]).

use rnic_abi::cmd::Opcode;
use rnic_abi::eth::{EthDesc, EthQueueReq, KIND_RX, KIND_TX};
use rnic_driver::eth::EthPort;
use rnic_driver::Device;
use zerocopy::IntoBytes;

use crate::input::{Args, Record};
use crate::world::{Seal, World};

/// What a record does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Posts a send descriptor (addr u64, len u32, flags u16, status u16).
    PostTx,
    /// Posts a receive descriptor (the same fields).
    PostRx,
    /// Writes a doorbell slot word: queue (u8: bit 0 receive), word (u8: bit 0 the arm
    /// word), value (u32).
    WriteSlot,
    /// Runs `SET_ETH` with the record's bytes as its body.
    SetEth,
    /// Sends B a frame from the switch (the record's bytes; RoCEv2 or not).
    Frame,
    /// Destroys a queue (kind u8, queue u32) or runs `QUERY_ETH_QUEUE` on it (bit 7 of
    /// the kind), whatever it names.
    Queue,
    /// Runs `CREATE_ETH_QUEUE` with the record's bytes as its body.
    Create,
    /// `QUERY_ETH`.
    Query,
}

impl Action {
    /// The action of a flags byte.
    pub fn of(flags: u8) -> Self {
        match (flags >> 3) & 7 {
            0 => Self::PostTx,
            1 => Self::PostRx,
            2 => Self::WriteSlot,
            3 => Self::SetEth,
            4 => Self::Frame,
            5 => Self::Queue,
            6 => Self::Create,
            _ => Self::Query,
        }
    }

    /// The flags byte of this action (with `step` and `relative`).
    pub fn flags(self, step: bool, relative: bool) -> u8 {
        let n = match self {
            Self::PostTx => 0,
            Self::PostRx => 1,
            Self::WriteSlot => 2,
            Self::SetEth => 3,
            Self::Frame => 4,
            Self::Queue => 5,
            Self::Create => 6,
            Self::Query => 7,
        };
        n << 3 | u8::from(step) << 2 | u8::from(relative) << 6
    }
}

/// Bit 6 of the flags: a descriptor's `addr` is an offset into the port's buffers.
const RELATIVE: u8 = 1 << 6;

/// Does what `r` says to B's port `port` (on `dev`) in `world`.
pub fn apply(world: &World, dev: &Device, port: &mut EthPort, r: &Record) {
    let mut a = Args(r.bytes);
    match Action::of(r.flags) {
        action @ (Action::PostTx | Action::PostRx) => {
            let tx = action == Action::PostTx;
            let mut desc = EthDesc {
                addr: a.take(8),
                len: a.take(4) as u32,
                flags: a.take(2) as u16,
                status: a.take(2) as u16,
            };
            if r.flags & RELATIVE != 0 {
                // Somewhere in the port's buffers: mostly valid, sometimes past them.
                let slot = (desc.addr >> 32) as u32;
                desc.addr = port.buffer_address(tx, slot) + (desc.addr & 0xffff);
            }
            let _ = port.post_raw(tx, desc);
        }
        Action::WriteSlot => {
            let tx = a.take(1) & 1 == 0;
            let plus = if a.take(1) & 1 == 0 { 0 } else { 4 };
            let _ = port.write_slot_raw(tx, plus, a.take(4) as u32);
        }
        Action::SetEth => {
            let _ = dev.raw_command(Opcode::SetEth as u16, r.bytes, 0);
        }
        Action::Frame => world.inject_to_b(r.bytes.to_vec(), Seal::AsIs),
        Action::Queue => {
            let kind = a.take(1) as u8;
            let req = EthQueueReq {
                kind: if kind & 1 == 0 { KIND_TX } else { KIND_RX },
                reserved0: [0; 3],
                queue: a.take(4) as u32,
            };
            let op = if kind & 0x80 == 0 {
                Opcode::DestroyEthQueue
            } else {
                Opcode::QueryEthQueue
            };
            let _ = dev.raw_command(op as u16, req.as_bytes(), 64);
        }
        Action::Create => {
            let _ = dev.raw_command(Opcode::CreateEthQueue as u16, r.bytes, 64);
        }
        Action::Query => {
            let _ = dev.raw_command(Opcode::QueryEth as u16, &[], 256);
        }
    }
}
