//! What every tool's command line has: `--wait SECS` (README "On the host, without a
//! VM": a socket another client holds is waited for that long).

use std::time::Duration;

use rnic_driver::transport::vfio_user::{set_default_wait, DEFAULT_WAIT};

/// `--wait SECS`, the option every tool takes (flatten it into the tool's arguments and
/// call [`WaitOption::apply`] before connecting).
#[derive(clap::Args, Debug, Clone, Copy)]
pub struct WaitOption {
    /// Wait up to SECS for a vfio-user socket that another client holds (rnicd serves
    /// one client per socket at a time: a VMM or another tool) before giving up.
    #[arg(long, value_name = "SECS", default_value_t = DEFAULT_WAIT.as_secs_f64(), value_parser = parse_wait, global = true)]
    pub wait: f64,
}

impl WaitOption {
    /// Makes the wait the process-wide default ([`set_default_wait`]).
    pub fn apply(&self) {
        set_default_wait(Duration::from_secs_f64(self.wait));
    }
}

/// Parses `--wait`: seconds, zero or more.
fn parse_wait(s: &str) -> std::result::Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && (0.0..=1e9).contains(&v) => Ok(v),
        _ => Err(format!("{s:?}: give seconds (0 or more)")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rnic_driver::transport::vfio_user::{default_wait, VfioUserOptions};

    #[test]
    fn the_wait_option_sets_the_process_wide_default() {
        assert!(parse_wait("-1").is_err() && parse_wait("x").is_err());
        assert_eq!(parse_wait("2.5"), Ok(2.5));
        let before = default_wait();
        WaitOption { wait: 2.5 }.apply();
        assert_eq!(VfioUserOptions::default().wait, Duration::from_millis(2500));
        set_default_wait(before);
    }
}
