//! What every tool's command line has: `--wait SECS` (README "On the host, without a
//! VM": a socket another client holds is waited for that long), and the man page and
//! shell completions its clap definition gives ([`generate_if_asked`]).

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

/// With `RNIC_GENERATE` set in the environment, prints what it names for the program whose
/// command line `A` is, and exits: `man` (its man page, roff), `bash`, `zsh` or `fish`
/// (its completion script). `tools/install-docs.sh` installs them this way. Call it first
/// thing in `main`; without the variable it does nothing.
pub fn generate_if_asked<A: clap::CommandFactory>() {
    let Ok(what) = std::env::var("RNIC_GENERATE") else {
        return;
    };
    let mut cmd = A::command();
    let name = cmd.get_name().to_string();
    let mut out = std::io::stdout();
    let shell = match what.as_str() {
        "man" => {
            let code = match clap_mangen::Man::new(cmd).render(&mut out) {
                Ok(()) => 0,
                Err(e) => {
                    eprintln!("{name}: cannot write the man page: {e}");
                    1
                }
            };
            std::process::exit(code);
        }
        "bash" => clap_complete::Shell::Bash,
        "zsh" => clap_complete::Shell::Zsh,
        "fish" => clap_complete::Shell::Fish,
        other => {
            eprintln!("{name}: RNIC_GENERATE={other:?}: give man, bash, zsh or fish");
            std::process::exit(2);
        }
    };
    clap_complete::generate(shell, &mut cmd, name, &mut out);
    std::process::exit(0);
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
