//! Why a verbs command was refused: the status and syndrome of its reply
//! (docs/hardware-interface.md §6.7). The command handlers ([`super::verbs`]) and what
//! they ask of the engine's tables return it; the command dispatch
//! ([`crate::commands`]) turns it into the reply on the wire.

use rnic_abi::cmd::Status;

/// A refused command: what its reply says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VerbsError {
    /// Completion status (never `Ok`).
    pub status: Status,
    /// Status detail: which value or object was wrong.
    pub syndrome: u32,
}

impl VerbsError {
    /// A refusal with `status` and `syndrome`.
    pub fn new(status: Status, syndrome: u32) -> Self {
        Self { status, syndrome }
    }
}
