//! rnic-admin: administers an rnic device through its PF's admin queue (README,
//! "Administering the device"; docs/hardware-interface.md §12). Its reports are
//! `rnic_tools::admin`'s.

use std::path::PathBuf;

use clap::{Parser, Subcommand};
use rnic_abi::admin::Quota;
use rnic_abi::gid;
use rnic_abi::migration::MigrateQpReq;
use rnic_driver::{Device, Error, Location};
use rnic_tools::admin::{
    member_name, pages_of, parse_mac, parse_member, parse_size, Counts, DeviceReport, PortReport,
    StatsReport,
};
use serde::Serialize;

/// Administers an rnic device through the admin queue of its PF: VF enable, quotas,
/// addresses, link state, counters, VF reset and QP migration.
///
/// On the host it connects to the PF's vfio-user socket (--vfio-user, the host playing the
/// PF's VMM); inside a VM that owns the PF it finds the PF in sysfs (or the one --pci
/// names). Opening the PF resets the PF's own objects; VFs and device-wide settings
/// (quotas, addresses, link states, VF enables) are kept.
///
/// With --control DIR (rnicd's socket directory), `stats`, `res` and `metrics` read
/// rnicd's read-only control socket instead: live, while VMs hold every function, the PF
/// included, and without resetting anything (datasheet §12.9).
///
/// Members are named `pf`, `vf0`, `vf1`, ... or by member id (0 = PF, n = VF n-1).
#[derive(Parser, Debug)]
#[command(name = "rnic-admin", version)]
struct Args {
    #[command(flatten)]
    wait: rnic_tools::cli::WaitOption,

    /// The vfio-user socket of the PF (host use).
    #[arg(long, value_name = "PATH", conflicts_with = "pci", global = true)]
    vfio_user: Option<PathBuf>,

    /// The PCI address of the PF in this machine, e.g. 0000:00:03.0 (in a VM).
    #[arg(long, value_name = "BDF", global = true)]
    pci: Option<String>,

    /// Print JSON instead of text.
    #[arg(long, global = true)]
    json: bool,

    /// rnicd's socket directory (or its control.sock): `stats`, `res` and `metrics` read
    /// the read-only control socket there instead of the PF's admin queue.
    #[arg(long, value_name = "DIR", global = true)]
    control: Option<PathBuf>,

    /// With --control: report again every SECS seconds until interrupted.
    #[arg(long, value_name = "SECS", global = true)]
    watch: Option<f64>,

