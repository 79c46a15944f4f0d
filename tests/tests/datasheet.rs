//! The datasheet (docs/hardware-interface.md) holds the values that come from the code, as
//! the code has them: a documented value that differs from the ABI crate, or from what a
//! real rnicd reads at reset, fails here, so the manual cannot drift from the device.
//!
//! Checked: the ABI version wherever the manual states it (its header, §1.3, the
//! `ABI_VERSION` reset value, `QueryDeviceResp`); the register map of §3.3 (offsets, and
//! each reset value the table gives as a number, read from a PF and a VF of a real
//! rnicd); the capability bits of §3.4 (each bit's name and number, every capability of
//! the ABI crate listed, every bit the device sets documented); every command opcode in
//! any table (its number names the command the ABI crate gives it, and every command of
//! the crate is in a table); and every structure size the text gives (`` `Name`, N
//! bytes``, `` `Name` (N bytes)``, `` `Name` (N)`` in a table). And its order: sections
//! numbered one after the other, §13's changes newest first, every rnicd option in
//! §1.1's table.

use std::collections::{BTreeMap, BTreeSet};

use rnic_abi::cmd::Opcode;
use rnic_abi::regs;
use rnic_driver::transport::vfio_user::VfioUserTransport;
use rnic_driver::transport::Transport;
use rnic_tests::Rnicd;

fn datasheet() -> String {
    let path = rnic_tests::vm::repo().join("docs/hardware-interface.md");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The text of section `number` ("3.3", or a chapter: "13"): from its heading to the
/// next heading.
fn section<'a>(doc: &'a str, number: &str) -> &'a str {
    let heading = if number.contains('.') {
        format!("\n### {number} ")
    } else {
        format!("\n## {number}. ")
    };
    let start = doc
        .find(&heading)
        .unwrap_or_else(|| panic!("no section {number}"))
        + 1;
    let rest = &doc[start..];
    let end = rest[4..]
        .find("\n## ")
        .into_iter()
        .chain(rest[4..].find("\n### "))
        .min()
        .map_or(rest.len(), |e| e + 5);
    &rest[..end]
}

/// The cells of the table rows of `text` (header and separator rows included).
fn rows(text: &str) -> impl Iterator<Item = Vec<&str>> {
    text.lines()
        .filter(|l| l.starts_with('|'))
        .map(|l| l.trim_matches('|').split(" | ").map(str::trim).collect())
}

/// `` `NAME` `` to `NAME`.
fn code(cell: &str) -> Option<&str> {
    cell.strip_prefix('`')?.strip_suffix('`')
}

/// A number as the datasheet writes one: `0x1F`, `0x0000_0001` or `256`.
fn number(text: &str) -> Option<u64> {
    let t = text.trim().replace('_', "");
    match t.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => t.parse().ok(),
    }
}

