//! `rnic-lab`: judges a lab (docs/labs/README.md).
//!
//! ```text
//! rnic-lab list                 the labs
//! rnic-lab check N              judge your solution of lab N (labs/src/exercises/labN.rs)
//! rnic-lab check N --solution   judge the reference solution
//! rnic-lab capture 6 FILE       write lab 6's traffic to FILE (pcap), for Wireshark
//! ```
//!
//! Exit status 0 when every step passed, 1 when one failed, 2 on a usage error.

use std::process::ExitCode;
use std::time::Duration;

/// How long a lab may run before the program gives up on it (a wait loop that never
/// calls `nic.pause()` keeps the lab device from working).
const WATCHDOG: Duration = Duration::from_secs(120);

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    match args.as_slice() {
        ["list"] => {
            for (n, title) in rnic_labs::LABS {
                println!("{n}  {title}  (docs/labs/lab{n}.md)");
            }
            ExitCode::SUCCESS
        }
        ["check", n, rest @ ..] if rest.is_empty() || rest == ["--solution"] => {
            let Ok(n) = n.parse::<u32>() else {
                return usage();
            };
            std::thread::spawn(|| {
                std::thread::sleep(WATCHDOG);
                eprintln!(
                    "rnic-lab: still running after {WATCHDOG:?}: a loop that waits without \
                     calling nic.pause() keeps the lab device from working"
                );
                std::process::exit(1);
            });
            match rnic_labs::check(n, !rest.is_empty()) {
                Some(report) => {
                    println!("{report}");
                    if report.passed() {
                        ExitCode::SUCCESS
                    } else {
                        ExitCode::FAILURE
                    }
                }
                None => usage(),
            }
        }
        ["capture", "6", file] => match rnic_labs::lab6::capture(std::path::Path::new(file)) {
            Ok(()) => {
                println!("wrote lab 6's frames to {file}: wireshark {file} (docs/wireshark.md)");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("rnic-lab: {e}");
                ExitCode::FAILURE
            }
        },
        _ => usage(),
    }
}

fn usage() -> ExitCode {
    eprintln!("usage: rnic-lab list | rnic-lab check N [--solution] | rnic-lab capture 6 FILE");
    ExitCode::from(2)
}