    /// With --watch: stop after N reports.
    #[arg(long, value_name = "N", global = true)]
    count: Option<u64>,

    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Lists the members (`vfs`) or enables the first N VFs and disables the rest
    /// (`vfs enable N`; disabling resets a VF).
    Vfs {
        #[command(subcommand)]
        action: Option<VfsAction>,
    },
    /// Shows or sets quotas.
    Quota {
        #[command(subcommand)]
        action: QuotaAction,
    },
    /// Sets a member's MAC address (and GID with --gid).
    Mac {
        /// The member.
        #[arg(value_parser = member)]
        member: u32,
        /// The new MAC, aa:bb:cc:dd:ee:ff.
        #[arg(value_parser = mac)]
        mac: [u8; 6],
        /// A new GID too: an IPv4 address (mapped), an IPv6 address or 32 hex digits.
        #[arg(long, value_parser = parse_gid)]
        gid: Option<[u8; 16]>,
    },
    /// Sets a member's link state: `up` or `down` (down: it sends and receives nothing).
    Link {
        /// The member.
        #[arg(value_parser = member)]
        member: u32,
        /// `up` or `down`.
        #[arg(value_parser = ["up", "down"])]
        state: String,
    },
    /// Sets a VF's Ethernet spoof check and trust, as `ip link set PF vf N spoofchk
    /// on|off trust on|off` does on hardware (datasheet §15.6). VFs start with spoof
    /// check on and trust off.
    VfEth {
        /// The member (a VF).
        #[arg(value_parser = member)]
        member: u32,
        /// Drop frames from other source MACs (and RoCEv2 from other IPv4 addresses).
        #[arg(long, value_parser = ["on", "off"], default_value = "on")]
        spoofchk: String,
        /// Allow promiscuous and all-multicast reception.
        #[arg(long, value_parser = ["on", "off"], default_value = "off")]
        trust: String,
    },
    /// Gives a member its sessions: UDP source ports its messages may leave from
    /// (multipath; none removes them).
    Sessions {
        /// The member.
        #[arg(value_parser = member)]
        member: u32,
        /// Up to 8 distinct non-zero UDP ports; session i is the i-th.
        ports: Vec<u16>,
    },
    /// Prints counters: a member's, the network port's (`port`: GET_PORT_STATS), or
    /// without either every member's and the port's.
    Stats {
        /// The member, or `port`.
        #[arg(value_parser = stats_of)]
        member: Option<StatsOf>,
    },
    /// Lists every function's objects of one kind, as `rdma res show` does (--control).
    Res {
        /// qp, cq, mr, pd or srq.
        #[arg(value_parser = ["qp", "cq", "mr", "pd", "srq"])]
        kind: String,
    },
    /// Prints the counters of `stats` in Prometheus' text format (--control).
    Metrics,
    /// Function-level reset of a VF: destroys everything it holds.
    ResetVf {
        /// The VF.
        #[arg(value_parser = member)]
        member: u32,
    },
    /// Moves a QP from one member to another (MIGRATE_QP).
    Migrate {
        /// Member the QP is on.
        #[arg(long, value_parser = member)]
        from: u32,
        /// Member to move it to.
        #[arg(long, value_parser = member)]
        to: u32,
        /// The QP number.
        #[arg(long, value_parser = number)]
        qpn: u32,
        /// A CQ of the destination to become the QP's send CQ (default: move its own).
        #[arg(long, default_value = "0", value_parser = number)]
        send_cq: u32,
        /// A CQ of the destination to become the QP's receive CQ (default: move its own).
        #[arg(long, default_value = "0", value_parser = number)]
        recv_cq: u32,
        /// Doorbell page of the destination for the QP's doorbells.
        #[arg(long, default_value = "1", value_parser = number)]
        doorbell_page: u32,
    },
}

#[derive(Subcommand, Debug)]
enum VfsAction {
    /// Enables VFs 0..N and disables the others.
    Enable {
        /// How many VFs are to be enabled.
        n: u32,
    },
}

#[derive(Subcommand, Debug)]
enum QuotaAction {
    /// Prints the device totals, what is unassigned, and every member's quota and usage.
    Show,
    /// Changes a member's quota; counts not given keep their value. No count may go below
    /// what the member uses now (of DMA windows and memory: what its VMM has mapped) or
    /// take more than is unassigned (`quota show`).
    Set {
        /// The member.
        #[arg(value_parser = member)]
        member: u32,
        /// Queue pairs.
        #[arg(long)]
        qps: Option<u32>,
        /// Completion queues.
        #[arg(long)]
        cqs: Option<u32>,
        /// Memory regions.
        #[arg(long)]
        mrs: Option<u32>,
        /// Protection domains.
        #[arg(long)]
        pds: Option<u32>,
        /// Pages of memory regions.
        #[arg(long)]
        mr_pages: Option<u32>,
        /// Doorbell pages (pages 0..N of the function's doorbell BAR).
        #[arg(long)]
        doorbell_pages: Option<u32>,
        /// DMA windows: DMA_MAP mappings the member's VMM may hold at once.
        #[arg(long)]
        dma_windows: Option<u32>,
        /// DMA memory the member's windows may cover in all: bytes, with an optional K,
        /// M, G or T suffix (powers of 1024, e.g. 512M, 2G), rounded up to whole 4 KiB
        /// pages (the quota counts pages; at most 16T - 4K).
        #[arg(long, value_name = "SIZE", value_parser = dma_memory)]
        dma_memory: Option<u32>,
    },
}

fn member(s: &str) -> Result<u32, String> {
    parse_member(s).ok_or_else(|| format!("{s:?} is no member: use pf, vfN or a member id"))
}

