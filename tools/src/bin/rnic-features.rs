//! rnic-features: self-checking runs of the advanced features (datasheet §14) between two
//! rnic functions of one guest (README, "Advanced verbs"). The logic lives in
//! `rnic_tools::features`.

use std::path::PathBuf;

use clap::{Parser, ValueEnum};
use rnic_tools::features::{self, Functions, Scenario};

/// Runs a self-checking scenario between two rnic functions of this guest (A: the first,
/// B: the second) and prints one line per check.
///
/// dc: one DC initiator on A reaches three DC targets on B (distinct keys) with SENDs and
/// RDMA WRITEs interleaved across them, then READs everything back; a WR with a wrong DC
/// key completes REM_ACCESS_ERR. indirect-keys: an indirect key over three regions of B is
/// the rkey of a WRITE (scatter) and a READ (gather), a pattern key gathers strided data,
/// and a WRITE past the indirect key's end completes REM_ACCESS_ERR touching nothing.
/// ethernet: each function's Ethernet queues beside its RDMA objects: frames and RDMA
/// WRITEs from A to B interleaved, each arriving where it belongs and nowhere else.
/// dma-isolation (in a guest with an IOMMU, where the functions are driven through VFIO):
/// registering a page at an IOVA this process never mapped fails with DMA_ERROR; a heap
/// buffer registered in place takes an RDMA WRITE, and once deregistered its IOVA is
/// refused again; registering another process's page by its guest-physical address (a
/// child process holds secret bytes there) fails with DMA_ERROR. Without an IOMMU the
/// device reads that process's secret, and the check fails saying so.
///
/// Ends with `rnic-features: all N checks passed` (exit 0), or `rnic-features: FAILED: ...`
/// naming what failed (exit 1, on standard error).
#[derive(Parser, Debug)]
#[command(name = "rnic-features", version)]
struct Args {
    #[command(flatten)]
    wait: rnic_tools::cli::WaitOption,

    /// The scenario.
    scenario: Which,

    /// The PCI addresses of the two functions, e.g. --pci 0000:00:03.0 --pci 0000:00:04.0
    /// (in a VM); by default the first two rnic functions on the PCI bus.
    #[arg(long, value_name = "BDF", num_args = 1, conflicts_with = "vfio_user")]
    pci: Vec<String>,

    /// The vfio-user sockets of the two functions (host use); the second shares the
    /// first's memory, as two VFs of one VM do.
    #[arg(long, value_name = "PATH", num_args = 1)]
    vfio_user: Vec<PathBuf>,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum Which {
    /// The Dynamically Connected transport.
    Dc,
    /// Indirect and pattern memory keys.
    IndirectKeys,
    /// What the IOMMU keeps from the device (a guest with an IOMMU, VFIO transport).
    DmaIsolation,
    /// The Ethernet queues beside RDMA on the same functions.
    Ethernet,
    /// The dma-isolation scenario's child process: holds a page of secret bytes.
    #[value(hide = true)]
    HoldSecret,
}

fn main() {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    rnic_tools::cli::generate_if_asked::<Args>();
    let args = Args::parse();
    args.wait.apply();
    if let Which::HoldSecret = args.scenario {
        // A child of dma-isolation: its stdout carries only the page's address.
        if let Err(e) = features::hold_secret() {
            eprintln!("rnic-features {}: {e}", features::HOLD_SECRET);
            std::process::exit(1);
        }
        return;
    }
    match run(&args) {
        Ok(n) => println!("rnic-features: all {n} checks passed"),
        Err(e) => {
            eprintln!("rnic-features: FAILED: {e}");
            std::process::exit(1);
        }
    }
}

fn run(args: &Args) -> Result<usize, String> {
    let two = |n: usize, what: &str| {
        if n == 2 {
            Ok(())
        } else {
            Err(format!(
                "give {what} exactly twice (A, then B), not {n} times"
            ))
        }
    };
    let functions = if !args.vfio_user.is_empty() {
        two(args.vfio_user.len(), "--vfio-user PATH")?;
        Functions::VfioUser(args.vfio_user[0].clone(), args.vfio_user[1].clone())
    } else if !args.pci.is_empty() {
        two(args.pci.len(), "--pci BDF")?;
        Functions::Pci(args.pci[0].clone(), args.pci[1].clone())
    } else {
        Functions::FirstTwoPci
    };
    let scenario = match args.scenario {
        Which::Dc => Scenario::Dc,
        Which::IndirectKeys => Scenario::IndirectKeys,
        Which::Ethernet => Scenario::Ethernet,
        Which::DmaIsolation => Scenario::DmaIsolation(
            std::env::current_exe().map_err(|e| format!("find this program's path: {e}"))?,
        ),
        Which::HoldSecret => unreachable!("handled in main"),
    };
    features::run(&functions, scenario, &mut |line| println!("{line}")).map_err(|e| e.to_string())
}
