//! rnic-info: prints what an rnic function is, can do and has (README, "On the host,
//! without a VM"); the report is `rnic_tools::info`'s.

use std::path::PathBuf;

use clap::Parser;
use rnic_driver::Location;
use rnic_tools::info::Report;

/// Prints the PCI identity, ABI version, capabilities and limits of rnic functions, read
/// through each function's command queue.
///
/// Inside a VM it finds every rnic function in sysfs (or the one --pci names) and reaches
/// it through VFIO when the VM has an IOMMU (else through sysfs and the page map); on the
/// host it connects to a vfio-user socket of rnicd (--vfio-user). The report says which
/// transport and whether interrupts work. Opening a function resets it.
#[derive(Parser, Debug)]
#[command(name = "rnic-info", version)]
struct Args {
    #[command(flatten)]
    wait: rnic_tools::cli::WaitOption,

    /// The vfio-user socket of a function served by rnicd (host use).
    #[arg(long, value_name = "PATH", conflicts_with = "pci")]
    vfio_user: Option<PathBuf>,

    /// The PCI address of a function in this machine, e.g. 0000:00:03.0 (in a VM).
    #[arg(long, value_name = "BDF")]
    pci: Option<String>,

    /// Print JSON (an array of reports) instead of text.
    #[arg(long)]
    json: bool,

    /// Reset each function through its transport first, as a VMM would (vfio-user
    /// DEVICE_RESET, VFIO_DEVICE_RESET, or the sysfs `reset` file), then open it.
    #[arg(long)]
    function_reset: bool,
}

fn main() {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    rnic_tools::cli::generate_if_asked::<Args>();
    let args = Args::parse();
    args.wait.apply();
    if let Err(e) = run(&args) {
        eprintln!("rnic-info: {e}");
        std::process::exit(1);
    }
}

fn run(args: &Args) -> rnic_driver::Result<()> {
    let locations = match (&args.vfio_user, &args.pci) {
        (Some(path), _) => vec![Location::VfioUser(path.clone())],
        (None, Some(bdf)) => vec![Location::Pci(bdf.clone())],
        (None, None) => {
            let all = Location::all_pci()?;
            if all.is_empty() {
                return Err(rnic_driver::Error::NotFound(
                    "no rnic function on this machine's PCI bus; on the host, use --vfio-user PATH"
                        .into(),
                ));
            }
            all
        }
    };
    let mut reports = Vec::new();
    for location in &locations {
        let transport = location.open_transport()?;
        if args.function_reset {
            transport.function_reset()?;
        }
        let device = rnic_driver::Device::open(transport)?;
        reports.push(Report::gather(&location.to_string(), &device)?);
    }
    if args.json {
        let json = serde_json::to_string_pretty(&reports)
            .map_err(|e| rnic_driver::Error::Device(format!("cannot encode JSON: {e}")))?;
        println!("{json}");
    } else {
        for r in &reports {
            print!("{}", r.text());
        }
    }
    Ok(())
}
