//! rnic-pingpong's control messages: 64 bytes, sent as SENDs in manual mode (the hello
//! and its answer) and at the end of `read` (`done`): `RNICPP`, version 1, kind (1 hello,
//! 2 done), op (1 send, 2 write, 3 read), 1 if from the initiator, 6 reserved bytes, then
//! little-endian u64s: size, iters, and for `done` the run's nanoseconds and min, median
//! and max latency in ns.

use super::{Config, Op};
use crate::error::{fail, Result, ToolError};

/// Bytes of a control message (manual-mode handshake, the READ test's `done`).
pub const CTRL_LEN: usize = 64;
/// Magic of control messages.
const CTRL_MAGIC: &[u8; 6] = b"RNICPP";
/// Version of control messages.
const CTRL_VERSION: u8 = 1;

/// What a control message says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Ctrl {
    /// Hello or done.
    pub kind: CtrlKind,
    /// Sent by the side with `--initiator`.
    pub initiator: bool,
    /// The sender's `--op`.
    pub op: Op,
    /// The sender's `--size`.
    pub size: u64,
    /// The sender's `--iters`.
    pub iters: u64,
    /// `done` only: nanoseconds of the run, min, median, max (the median rounded).
    pub elapsed_ns: u64,
    /// `done` only: min, median and max latency in nanoseconds.
    pub lat_ns: [u64; 3],
}

/// What a control message is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum CtrlKind {
    /// The manual mode's first message, and its answer.
    Hello,
    /// The end of the READ test, with the initiator's figures.
    Done,
}

impl Ctrl {
    /// The 64 bytes of the message.
    pub fn encode(&self) -> [u8; CTRL_LEN] {
        let mut b = [0u8; CTRL_LEN];
        b[..6].copy_from_slice(CTRL_MAGIC);
        b[6] = CTRL_VERSION;
        b[7] = match self.kind {
            CtrlKind::Hello => 1,
            CtrlKind::Done => 2,
        };
        b[8] = self.op.code();
        b[9] = u8::from(self.initiator);
        for (i, v) in [
            self.size,
            self.iters,
            self.elapsed_ns,
            self.lat_ns[0],
            self.lat_ns[1],
            self.lat_ns[2],
        ]
        .into_iter()
        .enumerate()
        {
            b[16 + 8 * i..24 + 8 * i].copy_from_slice(&v.to_le_bytes());
        }
        b
    }

    /// The message in `b`.
    pub fn decode(b: &[u8]) -> Result<Ctrl> {
        if b.len() < CTRL_LEN || &b[..6] != CTRL_MAGIC || b[6] != CTRL_VERSION {
            return fail(
                "the peer sent a message that is not an rnic-pingpong control message (does it run the same version and --op?)",
            );
        }
        let kind = match b[7] {
            1 => CtrlKind::Hello,
            2 => CtrlKind::Done,
            k => {
                return fail(format!(
                    "the peer sent a control message of unknown kind {k}"
                ))
            }
        };
        let op = Op::from_code(b[8])
            .ok_or_else(|| ToolError(format!("the peer runs an unknown operation {}", b[8])))?;
        let u = |i: usize| u64::from_le_bytes(b[16 + 8 * i..24 + 8 * i].try_into().expect("8"));
        Ok(Ctrl {
            kind,
            initiator: b[9] != 0,
            op,
            size: u(0),
            iters: u(1),
            elapsed_ns: u(2),
            lat_ns: [u(3), u(4), u(5)],
        })
    }

    /// Checks that the peer runs what we run.
    pub fn check_same(&self, cfg: &Config) -> Result<()> {
        if (self.op, self.size, self.iters) != (cfg.op, cfg.size as u64, cfg.iters) {
            return fail(format!(
                "the peer runs --op {} --size {} --iters {}, this side --op {} --size {} --iters {}: both sides need the same --op, --size and --iters",
                self.op.name(),
                self.size,
                self.iters,
                cfg.op.name(),
                cfg.size,
                cfg.iters
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pingpong::tests::cfg;

    #[test]
    fn control_messages_round_trip_and_compare_tests() {
        let c = Ctrl {
            kind: CtrlKind::Done,
            op: Op::Read,
            size: 4096,
            iters: 1000,
            elapsed_ns: 123,
            lat_ns: [1, 2, 3],
            initiator: true,
        };
        let b = c.encode();
        assert_eq!(Ctrl::decode(&b).unwrap(), c);
        assert!(c.check_same(&cfg(Op::Read)).is_ok());
        let e = c.check_same(&cfg(Op::Write)).unwrap_err();
        assert!(
            e.0.contains("both sides need the same --op, --size and --iters"),
            "{e}"
        );
        let mut bad = b;
        bad[0] = b'X';
        assert!(Ctrl::decode(&bad).is_err());
        assert!(Ctrl::decode(&b[..10]).is_err());
    }
}