/// What `stats` reports on.
#[derive(Debug, Clone, Copy)]
enum StatsOf {
    Member(u32),
    Port,
}

fn stats_of(s: &str) -> Result<StatsOf, String> {
    if s.eq_ignore_ascii_case("port") {
        return Ok(StatsOf::Port);
    }
    parse_member(s)
        .map(StatsOf::Member)
        .ok_or_else(|| format!("{s:?} is no member or port: use pf, vfN, a member id or port"))
}

/// What `stats` without a member reports: every member's counters and the port's.
#[derive(Serialize)]
struct AllStats {
    members: Vec<StatsReport>,
    port: PortReport,
}

fn mac(s: &str) -> Result<[u8; 6], String> {
    parse_mac(s).ok_or_else(|| format!("{s:?} is no MAC address (aa:bb:cc:dd:ee:ff)"))
}

fn parse_gid(s: &str) -> Result<[u8; 16], String> {
    gid::parse(s).map_err(|e| format!("{s:?}: {e}"))
}

/// `--dma-memory`: a size, in 4 KiB pages rounded up.
fn dma_memory(s: &str) -> Result<u32, String> {
    let bytes = parse_size(s).ok_or_else(|| {
        format!("{s:?} is no size: bytes, with an optional K, M, G or T suffix (e.g. 512M)")
    })?;
    pages_of(bytes).ok_or_else(|| format!("{s}: more than a quota counts (16T - 4K)"))
}

fn number(s: &str) -> Result<u32, String> {
    let parsed = match s.strip_prefix("0x") {
        Some(hex) => u32::from_str_radix(hex, 16),
        None => s.parse(),
    };
    parsed.map_err(|e| format!("{s:?}: {e}"))
}

fn main() {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    rnic_tools::cli::generate_if_asked::<Args>();
    let args = Args::parse();
    args.wait.apply();
    if let Err(e) = run(&args) {
        eprintln!("rnic-admin: {e}");
        std::process::exit(1);
    }
}

fn open(args: &Args) -> rnic_driver::Result<Device> {
    let location = match (&args.vfio_user, &args.pci) {
        (Some(path), _) => Location::VfioUser(path.clone()),
        (None, Some(bdf)) => Location::Pci(bdf.clone()),
        (None, None) => {
            // The PF is the one function that reports admin capability; find it by its
            // device ID.
            let all = Location::all_pci()?;
            let mut pfs = Vec::new();
            for l in all {
                if let Location::Pci(bdf) = &l {
                    let id = std::fs::read_to_string(format!("/sys/bus/pci/devices/{bdf}/device"))
                        .unwrap_or_default();
                    if u16::from_str_radix(id.trim().trim_start_matches("0x"), 16).ok()
                        == Some(rnic_abi::pci::PF_DEVICE_ID)
                    {
                        pfs.push(l);
                    }
                }
            }
            pfs.into_iter().next().ok_or_else(|| {
                Error::NotFound(
                    "no rnic PF on this machine's PCI bus; on the host, use --vfio-user PATH"
                        .into(),
                )
            })?
        }
    };
    let device = location.open()?;
    if device.query_device()?.caps & rnic_abi::regs::CAP_ADMIN == 0 {
        return Err(Error::Device(format!(
            "{location} is not a PF: only the PF administers the device"
        )));
    }
    Ok(device)
}

fn print<T: Serialize>(
    json: bool,
    value: &T,
    text: impl FnOnce(&T) -> String,
) -> rnic_driver::Result<()> {
    if json {
        let s = serde_json::to_string_pretty(value)
            .map_err(|e| Error::Device(format!("cannot encode JSON: {e}")))?;
        println!("{s}");
    } else {
        print!("{}", text(value));
    }
    Ok(())
}

/// What a command that changes something reports.
#[derive(Serialize)]
struct Done {
    ok: bool,
    what: String,
}

fn done(json: bool, what: String) -> rnic_driver::Result<()> {
    print(json, &Done { ok: true, what }, |d| format!("{}\n", d.what))
}