/// The registers of `abi::regs` with their offsets. Every `pub const NAME: u64 = 0x...;`
/// of abi/src/regs.rs must be here (checked), so a new register is checked too.
const REGISTERS: &[(&str, u64)] = &[
    ("MAGIC_REG", regs::MAGIC_REG),
    ("ABI_VERSION", regs::ABI_VERSION),
    ("FUNCTION_INFO", regs::FUNCTION_INFO),
    ("CAPS_LO", regs::CAPS_LO),
    ("CAPS_HI", regs::CAPS_HI),
    ("DEVICE_STATUS", regs::DEVICE_STATUS),
    ("DEVICE_CONTROL", regs::DEVICE_CONTROL),
    ("CMDQ_DESC_LO", regs::CMDQ_DESC_LO),
    ("CMDQ_DESC_HI", regs::CMDQ_DESC_HI),
    ("CMDQ_AVAIL_LO", regs::CMDQ_AVAIL_LO),
    ("CMDQ_AVAIL_HI", regs::CMDQ_AVAIL_HI),
    ("CMDQ_USED_LO", regs::CMDQ_USED_LO),
    ("CMDQ_USED_HI", regs::CMDQ_USED_HI),
    ("CMDQ_SIZE", regs::CMDQ_SIZE),
    ("CMDQ_MSIX_VECTOR", regs::CMDQ_MSIX_VECTOR),
    ("CMDQ_CONTROL", regs::CMDQ_CONTROL),
    ("CMDQ_MAX_SIZE", regs::CMDQ_MAX_SIZE),
    ("DOORBELL_KICK", regs::DOORBELL_KICK),
    ("DOORBELL_PAGES", regs::DOORBELL_PAGES),
    ("USER_KICK_PAGE", regs::USER_KICK_PAGE),
    ("MSIX_VECTORS", regs::MSIX_VECTORS),
    ("ERROR_CODE", regs::ERROR_CODE),
    ("ADMINQ_DESC_LO", regs::ADMINQ_DESC_LO),
    ("ADMINQ_DESC_HI", regs::ADMINQ_DESC_HI),
    ("ADMINQ_AVAIL_LO", regs::ADMINQ_AVAIL_LO),
    ("ADMINQ_AVAIL_HI", regs::ADMINQ_AVAIL_HI),
    ("ADMINQ_USED_LO", regs::ADMINQ_USED_LO),
    ("ADMINQ_USED_HI", regs::ADMINQ_USED_HI),
    ("ADMINQ_SIZE", regs::ADMINQ_SIZE),
    ("ADMINQ_MSIX_VECTOR", regs::ADMINQ_MSIX_VECTOR),
    ("ADMINQ_CONTROL", regs::ADMINQ_CONTROL),
    ("ADMINQ_ERROR_CODE", regs::ADMINQ_ERROR_CODE),
    ("REGS_END", regs::REGS_END),
    ("ADMINQ_OFFSET", regs::ADMINQ_OFFSET),
    ("USER_KICK", regs::USER_KICK),
];

/// Registers the map does not list by name: the admin queue's (one row, `ADMINQ_*`), the
/// end of the register file, the kick page and the queue offset (not registers).
const NOT_IN_THE_MAP: &[&str] = &["REGS_END", "USER_KICK_PAGE", "ADMINQ_OFFSET"];

/// The capability bits of `abi::regs`; as [`REGISTERS`], complete (checked).
const CAPS: &[(&str, u64)] = &[
    ("CAP_CMDQ", regs::CAP_CMDQ),
    ("CAP_DOORBELL_NOTIFY", regs::CAP_DOORBELL_NOTIFY),
    ("CAP_MSIX", regs::CAP_MSIX),
    ("CAP_FUNCTION_RESET", regs::CAP_FUNCTION_RESET),
    ("CAP_RDMA_RC", regs::CAP_RDMA_RC),
    ("CAP_ADMIN", regs::CAP_ADMIN),
    ("CAP_INDIRECT_MKEY", regs::CAP_INDIRECT_MKEY),
    ("CAP_PATTERN_MKEY", regs::CAP_PATTERN_MKEY),
    ("CAP_SEND_VARIANTS", regs::CAP_SEND_VARIANTS),
    ("CAP_SRQ", regs::CAP_SRQ),
    ("CAP_UD", regs::CAP_UD),
    ("CAP_ONE_SHOT_READ", regs::CAP_ONE_SHOT_READ),
    ("CAP_WQE_MMIO", regs::CAP_WQE_MMIO),
    ("CAP_DC", regs::CAP_DC),
    ("CAP_PIPELINED_REG", regs::CAP_PIPELINED_REG),
    ("CAP_SHARED_SQ", regs::CAP_SHARED_SQ),
    ("CAP_SESSIONS", regs::CAP_SESSIONS),
    ("CAP_PAGE_TABLES", regs::CAP_PAGE_TABLES),
    ("CAP_UC", regs::CAP_UC),
    ("CAP_MW", regs::CAP_MW),
    ("CAP_ETH", regs::CAP_ETH),
    ("CAP_FAST_REG", regs::CAP_FAST_REG),
    ("CAP_GSI", regs::CAP_GSI),
    ("CAP_USER_KICK", regs::CAP_USER_KICK),
    ("CAP_GID_TABLE", regs::CAP_GID_TABLE),
    ("CAP_RESIZE_CQ", regs::CAP_RESIZE_CQ),
    ("CAP_RESIZE_SRQ", regs::CAP_RESIZE_SRQ),
    ("CAP_ATOMIC_WRITE", regs::CAP_ATOMIC_WRITE),
    ("CAP_FLUSH", regs::CAP_FLUSH),
    ("CAP_MULTICAST", regs::CAP_MULTICAST),
];

