//! The data path as a C program uses it: tests/c/data_path.c, compiled with gcc against
//! Debian's `<infiniband/verbs.h>` and linked against the built libibverbs.so, opens both
//! VFs of a real rnicd in one process and drives them through the exported functions and
//! the header's inline ones: RC QPs with the `ibv_wr_*` post-send API (WRITE with
//! immediate, inline SEND, SEND with immediate from two SGEs into two, READ, fetch-and-add,
//! compare-and-swap, batches, `ibv_post_send` chains and `bad_wr`), the extended poll API,
//! a completion channel under epoll, `ibv_query_qp`, a remote access error and its
//! asynchronous events; UD QPs with AHs (one made from a received GRH) and a multicast
//! group one joins and the other sends to; an SRQ and its
//! limit event; a QP asked for more READs in flight than the function allows (lowered to
//! its most, as perftest needs against Soft-RoCE); and what must be refused, with
//! rdma-core's errnos. The program checks
//! every byte and completion itself and stops at the first wrong one.

mod common;

#[test]
fn a_c_program_moves_data_through_every_verb() {
    let run = common::run_c_program("data_path", 2);
    let (stdout, stderr) = (&run.stdout, &run.stderr);
    let steps = run.steps();
    assert_eq!(
        steps,
        [
            "write_with_imm",
            "inline_send",
            "send_with_imm",
            "read",
            "atomics",
            "batches",
            "query_qp",
            "remote_access_error",
            "ud",
            "srq",
            "deep_initiator",
            "idle_wait",
            "refusals",
            "done"
        ],
        "{stdout}\n{stderr}"
    );
    // vfio-user gives the library interrupts: the blocked wait used (almost) no CPU.
    let (wall, cpu) = rnic_tests::ibv_tools::idle_wait(stdout);
    assert!(
        cpu < 0.1 * wall,
        "waiting {wall:.3} s for a completion event took {cpu:.3} s of CPU"
    );
    // What rnic lacks said so on stderr, one line each, and nothing else complained.
    for line in [
        "TCP segmentation offload (IBV_WR_TSO) is not supported",
        "on-demand paging (IBV_ACCESS_ON_DEMAND) memory regions is not supported",
        "dma-buf memory regions (ibv_reg_dmabuf_mr) is not supported",
        "raw packet QPs (IBV_QPT_RAW_PACKET) is not supported",
        "an address without a GRH (is_global = 0)",
        "is not mapped in this process",
        "it is a shared mapping",
        "is mapped read-only, and the registration allows writes",
    ] {
        assert!(stderr.contains(line), "no {line:?} in:\n{stderr}");
    }
    assert!(
        stderr.lines().all(|l| l.starts_with("libibverbs (rnic): ")),
        "{stderr}"
    );
}
