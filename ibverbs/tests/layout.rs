//! The `#[repr(C)]` mirrors of `ibverbs::abi` against Debian's `<infiniband/verbs.h>`:
//! a C program compiled with gcc against the reference headers (qemu-scripts/
//! ibverbs-ref.sh unpacks them) prints the size and alignment of every mirrored type,
//! the offset and size of every field, and the value of every constant; each must be
//! what Rust has.

mod common;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::process::Command;

use ibverbs::abi::{layouts, CONSTANTS};

/// Fields C leaves anonymous, probed through the member C does name at the same place
/// (type, Rust field, C member); their sizes are the union's, not the member's.
const ANONYMOUS_FIELDS: &[(&str, &str, &str)] = &[("ibv_send_wr", "anon_bind_mw_tso", "bind_mw")];

/// The C program: one line per type (`T name size align`), field (`F type.field offset
/// size`) and constant (`C name value`).
fn probe_source() -> String {
    let mut c = String::from(
        "#include <stdio.h>\n#include <stddef.h>\n#include <infiniband/verbs.h>\n\nint main(void)\n{\n",
    );
    for t in layouts() {
        if t.c_type.is_empty() {
            continue;
        }
        let ct = t.c_type;
        let _ = writeln!(
            c,
            "\tprintf(\"T {} %zu %zu\\n\", sizeof({ct}), _Alignof({ct}));",
            t.name
        );
        for f in &t.fields {
            let member = ANONYMOUS_FIELDS
                .iter()
                .find(|(ty, field, _)| *ty == t.name && *field == f.c_name)
                .map_or(f.c_name, |a| a.2);
            let _ = writeln!(
                c,
                "\tprintf(\"F {}.{} %zu %zu\\n\", offsetof({ct}, {member}), sizeof((({ct} *)0)->{member}));",
                t.name, f.c_name
            );
        }
    }
    for (name, _) in CONSTANTS {
        let _ = writeln!(c, "\tprintf(\"C {name} %lld\\n\", (long long)({name}));");
    }
    c.push_str("\treturn 0;\n}\n");
    c
}

/// Compiles and runs the probe; its lines by their first two words.
fn probe() -> BTreeMap<(String, String), Vec<i64>> {
    let dir = tempfile::tempdir().expect("tempdir");
    let src = dir.path().join("probe.c");
    let exe = dir.path().join("probe");
    std::fs::write(&src, probe_source()).expect("write probe.c");
    common::compile(&src, &exe, &[]);
    let out = Command::new(&exe).output().expect("run the probe");
    assert!(out.status.success());
    String::from_utf8(out.stdout)
        .expect("utf-8")
        .lines()
        .map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            let values = w[2..]
                .iter()
                .map(|v| v.parse().expect("a number"))
                .collect();
            ((w[0].to_string(), w[1].to_string()), values)
        })
        .collect()
}

#[test]
fn every_mirror_has_the_c_layout_and_every_constant_its_value() {
    let c = probe();
    let mut wrong = Vec::new();
    let mut compare = |kind: &str, key: String, rust: Vec<i64>, skip_size: bool| match c
        .get(&(kind.to_string(), key.clone()))
    {
        None => wrong.push(format!("{key}: not probed")),
        Some(v) if *v == rust => {}
        Some(v) if skip_size && v[0] == rust[0] => {}
        Some(v) => wrong.push(format!("{key}: C {v:?}, Rust {rust:?}")),
    };
    let mut types = 0;
    let mut fields = 0;
    for t in layouts() {
        if t.c_type.is_empty() {
            continue;
        }
        types += 1;
        compare(
            "T",
            t.name.to_string(),
            vec![t.size as i64, t.align as i64],
            false,
        );
        for f in &t.fields {
            fields += 1;
            let anonymous = ANONYMOUS_FIELDS
                .iter()
                .any(|a| a.0 == t.name && a.1 == f.c_name);
            compare(
                "F",
                format!("{}.{}", t.name, f.c_name),
                vec![f.offset as i64, f.size as i64],
                anonymous,
            );
        }
    }
    for &(name, value) in CONSTANTS {
        compare("C", name.to_string(), vec![value], false);
    }
    assert!(
        wrong.is_empty(),
        "layouts that differ from verbs.h:\n{}",
        wrong.join("\n")
    );
    println!(
        "{types} types, {fields} fields and {} constants match verbs.h",
        CONSTANTS.len()
    );
    // The mirrors verbs.h's inline functions and ops depend on are all among them.
    for needed in [
        "verbs_context",
        "ibv_context",
        "ibv_context_ops",
        "ibv_device",
        "ibv_qp_ex",
        "ibv_cq_ex",
        "ibv_send_wr",
        "ibv_wc",
        "ibv_device_attr_ex",
        "ibv_port_attr",
    ] {
        assert!(
            c.contains_key(&("T".to_string(), needed.to_string())),
            "{needed} is not probed"
        );
    }
}
