//! The error of rnic-pingpong (with `--ibv-compat`), `rnic-perf --perftest` and
//! rnic-features: one line saying what went wrong and what to do about it, which the
//! binary prints after its name before it exits with status 1 (README, "On the host,
//! without a VM", for what a lost function says).

use std::time::Duration;

/// What went wrong, and what to do about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolError(pub String);

impl std::fmt::Display for ToolError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ToolError {}

/// Result of a tool's step.
pub type Result<T> = std::result::Result<T, ToolError>;

/// Fails with `msg`.
pub(crate) fn fail<T>(msg: impl Into<String>) -> Result<T> {
    Err(ToolError(msg.into()))
}

/// Adds what was being done to a driver error.
pub(crate) fn drv(what: &str) -> impl FnOnce(rnic_driver::Error) -> ToolError + '_ {
    move |e| ToolError(format!("{what}: {e}"))
}

/// The error of a wait for `what` that the time limit `limit` ended.
pub(crate) fn timed_out(limit: Option<Duration>, what: &str) -> ToolError {
    ToolError(format!(
        "timed out after {} s waiting for {what} (raise --time-limit for long runs)",
        limit.unwrap_or_default().as_secs_f64()
    ))
}