/// The names of abi/src/regs.rs's `pub const NAME: u64` items whose name starts with
/// `CAP_` (`caps`) or not.
fn regs_source_names(caps: bool) -> BTreeSet<String> {
    let path = rnic_tests::vm::repo().join("abi/src/regs.rs");
    let src = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    src.lines()
        .filter_map(|l| l.strip_prefix("pub const ")?.split_once(": u64 ="))
        .map(|(name, _)| name.to_string())
        .filter(|name| name.starts_with("CAP_") == caps)
        .collect()
}

/// The sizes of the ABI crate's structures the datasheet gives a size of, by name (one
/// name may be a structure of several modules: the device's and `uverbs`'s).
fn sizes() -> BTreeMap<&'static str, BTreeSet<usize>> {
    macro_rules! sizes {
        ($($module:ident::$name:ident),* $(,)?) => {{
            let mut m: BTreeMap<&'static str, BTreeSet<usize>> = BTreeMap::new();
            $(m.entry(stringify!($name))
                .or_default()
                .insert(size_of::<rnic_abi::$module::$name>());)*
            m
        }};
    }
    sizes![
        admin::AdminQueryResp,
        admin::PortStats,
        admin::Quota,
        admin::MemberReq,
        admin::MemberInfo,
        admin::MemberStats,
        admin::SetNumVfsReq,
        admin::SetQuotaReq,
        admin::SetAddressReq,
        admin::SetLinkReq,
        migration::AdoptQpReq,
        migration::AdoptQpResp,
        migration::MigrateQpReq,
        migration::MigrateQpResp,
        fast_reg::AllocFastRegMrReq,
        fast_reg::RegDmaMrReq,
        fast_reg::FastRegWqe,
        mw::AllocMwReq,
        mw::AllocMwResp,
        mw::BindMwWqe,
        uverbs::AllocPdResp,
        uverbs::AllocUcontextResp,
        uverbs::CreateCqReq,
        uverbs::CreateCqResp,
        uverbs::CreateQpReq,
        uverbs::CreateQpResp,
        uverbs::CreateSrqReq,
        uverbs::CreateSrqResp,
        uverbs::ResizeCqReq,
        cmd::CmdHeader,
        cmd::RespHeader,
        cmd::QueryDeviceResp,
        cmd::Limits,
        verbs::CreateCqReq,
        verbs::CreateCqResp,
        verbs::DoorbellSlot,
        verbs::CreateEqReq,
        verbs::CreateEqResp,
        verbs::CreateQpReq,
        verbs::CreateQpResp,
        verbs::ModifyQpReq,
        verbs::ObjectReq,
        verbs::ObjectResp,
        verbs::PageList,
        verbs::QueryQpResp,
        verbs::RegMrReq,
        verbs::RegMrResp,
        verbs::ResizeCqReq,
        ctrlq::CreateCtrlqReq,
        ctrlq::CreateCtrlqResp,
        ctrlq::CtrlWqe,
        ctrlq::ReserveMkeysReq,
        ctrlq::ReserveMkeysResp,
        eth::CreateEthQueueReq,
        eth::CreateEthQueueResp,
        eth::EthDesc,
        eth::EthQueueReq,
        eth::EthQueueStats,
        eth::MacEntry,
        eth::QueryEthResp,
        eth::SetEthReq,
        dc::SetDcKeyReq,
        mkey::CreateIndirectKeyReq,
        mkey::CreatePatternKeyReq,
        shared_sq::CreateSharedSqReq,
        shared_sq::CreateSharedSqResp,
        srq::CreateSrqReq,
        srq::CreateSrqResp,
        srq::ModifySrqReq,
        srq::QuerySrqResp,
        srq::ResizeSrqReq,
        uverbs::ResizeSrqReq,
        gid::QueryGidReq,
        gid::QueryGidResp,
        gid::SetGidReq,
        mcast::McastReq,
        mmio::SqWindowResp,
        session::SetSessionsReq,
        eth::SetVfEthReq,
    ]
}

