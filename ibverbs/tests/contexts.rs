//! Contexts of one process on one function: tests/c/two_contexts.c, compiled with gcc
//! against Debian's `<infiniband/verbs.h>` and linked against the built libibverbs.so,
//! opens VF0 of a real rnicd twice, as rdma-core's own test suite opens the device under
//! test for its client and its server, and forks a child that may not open it. The
//! program checks every answer itself.

mod common;

#[test]
fn two_contexts_on_one_function_each_get_their_own_events_and_close_alone() {
    let run = common::run_c_program("two_contexts", 1);
    let (stdout, stderr) = (&run.stdout, &run.stderr);
    assert_eq!(
        run.steps(),
        [
            "open_twice",
            "fork_busy",
            "events_per_context",
            "one_closed",
            "reopen",
            "done"
        ],
        "{stdout}\n{stderr}"
    );
    // The forked child's refusal, said once.
    assert!(
        stderr
            .lines()
            .all(|l| l.contains("held by the process this one was forked from")),
        "{stderr}"
    );
}
