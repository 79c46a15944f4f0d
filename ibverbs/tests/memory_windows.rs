//! Memory windows as C programs use them: tests/c/windows.c, compiled with gcc against
//! Debian's `<infiniband/verbs.h>` and linked against the built libibverbs.so, drives
//! both VFs of a real rnicd in one process: `max_mw` and the window capability flags;
//! type 1 windows bound with `ibv_bind_mw` (WRITE and READ through the window from two
//! QPs, a second bind, the old key, a missing right and both ends of the range refused
//! with `IBV_WC_REM_ACCESS_ERR`, `LOCAL_INV` of one failing `IBV_WC_LOC_QP_OP_ERR`);
//! `ibv_dereg_mr` `EBUSY` while a window is bound, and a bind to a region without
//! `IBV_ACCESS_MW_BIND` failing `IBV_WC_MW_BIND_ERR`; type 2 windows bound with
//! `IBV_WR_BIND_MW` (only through the QP that bound them, freed by `IBV_WR_LOCAL_INV`,
//! bound again, a second bind refused), invalidated by a peer's SEND with invalidate
//! (`IBV_WC_WITH_INV`, `invalidated_rkey`), and zero-based through `ibv_wr_bind_mw`;
//! a window's key refused as an lkey. The program checks every status and completion
//! itself (exactly one per WR).

mod common;

#[test]
fn memory_windows_bind_grant_and_revoke_access_as_a_c_program_uses_them() {
    let run = common::run_c_program("windows", 2);
    let (stdout, stderr) = (&run.stdout, &run.stderr);
    assert_eq!(
        run.steps(),
        [
            "query",
            "type1",
            "rebind",
            "rights_and_range",
            "dereg_busy",
            "type2",
            "send_inv",
            "zero_based",
            "not_an_lkey",
            "done"
        ],
        "{stdout}\n{stderr}"
    );
    // The library complained of nothing (the refusals are the application's own checks).
    assert!(
        stderr.lines().all(|l| l.starts_with("libibverbs (rnic): ")),
        "{stderr}"
    );
}