/// Fails with `what` and every line of `wrong`, if there is one.
fn verdict(what: &str, wrong: &[String]) {
    assert!(wrong.is_empty(), "{what}:\n{}", wrong.join("\n"));
}

/// `CreateEq` to `CREATE_EQ`.
fn screaming(op: Opcode) -> String {
    let mut out = String::new();
    for (i, c) in format!("{op:?}").chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            out.push('_');
        }
        out.push(c.to_ascii_uppercase());
    }
    out
}

#[test]
fn the_abi_version_is_the_crates_wherever_the_datasheet_states_it() {
    let doc = datasheet();
    let (major, minor) = (rnic_abi::ABI_MAJOR, rnic_abi::ABI_MINOR);
    let mut wrong = Vec::new();
    let mut expect = |what: &str, ok: bool| {
        if !ok {
            wrong.push(what.to_string());
        }
    };
    expect(
        "the header's `ABI version M.N.`",
        doc.lines()
            .take(5)
            .any(|l| l.starts_with(&format!("ABI version {major}.{minor}."))),
    );
    let s13 = section(&doc, "1.3");
    expect(
        "§1.3's `ABI_MAJOR` = M, `ABI_MINOR` = N",
        s13.contains(&format!("(`ABI_MAJOR` = {major}, `ABI_MINOR` = {minor})")),
    );
    expect(
        "§1.3's `ABI M.N reads 0x...`",
        s13.to_lowercase().contains(&format!(
            "abi {major}.{minor} reads {:#010x}",
            rnic_abi::abi_version()
        )),
    );
    let query = section(&doc, "6.12");
    for (field, value) in [("abi_major", major), ("abi_minor", minor)] {
        let row = rows(query).find(|r| r.get(2) == Some(&format!("`{field}`").as_str()));
        expect(
            &format!("QueryDeviceResp's {field} value"),
            row.and_then(|r| r.last().and_then(|v| number(v))) == Some(u64::from(value)),
        );
    }
    assert!(
        wrong.is_empty(),
        "docs/hardware-interface.md does not state ABI {major}.{minor} in: {wrong:#?}"
    );
}