/// `stats`, `res` and `metrics` through the control socket in `dir`: once, or every
/// `--watch` seconds.
fn run_control(args: &Args, dir: &std::path::Path) -> rnic_driver::Result<()> {
    use rnic_control::{query, query_text, Request, Resource};
    use rnic_tools::control as report;
    let socket = rnic_control::socket_in(dir);
    let failed = |e: rnic_control::QueryError| {
        Error::Device(format!("control socket {}: {e}", socket.display()))
    };
    let json = args.json;
    let once = || -> rnic_driver::Result<()> {
        match &args.command {
            Command::Stats { member } => {
                let stats: rnic_control::Stats = query(&socket, Request::Stats).map_err(failed)?;
                let only = match member {
                    Some(StatsOf::Member(m)) => Some(member_name(*m)),
                    _ => None,
                };
                print(json, &stats, |s| report::stats_text(s, only.as_deref()))
            }
            Command::Res { kind } => {
                let kind = Resource::from_word(kind).unwrap_or(Resource::Qp);
                let text = query_text(&socket, Request::Res(kind)).map_err(failed)?;
                let parse =
                    |e: serde_json::Error| Error::Device(format!("control socket answer: {e}"));
                if json {
                    let value: serde_json::Value = serde_json::from_str(&text).map_err(parse)?;
                    return print(true, &value, |_| String::new());
                }
                let lines = match kind {
                    Resource::Qp => {
                        report::qp_text(&serde_json::from_str::<Vec<_>>(&text).map_err(parse)?)
                    }
                    Resource::Cq => {
                        report::cq_text(&serde_json::from_str::<Vec<_>>(&text).map_err(parse)?)
                    }
                    Resource::Mr => {
                        report::mr_text(&serde_json::from_str::<Vec<_>>(&text).map_err(parse)?)
                    }
                    Resource::Pd => {
                        report::pd_text(&serde_json::from_str::<Vec<_>>(&text).map_err(parse)?)
                    }
                    Resource::Srq => {
                        report::srq_text(&serde_json::from_str::<Vec<_>>(&text).map_err(parse)?)
                    }
                };
                print!("{lines}");
                Ok(())
            }
            Command::Metrics => {
                print!("{}", query_text(&socket, Request::Metrics).map_err(failed)?);
                Ok(())
            }
            _ => Err(Error::Device(
                "--control serves stats, res and metrics; the other commands go through the PF"
                    .into(),
            )),
        }
    };
    let Some(every) = args.watch else {
        return once();
    };
    let every = std::time::Duration::from_secs_f64(every.max(0.1));
    let mut reports = 0;
    loop {
        once()?;
        reports += 1;
        if args.count.is_some_and(|n| reports >= n) {
            return Ok(());
        }
        println!("--");
        std::thread::sleep(every);
    }
}

