//! What `rnic-admin` reads and prints: member names, MAC addresses and sizes on its command
//! line, and its reports of the PF's admin commands (README "Administering the device";
//! the commands are `rnic_driver::admin`'s, docs/hardware-interface.md §12).

use std::fmt::Write;

use rnic_abi::admin::{MemberInfo, MemberStats, PortStats, Quota, MEMBER_ENABLED, MEMBER_LINK_UP};
use rnic_abi::gid;
use rnic_driver::{Device, Result};
use serde::Serialize;

/// A member id from its name: `pf`, `vfN` (VF N), or the number itself.
pub fn parse_member(s: &str) -> Option<u32> {
    if s.eq_ignore_ascii_case("pf") {
        return Some(rnic_abi::admin::MEMBER_PF);
    }
    if let Some(n) = s.strip_prefix("vf").or_else(|| s.strip_prefix("VF")) {
        return n.parse::<u32>().ok()?.checked_add(1);
    }
    s.parse().ok()
}

/// The name of member `member`: `pf` or `vfN`.
pub fn member_name(member: u32) -> String {
    match member {
        0 => "pf".into(),
        n => format!("vf{}", n - 1),
    }
}

/// A MAC address from `aa:bb:cc:dd:ee:ff`.
pub fn parse_mac(s: &str) -> Option<[u8; 6]> {
    let parts: Vec<&str> = s.split(':').collect();
    if parts.len() != 6 {
        return None;
    }
    let mut mac = [0u8; 6];
    for (b, p) in mac.iter_mut().zip(parts) {
        *b = u8::from_str_radix(p, 16).ok()?;
    }
    Some(mac)
}