#[test]
fn the_register_map_and_capability_bits_are_the_crates_and_the_devices() {
    let doc = datasheet();
    let mut wrong = Vec::new();

    // Every register and capability of abi/src/regs.rs is in the lists above.
    let listed: BTreeSet<String> = REGISTERS.iter().map(|(n, _)| n.to_string()).collect();
    assert_eq!(
        regs_source_names(false),
        listed,
        "REGISTERS must list every u64 constant of abi/src/regs.rs"
    );
    let listed: BTreeSet<String> = CAPS.iter().map(|(n, _)| n.to_string()).collect();
    assert_eq!(
        regs_source_names(true),
        listed,
        "CAPS must list every CAP_ constant of abi/src/regs.rs"
    );

    // The reset values, read from a fresh PF and VF.
    let rnicd = Rnicd::start(1, &[]);
    let read = |name: &str| {
        let t = VfioUserTransport::connect(&rnicd.socket(name)).expect("connect");
        REGISTERS
            .iter()
            .filter(|(_, off)| *off < regs::REGS_END)
            .map(|&(n, off)| (n, t.reg_read32(off).expect("register read")))
            .collect::<BTreeMap<_, _>>()
    };
    let (pf, vf) = (read("pf"), read("vf0"));

    // §3.3: each named row's offset, and its reset value where it is a number.
    let map = section(&doc, "3.3");
    let mut documented = BTreeSet::new();
    for row in rows(map).filter(|r| r.len() >= 6) {
        // The admin queue's registers are one row, `ADMINQ_*`.
        let Some(name) = code(row[2]).filter(|n| !n.contains('*')) else {
            continue;
        };
        let Some(&(_, offset)) = REGISTERS.iter().find(|(n, _)| *n == name) else {
            wrong.push(format!("§3.3 lists `{name}`, which abi::regs lacks"));
            continue;
        };
        documented.insert(name);
        if number(row[0]) != Some(offset) {
            wrong.push(format!(
                "§3.3 {name}: offset {} (abi::regs {offset:#05x})",
                row[0]
            ));
        }
        let reset = row[4];
        let (pf_doc, vf_doc) = match reset.split_once(';') {
            Some((p, v)) => (
                p.trim().strip_prefix("PF:").and_then(number),
                v.trim().strip_prefix("VF:").and_then(number),
            ),
            None => (number(reset), number(reset)),
        };
        for (who, doc_value, regs) in [("PF", pf_doc, &pf), ("VF", vf_doc, &vf)] {
            let (Some(want), Some(&got)) = (doc_value, regs.get(name)) else {
                continue;
            };
            if want != u64::from(got) {
                wrong.push(format!(
                    "§3.3 {name}: reset {reset} on the {who}, the device reads {got:#010x}"
                ));
            }
        }
    }
    for (name, _) in REGISTERS {
        if !documented.contains(name)
            && !name.starts_with("ADMINQ_")
            && !NOT_IN_THE_MAP.contains(name)
        {
            wrong.push(format!("§3.3 lacks `{name}`"));
        }
    }

    // §3.4: every capability, at its bit; every bit the device sets, documented.
    let bits = section(&doc, "3.4");
    let mut caps_documented = 0u64;
    for row in rows(bits).filter(|r| r.len() >= 3) {
        let (Some(bit), Some(name)) = (number(row[0]), code(row[1])) else {
            continue;
        };
        if !name.starts_with("CAP_") {
            continue;
        }
        match CAPS.iter().find(|(n, _)| *n == name) {
            Some(&(_, value)) if value == 1 << bit => caps_documented |= value,
            Some(&(_, value)) => wrong.push(format!(
                "§3.4 {name}: bit {bit}, abi::regs bit {}",
                value.trailing_zeros()
            )),
            None => wrong.push(format!("§3.4 lists `{name}`, which abi::regs lacks")),
        }
    }
    for (name, value) in CAPS {
        if caps_documented & value == 0 {
            wrong.push(format!("§3.4 lacks `{name}`"));
        }
    }
    let device_caps = u64::from(pf["CAPS_LO"]) | u64::from(pf["CAPS_HI"]) << 32;
    if device_caps & !caps_documented != 0 {
        wrong.push(format!(
            "the PF sets capability bits {:#x} that §3.4 does not document",
            device_caps & !caps_documented
        ));
    }
    verdict(
        "docs/hardware-interface.md disagrees with the ABI crate or the device",
        &wrong,
    );
}

#[test]
fn every_command_is_in_a_table_under_its_own_opcode() {
    let doc = datasheet();
    let mut wrong = Vec::new();
    let mut documented = BTreeSet::new();
    for row in rows(&doc).filter(|r| r.len() >= 3) {
        let (Some(value), Some(name)) = (number(row[0]), code(row[1])) else {
            continue;
        };
        if !row[0].starts_with("0x") || row[0].len() != 6 || name.contains(' ') {
            continue;
        }
        match Opcode::from_u16(value as u16) {
            Some(op) if screaming(op) == name => {
                documented.insert(value as u16);
            }
            Some(op) => wrong.push(format!("{} is `{}`, not `{name}`", row[0], screaming(op))),
            // Another table's 4-digit numbers (config space, IDs) name no command.
            None if name.chars().all(|c| c.is_ascii_uppercase() || c == '_') => {
                wrong.push(format!("{} `{name}`: no such opcode in abi::cmd", row[0]))
            }
            None => {}
        }
    }
    for value in 0..=u16::MAX {
        if let Some(op) = Opcode::from_u16(value) {
            if !documented.contains(&value) {
                wrong.push(format!("{value:#06x} `{}` is in no table", screaming(op)));
            }
        }
    }
    verdict(
        "docs/hardware-interface.md's command tables disagree with abi::cmd::Opcode",
        &wrong,
    );
}

