//! `rnic-lab`: judges a lab (docs/labs/README.md).
//!
//! ```text
//! rnic-lab list                 the labs
//! rnic-lab check N              judge your solution of lab N (labs/src/exercises/labN.rs)
//! rnic-lab check N --solution   judge the reference solution
//! rnic-lab run N [--solution] (--vfio-user SOCKET | --pci BDF)
//!                               run it on a real function: a socket of a running rnicd
//!                               on the host, or a PCI function in a VM
//! rnic-lab capture 6 FILE       write lab 6's traffic to FILE (pcap), for Wireshark
//! ```
//!
//! Exit status 0 when every step passed, 1 when one failed, 2 on a usage error.

use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use rnic_driver::transport::{self, vfio_user::VfioUserTransport, Transport};
use rnic_labs::nic::{Nic, TransportNic};

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
        ["run", n, rest @ ..] => {
            let (solution, rest) = match rest {
                ["--solution", rest @ ..] => (true, rest),
                rest => (false, rest),
            };
            let Ok(n) = n.parse::<u32>() else {
                return usage();
            };
            let transport = match rest {
                ["--vfio-user", socket] => VfioUserTransport::connect(Path::new(socket))
                    .map(|t| Box::new(t) as Box<dyn Transport>),
                ["--pci", bdf] => transport::open_pci(bdf),
                _ => return usage(),
            };
            let nic = match transport {
                Ok(t) => TransportNic(t),
                Err(e) => {
                    eprintln!("rnic-lab: open the function: {e}");
                    return ExitCode::FAILURE;
                }
            };
            match rnic_labs::run(n, solution, &nic) {
                Some(Ok(line)) => {
                    println!("lab {n} on {}: {line}", nic.describe());
                    ExitCode::SUCCESS
                }
                Some(Err(e)) => {
                    eprintln!("lab {n} on {}: FAILED: {e}", nic.describe());
                    ExitCode::FAILURE
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
    eprintln!(
        "usage: rnic-lab list | rnic-lab check N [--solution] | \
         rnic-lab run N [--solution] (--vfio-user SOCKET | --pci BDF) | \
         rnic-lab capture 6 FILE"
    );
    ExitCode::from(2)
}
