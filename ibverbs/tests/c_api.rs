//! The library as a C program uses it: tests/c/queries.c, compiled with gcc against
//! Debian's `<infiniband/verbs.h>` and linked against the built libibverbs.so, calls
//! the exported functions and the header's inline functions (which reach the library
//! through the `verbs_context`) on a real rnicd's VF, and passes it pointers that are
//! not what they claim. Every answer must be right; nothing may crash.

mod common;

use std::collections::BTreeMap;
use std::net::Ipv6Addr;
use std::process::Command;

use ibverbs::attr::{guid_be64, node_guid};
use rnic_driver::transport::vfio_user::VfioUserTransport;
use rnic_driver::Device;
use rnic_tests::Rnicd;

#[test]
fn a_c_program_gets_every_answer_right() {
    let rnicd = Rnicd::start(1, &[]);
    let socket = rnicd.socket("vf0");
    let truth = {
        let t = VfioUserTransport::connect(&socket).expect("connect");
        Device::open(Box::new(t))
            .expect("open")
            .query_device()
            .expect("QUERY_DEVICE")
    };

    let (dir, exe) = common::c_program("queries");

    let out = Command::new(&exe)
        .env("LD_LIBRARY_PATH", dir.path())
        .env("RNIC_VFIO_USER", &socket)
        .output()
        .expect("run the program");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let answers: BTreeMap<&str, &str> = stdout
        .lines()
        .map(|l| l.split_once(' ').unwrap_or((l, "")))
        .collect();
    let guid = u64::from_be(guid_be64(node_guid(truth.mac)));
    let link_local = {
        let mut g = [0u8; 16];
        g[..2].copy_from_slice(&[0xfe, 0x80]);
        g[8..].copy_from_slice(&node_guid(truth.mac));
        Ipv6Addr::from(g).to_string()
    };
    let own = Ipv6Addr::from(truth.gid).to_string();
    let l = truth.limits;
    let (einval, eopnotsupp) = (libc::EINVAL, libc::EOPNOTSUPP);
    let expect = [
        ("devices", "1 rnic_0".to_string()),
        // A second context on the function (tests/contexts.rs drives two).
        ("reopen", "1 0".to_string()),
        // comp_mask and everything the device does not have read 0, not the 0xa5 fill.
        (
            "device_ex",
            format!(
                "0 {} {} {} 1 {guid:016x} 0 0",
                l.max_qp, l.max_cqe, l.max_mr
            ),
        ),
        ("device_ex_input", einval.to_string()),
        ("device", format!("0 {}", l.max_pd)),
        // ACTIVE, 4096, 2 GIDs, Ethernet, 1 P_Key, GRH required, and the fields after
        // the old structure's end zeroed.
        ("port", "0 4 5 2 2 1 1 0 0".into()),
        ("port2", einval.to_string()),
        ("gid0", format!("0 {link_local}")),
        ("gid1", format!("0 {own}")),
        ("gid2", format!("-1 {einval}")),
        ("gid_ex", format!("0 {own} 1 1 2 0")),
        ("gid_ex_bad", format!("{einval} {eopnotsupp}")),
        ("gid_table", format!("2 0:{link_local} 1:{own}")),
        ("gid_table_small", format!("-{einval}")),
        ("pkey", "0 ffff -1 0".into()),
        ("create_cq_ex", "1 0 1".into()),
        ("create_cq_ex_ts", format!("0 {eopnotsupp}")),
        ("rt_values", eopnotsupp.to_string()),
        ("garbage", format!("-1 {einval} 1 {einval}")),
        ("close", "0".into()),
        ("close_again", "-1".into()),
        (
            "strings",
            "active|transport retry counter exceeded|InfiniBand channel adapter".into(),
        ),
    ];
    let mut wrong = Vec::new();
    for (key, want) in &expect {
        match answers.get(key) {
            Some(got) if got == want => {}
            got => wrong.push(format!("{key}: {got:?}, want {want:?}")),
        }
    }
    assert!(
        wrong.is_empty(),
        "{}\n--- output:\n{stdout}\n{stderr}",
        wrong.join("\n")
    );
    // The unsupported verbs said so on stderr, once each.
    assert!(
        stderr.contains("libibverbs (rnic): completion timestamps, VLANs, flow tags and tag matching in CQs (ibv_create_cq_ex wc_flags) is not supported"),
        "{stderr}"
    );
    assert!(
        stderr.contains("ibv_query_rt_values_ex (device clock) is not supported"),
        "{stderr}"
    );
}