#[test]
fn every_structure_size_the_datasheet_gives_is_the_crates() {
    let doc = datasheet();
    let sizes = sizes();
    let mut wrong = Vec::new();
    let mut checked = 0;
    // `Name`, N bytes | `Name` (N bytes | `Name` (N)
    let bytes = doc.as_bytes();
    let mut at = 0;
    while let Some(start) = doc[at..].find('`').map(|i| at + i) {
        let Some(len) = doc[start + 1..].find('`') else {
            break;
        };
        let name = &doc[start + 1..start + 1 + len];
        let after = &doc[start + 2 + len..];
        at = start + 2 + len;
        if !name.starts_with(|c: char| c.is_ascii_uppercase())
            || !name.chars().all(|c| c.is_ascii_alphanumeric())
            || name
                .chars()
                .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit())
        {
            continue;
        }
        let digits = |s: &str| -> Option<(usize, usize)> {
            let n = s.chars().take_while(char::is_ascii_digit).count();
            (n > 0).then(|| (s[..n].parse().unwrap_or(0), n))
        };
        let size = if let Some(s) = after.strip_prefix(", ") {
            digits(s).filter(|&(_, n)| s[n..].starts_with(" bytes"))
        } else if let Some(s) = after.strip_prefix(" (") {
            digits(s).filter(|&(_, n)| s[n..].starts_with(" bytes") || s[n..].starts_with(')'))
        } else {
            None
        };
        let Some((size, _)) = size else { continue };
        let line = 1 + bytes[..start].iter().filter(|&&b| b == b'\n').count();
        match sizes.get(name) {
            Some(known) if known.contains(&size) => checked += 1,
            Some(known) => wrong.push(format!(
                "line {line}: `{name}` is {size} bytes here, {known:?} in the ABI crate"
            )),
            None => wrong.push(format!(
                "line {line}: `{name}` ({size} bytes): add it to sizes() in tests/tests/datasheet.rs"
            )),
        }
    }
    assert!(
        checked > 50,
        "only {checked} sizes found: is the pattern still right?"
    );
    verdict(
        "docs/hardware-interface.md's structure sizes disagree with the ABI crate",
        &wrong,
    );
}

#[test]
fn sections_run_in_order_and_the_change_table_newest_first() {
    let doc = datasheet();
    let mut wrong = Vec::new();
    // `## N.` chapters and `### N.M` sections, each one more than the one before.
    let mut last = (0u32, 0u32);
    for line in doc.lines() {
        let parse = |s: &str| -> Option<(u32, u32)> {
            let num = s.split_whitespace().next()?;
            let mut parts = num.trim_end_matches('.').split('.');
            let a = parts.next()?.parse().ok()?;
            let b = parts.next().map_or(Some(0), |b| b.parse().ok())?;
            Some((a, b))
        };
        let Some(n) = line
            .strip_prefix("### ")
            .or_else(|| line.strip_prefix("## "))
            .and_then(parse)
        else {
            continue;
        };
        let next_section = n.0 == last.0 && n.1 == last.1 + 1;
        let next_chapter = n.0 == last.0 + 1 && n.1 == 0;
        if !next_section && !next_chapter {
            wrong.push(format!("`{line}` after section {}.{}", last.0, last.1));
        }
        last = n;
    }
    // §13: one row per change, the newest version first.
    let changes = section(&doc, "13");
    let versions: Vec<(u32, u32)> = rows(changes)
        .filter_map(|r| {
            let (a, b) = r.first()?.split_once('.')?;
            Some((a.parse().ok()?, b.parse().ok()?))
        })
        .collect();
    if let Some(w) = versions.windows(2).find(|w| w[0] < w[1]) {
        wrong.push(format!("§13: {:?} above {:?}", w[0], w[1]));
    }
    assert!(versions.len() > 10, "§13's table not found");
    verdict("docs/hardware-interface.md", &wrong);
}