/// `aa:bb:cc:dd:ee:ff`.
pub fn format_mac(mac: &[u8; 6]) -> String {
    mac.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// The counts of `q`, named as reports name them, in the order of [`Quota`].
pub fn quota_list(q: &Quota) -> [(&'static str, u32); 8] {
    [
        ("qps", q.qps),
        ("cqs", q.cqs),
        ("mrs", q.mrs),
        ("pds", q.pds),
        ("mr_pages", q.mr_pages),
        ("doorbell_pages", q.doorbell_pages),
        ("dma_windows", q.dma_windows),
        ("dma_pages", q.dma_pages),
    ]
}

const SIZE_UNITS: [(&str, u32); 5] = [("", 0), ("K", 10), ("M", 20), ("G", 30), ("T", 40)];

/// A size in bytes from `N` or `N` with a suffix `K`, `M`, `G` or `T` (powers of 1024;
/// either case, optionally followed by `iB`, as [`format_size`] prints them), or `N B`.
pub fn parse_size(s: &str) -> Option<u64> {
    let s = s.trim();
    let digits = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (number, suffix) = s.split_at(digits);
    let number: u64 = number.parse().ok()?;
    let suffix = suffix.trim_start();
    let unit = suffix
        .strip_suffix("iB")
        .filter(|u| !u.is_empty())
        .or_else(|| suffix.strip_suffix('B'))
        .unwrap_or(suffix);
    let (_, shift) = SIZE_UNITS
        .iter()
        .find(|(name, _)| name.eq_ignore_ascii_case(unit))?;
    number.checked_mul(1 << shift)
}

/// `bytes` in whole 4 KiB pages, rounded up; `None` beyond what a [`Quota`] counts.
pub fn pages_of(bytes: u64) -> Option<u32> {
    u32::try_from(bytes.div_ceil(rnic_abi::PAGE_SIZE)).ok()
}

/// `bytes` in the largest binary unit it reaches, with at most one decimal: `0B`,
/// `4KiB`, `1.5GiB`, `16TiB`.
pub fn format_size(bytes: u64) -> String {
    let (unit, shift) = SIZE_UNITS
        .iter()
        .rev()
        .find(|(_, shift)| bytes >> shift > 0)
        .copied()
        .unwrap_or(SIZE_UNITS[0]);
    if shift == 0 {
        return format!("{bytes}B");
    }
    // Tenths of the unit, rounded to the nearest.
    let tenths = (u128::from(bytes) * 10 + (1u128 << (shift - 1))) >> shift;
    match tenths % 10 {
        0 => format!("{}{unit}iB", tenths / 10),
        d => format!("{}.{d}{unit}iB", tenths / 10),
    }
}

/// `pages` 4 KiB pages as [`format_size`] prints their bytes.
pub fn format_pages(pages: u32) -> String {
    format_size(u64::from(pages) * rnic_abi::PAGE_SIZE)
}

/// Resource counts as reports show them: a JSON object `{"qps": n, ...}`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts(pub Quota);

impl Serialize for Counts {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let list = quota_list(&self.0);
        let mut map = s.serialize_map(Some(list.len()))?;
        for (name, value) in list {
            map.serialize_entry(name, &value)?;
        }
        map.end()
    }
}

impl Counts {
    /// `qps N cqs N ... dma_windows N dma_memory SIZE`: the counts, with the DMA pages
    /// as the memory they cover ([`format_pages`]).
    pub fn text(&self) -> String {
        quota_list(&self.0)
            .iter()
            .map(|&(name, value)| match name {
                "dma_pages" => format!("dma_memory {}", format_pages(value)),
                _ => format!("{name} {value}"),
            })
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// One member as `rnic-admin` reports it.
#[derive(Debug, Clone, Serialize)]
pub struct MemberReport {
    /// Member id (0 = PF, n = VF n-1).
    pub member: u32,
    /// `pf` or `vfN`.
    pub name: String,
    /// Enabled.
    pub enabled: bool,
    /// Link up.
    pub link_up: bool,
    /// MAC address.
    pub mac: String,
    /// GID.
    pub gid: String,
    /// Quota.
    pub quota: Counts,
    /// Usage.
    pub usage: Counts,
}

impl From<MemberInfo> for MemberReport {
    fn from(m: MemberInfo) -> Self {
        Self {
            member: m.member,
            name: member_name(m.member),
            enabled: m.flags & MEMBER_ENABLED != 0,
            link_up: m.flags & MEMBER_LINK_UP != 0,
            mac: format_mac(&m.mac),
            gid: gid::ip(&m.gid).to_string(),
            quota: Counts(m.quota),
            usage: Counts(m.usage),
        }
    }
}

/// The whole device as `rnic-admin vfs` and `quota show` report it.
#[derive(Debug, Clone, Serialize)]
pub struct DeviceReport {
    /// TotalVFs.
    pub total_vfs: u16,
    /// VFs enabled.
    pub num_vfs: u16,
    /// Device totals.
    pub totals: Counts,
    /// What no quota holds.
    pub unassigned: Counts,
    /// Every member, PF first.
    pub members: Vec<MemberReport>,
}

impl DeviceReport {
    /// Queries the PF `device` for every member.
    pub fn gather(device: &Device) -> Result<Self> {
        let q = device.admin_query()?;
        let members = (0..=u32::from(q.total_vfs))
            .map(|m| device.query_member(m).map(MemberReport::from))
            .collect::<Result<Vec<_>>>()?;
        Ok(Self {
            total_vfs: q.total_vfs,
            num_vfs: q.num_vfs,
            totals: Counts(q.totals),
            unassigned: Counts(q.unassigned),
            members,
        })
    }

    /// `rnic-admin vfs`: one line per member.
    pub fn vfs_text(&self) -> String {
        let mut s = format!("VFs: {} of {} enabled\n", self.num_vfs, self.total_vfs);
        let _ = writeln!(
            s,
            "{:<6} {:<8} {:<5} {:<17} {:<22} {:>9} {:>9} {:>13} {:>17}",
            "MEMBER", "STATE", "LINK", "MAC", "GID", "QPS", "MRS", "DMA_WINDOWS", "DMA_MEMORY"
        );
        for m in &self.members {
            let (usage, quota) = (&m.usage.0, &m.quota.0);
            let _ = writeln!(
                s,
                "{:<6} {:<8} {:<5} {:<17} {:<22} {:>9} {:>9} {:>13} {:>17}",
                m.name,
                if m.enabled { "enabled" } else { "disabled" },
                if m.link_up { "up" } else { "down" },
                m.mac,
                m.gid,
                format!("{}/{}", usage.qps, quota.qps),
                format!("{}/{}", usage.mrs, quota.mrs),
                format!("{}/{}", usage.dma_windows, quota.dma_windows),
                format!(
                    "{}/{}",
                    format_pages(usage.dma_pages),
                    format_pages(quota.dma_pages)
                ),
            );
        }
        s
    }

    /// `rnic-admin quota show`: totals, and each member's quota and usage.
    pub fn quota_text(&self) -> String {
        let mut s = format!("totals:     {}\n", self.totals.text());
        let _ = writeln!(s, "unassigned: {}", self.unassigned.text());
        for m in &self.members {
            let _ = writeln!(s, "{}:", m.name);
            let _ = writeln!(s, "  quota: {}", m.quota.text());
            let _ = writeln!(s, "  usage: {}", m.usage.text());
        }
        s
    }
}

/// A member's counters, named for reports: `{"member": 1, "name": "vf0", "tx_packets":
/// ..., ...}` in JSON.
#[derive(Debug, Clone, Serialize)]
pub struct StatsReport {
    /// Member id.
    pub member: u32,
    /// `pf` or `vfN`.
    pub name: String,
    /// The counters by name, as [`stat_list`] orders them.
    #[serde(flatten)]
    pub counters: std::collections::BTreeMap<&'static str, u64>,
    /// The counters in [`stat_list`] order, for text.
    #[serde(skip)]
    order: Vec<(&'static str, u64)>,
}

/// The counters of `c`, named and in the order reports print them.
pub fn stat_list(c: &MemberStats) -> Vec<(&'static str, u64)> {
    vec![
        ("tx_packets", c.tx_packets),
        ("tx_bytes", c.tx_bytes),
        ("rx_packets", c.rx_packets),
        ("rx_bytes", c.rx_bytes),
        ("rx_errors", c.rx_errors),
        ("retransmits", c.retransmits),
        ("rnr_naks_sent", c.rnr_naks_sent),
        ("tx_link_down", c.tx_link_down),
    ]
}

impl StatsReport {
    /// Member `member`'s counters from the PF `device`.
    pub fn gather(device: &Device, member: u32) -> Result<Self> {
        let order = stat_list(&device.member_stats(member)?);
        Ok(Self {
            member,
            name: member_name(member),
            counters: order.iter().copied().collect(),
            order,
        })
    }

    /// One line: the member's name and its counters.
    pub fn text(&self) -> String {
        let mut s = format!("{}:", self.name);
        for (name, value) in &self.order {
            let _ = write!(s, " {name} {value}");
        }
        s.push('\n');
        s
    }
}

/// The network port's counters, named for reports: `{"kind": "eth", "tx_frames": ...}`
/// in JSON.
#[derive(Debug, Clone, Serialize)]
pub struct PortReport {
    /// `none`, `udp` or `eth`.
    pub kind: &'static str,
    /// The counters by name.
    #[serde(flatten)]
    pub counters: std::collections::BTreeMap<&'static str, u64>,
    /// The counters in layout order, for text.
    #[serde(skip)]
    order: Vec<(&'static str, u64)>,
}

impl PortReport {
    /// The port counters of the PF `device`.
    pub fn gather(device: &Device) -> Result<Self> {
        Ok(Self::of(&device.port_stats()?))
    }

    /// The report of `p`.
    pub fn of(p: &PortStats) -> Self {
        let order = p.named().to_vec();
        Self {
            kind: p.kind_name(),
            counters: order.iter().copied().collect(),
            order,
        }
    }

    /// One line: `port (KIND):` and the counters; a device without a port says so.
    pub fn text(&self) -> String {
        if self.kind == "none" {
            return "port: none (rnicd runs without --net)\n".into();
        }
        let mut s = format!("port ({}):", self.kind);
        for (name, value) in &self.order {
            let _ = write!(s, " {name} {value}");
        }
        s.push('\n');
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn member_names_round_trip() {
        assert_eq!(parse_member("pf"), Some(0));
        assert_eq!(parse_member("vf0"), Some(1));
        assert_eq!(parse_member("vf3"), Some(4));
        assert_eq!(parse_member("2"), Some(2));
        assert_eq!(parse_member("vfx"), None);
        for m in 0..5 {
            assert_eq!(parse_member(&member_name(m)), Some(m));
        }
    }

    #[test]
    fn port_reports_name_every_counter() {
        let p = PortStats {
            kind: rnic_abi::admin::PORT_ETH,
            tx_frames: 7,
            rx_kernel_dropped: 3,
            ..PortStats::default()
        };
        let r = PortReport::of(&p);
        let text = r.text();
        assert!(
            text.starts_with("port (eth): tx_frames 7 tx_bytes 0 "),
            "{text}"
        );
        assert!(text.contains(" rx_kernel_dropped 3 "), "{text}");
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(
            (json["kind"].as_str(), json["tx_frames"].as_u64()),
            (Some("eth"), Some(7))
        );
        assert_eq!(
            PortReport::of(&PortStats::default()).text(),
            "port: none (rnicd runs without --net)\n"
        );
    }

    #[test]
    fn sizes_parse_and_print() {
        assert_eq!(parse_size("4096"), Some(4096));
        assert_eq!(parse_size("1K"), Some(1024));
        assert_eq!(parse_size("3m"), Some(3 << 20));
        assert_eq!(parse_size("2G"), Some(2 << 30));
        assert_eq!(parse_size("16T"), Some(16 << 40));
        assert_eq!(parse_size("16TiB"), Some(16 << 40));
        assert_eq!(parse_size("512B"), Some(512));
        for bad in ["", "G", "1.5G", "1P", "-1", "1 GG", "99999999T"] {
            assert_eq!(parse_size(bad), None, "{bad:?}");
        }
        // Rounded up to whole pages, and no more than a quota counts.
        assert_eq!(pages_of(0), Some(0));
        assert_eq!(pages_of(1), Some(1));
        assert_eq!(pages_of(4096), Some(1));
        assert_eq!(pages_of(4097), Some(2));
        assert_eq!(pages_of(1 << 30), Some(262144));
        assert_eq!(pages_of(16 << 40), None);
        assert_eq!(pages_of((16 << 40) - 4096), Some(u32::MAX));
        assert_eq!(format_size(0), "0B");
        assert_eq!(format_size(1023), "1023B");
        assert_eq!(format_pages(1), "4KiB");
        assert_eq!(format_size(3 << 29), "1.5GiB");
        assert_eq!(format_pages(u32::MAX), "16TiB");
        assert_eq!(format_pages(u32::MAX / 3), "5.3TiB");
        // What it prints, it parses.
        assert_eq!(parse_size(&format_pages(262144)), Some(1 << 30));
    }

    #[test]
    fn counts_print_dma_memory_in_a_unit_and_dma_pages_exactly_in_json() {
        let c = Counts(Quota {
            qps: 2,
            dma_windows: 7,
            dma_pages: 262145,
            ..Quota::default()
        });
        assert_eq!(
            c.text(),
            "qps 2 cqs 0 mrs 0 pds 0 mr_pages 0 doorbell_pages 0 dma_windows 7 dma_memory 1GiB"
        );
        let json = serde_json::to_value(c).unwrap();
        assert_eq!(json["dma_windows"], 7);
        assert_eq!(json["dma_pages"], 262145);
    }

    #[test]
    fn addresses_parse() {
        let mac = parse_mac("02:52:4e:49:43:0a").unwrap();
        assert_eq!(mac, [2, 0x52, 0x4e, 0x49, 0x43, 10]);
        assert_eq!(format_mac(&mac), "02:52:4e:49:43:0a");
        assert_eq!(parse_mac("02:52:4e"), None);
        // rnic-admin's --gid: the GID grammar (rnic_abi::gid), as everywhere.
        let gid = gid::parse("10.82.0.9").unwrap();
        assert_eq!(&gid[10..], &[0xff, 0xff, 10, 82, 0, 9]);
        assert_eq!(gid::parse("fe80::1").unwrap()[15], 1);
        assert!(gid::parse("nope").is_err());
    }
}