fn run(args: &Args) -> rnic_driver::Result<()> {
    if let Some(dir) = &args.control {
        return run_control(args, dir);
    }
    if matches!(args.command, Command::Res { .. } | Command::Metrics) || args.watch.is_some() {
        return Err(Error::Device(
            "res, metrics and --watch read rnicd's control socket: give --control DIR, \
             rnicd's socket directory"
                .into(),
        ));
    }
    let device = open(args)?;
    let json = args.json;
    match &args.command {
        Command::Vfs { action: None } => {
            print(json, &DeviceReport::gather(&device)?, |r| r.vfs_text())
        }
        Command::Vfs {
            action: Some(VfsAction::Enable { n }),
        } => {
            device.set_num_vfs(*n)?;
            done(json, format!("{n} VFs enabled"))
        }
        Command::Quota {
            action: QuotaAction::Show,
        } => print(json, &DeviceReport::gather(&device)?, |r| r.quota_text()),
        Command::Quota {
            action:
                QuotaAction::Set {
                    member,
                    qps,
                    cqs,
                    mrs,
                    pds,
                    mr_pages,
                    doorbell_pages,
                    dma_windows,
                    dma_memory,
                },
        } => {
            let mut c: Quota = device.query_member(*member)?.quota;
            let set = |field: &mut u32, v: &Option<u32>| {
                if let Some(v) = v {
                    *field = *v;
                }
            };
            set(&mut c.qps, qps);
            set(&mut c.cqs, cqs);
            set(&mut c.mrs, mrs);
            set(&mut c.pds, pds);
            set(&mut c.mr_pages, mr_pages);
            set(&mut c.doorbell_pages, doorbell_pages);
            set(&mut c.dma_windows, dma_windows);
            set(&mut c.dma_pages, dma_memory);
            device.set_quota(*member, c)?;
            done(
                json,
                format!("quota of {}: {}", member_name(*member), Counts(c).text()),
            )
        }
        Command::Mac { member, mac, gid } => {
            device.set_address(*member, Some(*mac), *gid)?;
            done(json, format!("address of {} set", member_name(*member)))
        }
        Command::Link { member, state } => {
            device.set_link(*member, state == "up")?;
            done(json, format!("link of {} {state}", member_name(*member)))
        }
        Command::VfEth {
            member,
            spoofchk,
            trust,
        } => {
            let mut flags = 0;
            if spoofchk == "on" {
                flags |= rnic_abi::eth::VF_SPOOF_CHECK;
            }
            if trust == "on" {
                flags |= rnic_abi::eth::VF_TRUST;
            }
            device.set_vf_eth(*member, flags)?;
            done(
                json,
                format!(
                    "{}: spoof check {spoofchk}, trust {trust}",
                    member_name(*member)
                ),
            )
        }
        Command::Sessions { member, ports } => {
            device.set_sessions(*member, ports)?;
            done(
                json,
                format!("sessions of {}: {ports:?}", member_name(*member)),
            )
        }
        Command::Stats {
            member: Some(StatsOf::Member(m)),
        } => print(json, &[StatsReport::gather(&device, *m)?], |r| r[0].text()),
        Command::Stats {
            member: Some(StatsOf::Port),
        } => print(json, &PortReport::gather(&device)?, PortReport::text),
        Command::Stats { member: None } => {
            let members = (0..=u32::from(device.admin_query()?.total_vfs))
                .map(|m| StatsReport::gather(&device, m))
                .collect::<rnic_driver::Result<Vec<_>>>()?;
            let all = AllStats {
                members,
                port: PortReport::gather(&device)?,
            };
            print(json, &all, |a| {
                let members: String = a.members.iter().map(StatsReport::text).collect();
                members + &a.port.text()
            })
        }
        Command::Res { .. } | Command::Metrics => Err(Error::Device(
            "res and metrics read rnicd's control socket: give --control DIR".into(),
        )),
        Command::ResetVf { member } => {
            device.reset_vf(*member)?;
            done(json, format!("{} reset", member_name(*member)))
        }
        Command::Migrate {
            from,
            to,
            qpn,
            send_cq,
            recv_cq,
            doorbell_page,
        } => {
            let resp = device.migrate_qp(&MigrateQpReq {
                from: *from,
                to: *to,
                qpn: *qpn,
                flags: 0,
                send_cq: *send_cq,
                recv_cq: *recv_cq,
                doorbell_page: *doorbell_page,
                reserved: 0,
            })?;
            #[derive(Serialize)]
            struct Migrated {
                qpn: u32,
                from: String,
                to: String,
                pdn: u32,
                send_cq: u32,
                recv_cq: u32,
                mrs_moved: u32,
                cqs_moved: u32,
            }
            let m = Migrated {
                qpn: resp.qpn,
                from: member_name(*from),
                to: member_name(*to),
                pdn: resp.pdn,
                send_cq: resp.send_cq,
                recv_cq: resp.recv_cq,
                mrs_moved: resp.mrs_moved,
                cqs_moved: resp.cqs_moved,
            };
            print(json, &m, |m| {
                format!(
                    "QP {:#x} moved from {} to {}: pd {} send cq {} recv cq {} ({} MRs and {} CQs moved)\n",
                    m.qpn, m.from, m.to, m.pdn, m.send_cq, m.recv_cq, m.mrs_moved, m.cqs_moved
                )
            })
        }
    }
}