#[test]
fn every_rnicd_option_is_in_the_table_of_section_1_1() {
    let doc = datasheet();
    let help = std::process::Command::new(rnic_tests::bin("rnicd"))
        .arg("--help")
        .output()
        .expect("rnicd --help");
    let help = String::from_utf8_lossy(&help.stdout);
    let documented: BTreeSet<&str> = rows(section(&doc, "1.1"))
        .filter_map(|r| code(r[0])?.split_whitespace().next())
        .collect();
    let missing: Vec<&str> = help
        .lines()
        .filter_map(|l| l.trim_start().strip_prefix("--"))
        .filter_map(|l| l.split([' ', '=']).next())
        .filter(|o| !matches!(*o, "help" | "version"))
        .filter(|o| !documented.contains(format!("--{o}").as_str()))
        .collect();
    assert!(
        missing.is_empty(),
        "§1.1's option table lacks rnicd's --{}",
        missing.join(", --")
    );
}

/// A heading's anchor as GitHub makes it: lower case, spaces to hyphens, and only
/// letters, digits, hyphens and underscores kept.
fn anchor(heading: &str) -> String {
    heading
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

#[test]
fn every_link_into_the_datasheet_and_its_figures_resolves() {
    let repo = rnic_tests::vm::repo();
    let doc = datasheet();
    let anchors: BTreeSet<String> = doc
        .lines()
        .filter_map(|l| l.strip_prefix("## ").or_else(|| l.strip_prefix("### ")))
        .map(anchor)
        .collect();
    let mut wrong = Vec::new();
    let mut checked = 0;
    for entry in std::fs::read_dir(repo.join("docs")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "md") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        for link in text.split("](").skip(1).filter_map(|s| s.split(')').next()) {
            if let Some(a) = link.strip_prefix("hardware-interface.md#") {
                checked += 1;
                if !anchors.contains(a) {
                    wrong.push(format!("{name}: {link}: no such heading"));
                }
            } else if link.starts_with("figures/") && !repo.join("docs").join(link).exists() {
                wrong.push(format!("{name}: {link}: no such figure"));
            }
        }
    }
    assert!(
        checked >= 10,
        "only {checked} links into the datasheet found"
    );
    verdict("links into docs/hardware-interface.md", &wrong);
}

/// The section numbers (`§7.5`, `§10`) that `text` cites.
fn cited_sections(text: &str) -> Vec<String> {
    text.split('§')
        .skip(1)
        .filter_map(|rest| {
            let n: String = rest
                .chars()
                .take_while(|c| c.is_ascii_digit() || *c == '.')
                .collect();
            let n = n.trim_end_matches('.').to_string();
            (!n.is_empty()).then_some(n)
        })
        .collect()
}

#[test]
fn every_section_the_labs_and_the_first_driver_cite_exists() {
    let repo = rnic_tests::vm::repo();
    let doc = datasheet();
    let headings: BTreeSet<String> = doc
        .lines()
        .filter(|l| l.starts_with('#'))
        .filter_map(|l| l.trim_start_matches('#').split_whitespace().next())
        .map(|n| n.trim_end_matches('.').to_string())
        .collect();
    let mut files = vec![repo.join("examples/first-driver/src/main.rs")];
    let mut dirs = vec![repo.join("labs/src"), repo.join("docs/labs")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs" || e == "md") {
                files.push(path);
            }
        }
    }
    let mut wrong = Vec::new();
    let mut checked = 0;
    for path in files {
        let text = std::fs::read_to_string(&path).unwrap();
        for n in cited_sections(&text) {
            checked += 1;
            if !headings.contains(&n) {
                wrong.push(format!("{}: §{n}: no such section", path.display()));
            }
        }
    }
    assert!(checked >= 100, "only {checked} citations found");
    verdict("sections cited by the labs and the first driver", &wrong);
}
