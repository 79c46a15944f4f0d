//! rdma-core's own test suite (the `tests/` of the release Debian trixie ships, in its
//! python3-pyverbs package) in the Debian guests: the guest script lines that run it
//! module by module (tests/rdma-core/run_suite.py, on the pyverbs layer of `boot.sh
//! --pyverbs`), what the console then shows, and the comparison of a Soft-RoCE run with
//! an rnic run against the differences kept in tests/rdma-core/expected.txt (the verbs
//! guest, rnic's own libibverbs) or tests/rdma-core/expected-kernel.txt (the kernel
//! guest: rnic.ko and rnic's provider plug-in).

use std::collections::BTreeMap;
use std::fmt::Write as _;

/// Where run_suite.py goes in the guest (boot.sh `--file HOST:GUEST`).
pub const GUEST_RUNNER: &str = "/root/run_suite.py";

/// The `boot.sh --file` argument that copies run_suite.py into a guest.
pub fn runner_file() -> String {
    format!(
        "{}:{GUEST_RUNNER}",
        crate::vm::repo()
            .join("tests/rdma-core/run_suite.py")
            .display()
    )
}

/// Guest script lines that run the whole suite on device `dev` with GID index `gid` (a
/// shell word): kernel messages off the console (rxe logs every refused QP there, which
/// would cut the result lines), the modules the suite needs of the kernel loaded, then
/// every module in a process of its own. `=== rdma-core suite done STATUS SECONDS` ends
/// it.
pub fn guest_lines(dev: &str, gid: &str) -> String {
    format!(
        "echo 1 >/proc/sys/kernel/printk\n\
         rc_start=$(date +%s)\n\
         /opt/rdma-core/load-modules && python3 {GUEST_RUNNER} --dev {dev} --gid {gid}\n\
         echo \"=== rdma-core suite done $? $(($(date +%s) - rc_start))\"\n"
    )
}

/// How one test ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Outcome {
    /// Passed.
    Pass,
    /// An assertion failed.
    Fail,
    /// It raised (or its process crashed or ran out of time under it).
    Error,
    /// It skipped itself (a feature the device lacks, another vendor's device, ...).
    Skip,
    /// unittest's expected failure.
    ExpectedFailure,
    /// unittest's unexpected success.
    UnexpectedSuccess,
}

impl Outcome {
    fn parse(word: &str) -> Option<Self> {
        Some(match word {
            "pass" => Self::Pass,
            "fail" => Self::Fail,
            "error" => Self::Error,
            "skip" => Self::Skip,
            "xfail" => Self::ExpectedFailure,
            "xpass" => Self::UnexpectedSuccess,
            _ => return None,
        })
    }
}

/// One test's result: how it ended and the first line of why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TestResult {
    pub outcome: Outcome,
    pub reason: String,
}

/// What a guest's console showed of a run of the suite.
#[derive(Debug, Default, Clone)]
pub struct SuiteRun {
    /// Each test, by unittest id (`tests.test_qp.QPTest.test_create_rc_qp`).
    pub tests: BTreeMap<String, TestResult>,
    /// Each module's end (`ok`, `crashed`, `timeout`) and seconds, by name (`test_qp`).
    pub modules: BTreeMap<String, (String, f64)>,
    /// Whether the runner got to its end (`=== rdma-core suite done 0 ...`).
    pub finished: bool,
    /// How long the suite took in the guest, with the import, in seconds.
    pub seconds: Option<u64>,
}

impl SuiteRun {
    /// Reads run_suite.py's lines (and [`guest_lines`]' end) out of a console.
    pub fn parse(console: &str) -> Self {
        let mut run = Self::default();
        for line in console.lines().map(|l| l.trim_end_matches('\r')) {
            if let Some(end) = line.strip_prefix("=== rdma-core suite done ") {
                let mut words = end.split_whitespace();
                run.finished = words.next() == Some("0");
                run.seconds = words.next().and_then(|s| s.parse().ok());
            }
            let Some(rest) = line.strip_prefix("@@@ RDMA-CORE ") else {
                continue;
            };
            let words: Vec<&str> = rest.splitn(4, ' ').collect();
            match words[..] {
                ["TEST", id, outcome, ..] => {
                    let Some(outcome) = Outcome::parse(outcome) else {
                        continue;
                    };
                    let reason = words.get(3).unwrap_or(&"").to_string();
                    // A crash's line follows what the test itself reported, if anything.
                    run.tests
                        .entry(id.to_string())
                        .and_modify(|r| {
                            if outcome == Outcome::Error {
                                *r = TestResult {
                                    outcome,
                                    reason: reason.clone(),
                                };
                            }
                        })
                        .or_insert(TestResult { outcome, reason });
                }
                ["MODULE", name, end, ..] => {
                    let seconds = words
                        .get(3)
                        .and_then(|r| r.split_whitespace().nth(1))
                        .and_then(|s| s.parse().ok())
                        .unwrap_or(f64::NAN);
                    run.modules
                        .insert(name.to_string(), (end.to_string(), seconds));
                }
                _ => {}
            }
        }
        run
    }

    /// The ids of the tests that passed.
    pub fn passed(&self) -> impl Iterator<Item = &str> {
        self.tests
            .iter()
            .filter(|(_, r)| r.outcome == Outcome::Pass)
            .map(|(id, _)| id.as_str())
    }

    /// How many tests of `module` ended each way: passed, failed, errors, skipped (expected
    /// failures count as skipped, unexpected successes as failed).
    pub fn counts(&self, module: &str) -> [usize; 4] {
        let prefix = format!("tests.{module}.");
        let mut c = [0; 4];
        for r in self
            .tests
            .iter()
            .filter(|(id, _)| id.starts_with(&prefix))
            .map(|(_, r)| r)
        {
            c[match r.outcome {
                Outcome::Pass => 0,
                Outcome::Fail | Outcome::UnexpectedSuccess => 1,
                Outcome::Error => 2,
                Outcome::Skip | Outcome::ExpectedFailure => 3,
            }] += 1;
        }
        c
    }
}

/// The differences kept for the verbs guest (rnic's own libibverbs):
/// tests/rdma-core/expected.txt.
pub const EXPECTED_VERBS: &str = "tests/rdma-core/expected.txt";

/// The differences kept for the kernel guest (rnic.ko and rnic's provider plug-in under
/// Debian's libibverbs): tests/rdma-core/expected-kernel.txt.
pub const EXPECTED_KERNEL: &str = "tests/rdma-core/expected-kernel.txt";

/// The differences kept in the repository file `file` (relative to the repository, e.g.
/// [`EXPECTED_VERBS`]): each test that passes on Soft-RoCE and not on rnic, with the
/// reason (`ID REASON` lines, `#` comments).
pub fn expected_differences(file: &str) -> BTreeMap<String, String> {
    let path = crate::vm::repo().join(file);
    let text =
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    parse_expected(&text)
}

fn parse_expected(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| {
            let (id, reason) = l.split_once(char::is_whitespace).unwrap_or((l, ""));
            assert!(
                !reason.trim().is_empty(),
                "the expected differences: {id} has no reason"
            );
            (id.to_string(), reason.trim().to_string())
        })
        .collect()
}

/// The side-by-side table of a Soft-RoCE run and an rnic run: per module, passed /
/// failed / errors / skipped on each, and the total.
pub fn table(rxe: &SuiteRun, rnic: &SuiteRun) -> String {
    let mut modules: Vec<&String> = rxe.modules.keys().chain(rnic.modules.keys()).collect();
    modules.sort();
    modules.dedup();
    let mut out = String::from(
        "| module | Soft-RoCE pass / fail / error / skip | rnic pass / fail / error / skip |\n\
         |---|---|---|\n",
    );
    let mut totals = [[0usize; 4]; 2];
    let cell = |c: [usize; 4]| format!("{} / {} / {} / {}", c[0], c[1], c[2], c[3]);
    for m in modules {
        let (a, b) = (rxe.counts(m), rnic.counts(m));
        for i in 0..4 {
            totals[0][i] += a[i];
            totals[1][i] += b[i];
        }
        let _ = writeln!(out, "| {m} | {} | {} |", cell(a), cell(b));
    }
    let _ = writeln!(out, "| all | {} | {} |", cell(totals[0]), cell(totals[1]));
    out
}

/// What a comparison found wrong: tests that pass on Soft-RoCE, not on rnic, and are not
/// listed (with rnic's result), and listed tests that now pass on rnic (the list is
/// stale: take them out).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Mismatch {
    pub unlisted: Vec<(String, TestResult)>,
    pub stale: Vec<String>,
}

/// A listed test whose reason starts so depends on timing on any device (its own checks
/// race the device's work), so it may pass on rnic or not: it is never stale.
pub const RACE: &str = "race:";

/// Compares the runs: every test that passed on Soft-RoCE must pass on rnic, unless it is
/// in `expected`; and no test in `expected` may pass on rnic, but those whose reason
/// starts with [`RACE`].
pub fn compare(rxe: &SuiteRun, rnic: &SuiteRun, expected: &BTreeMap<String, String>) -> Mismatch {
    let mut m = Mismatch::default();
    for id in rxe.passed() {
        let theirs = rnic.tests.get(id).cloned().unwrap_or(TestResult {
            outcome: Outcome::Error,
            reason: "no result on rnic (did its module run?)".into(),
        });
        if theirs.outcome != Outcome::Pass && !expected.contains_key(id) {
            m.unlisted.push((id.to_string(), theirs));
        }
    }
    m.stale = expected
        .iter()
        .filter(|(id, reason)| {
            !reason.starts_with(RACE)
                && rnic
                    .tests
                    .get(*id)
                    .is_some_and(|r| r.outcome == Outcome::Pass)
        })
        .map(|(id, _)| id.clone())
        .collect();
    m
}

/// Checks the runs of the suite on Soft-RoCE (`rxe`) and on rnic (`rnic`, the run named
/// `rnic_name` in the messages: the verbs guest's or the kernel guest's): both ran every
/// module to the end; each passed a good part of the suite (so the comparison means
/// something: most of the suite tests other vendors' devices and skips on both); and every
/// test that passed on Soft-RoCE passed on rnic, but those listed in the repository file
/// `expected` ([`EXPECTED_VERBS`], [`EXPECTED_KERNEL`]), none of which may pass on rnic.
/// Prints the counts side by side first (docs/rdma-core-tests.md shows them).
pub fn check_suite(rxe: &SuiteRun, rnic: &SuiteRun, rnic_name: &str, expected: &str) {
    eprintln!(
        "rdma-core's tests, Soft-RoCE and {rnic_name}:\n{}",
        table(rxe, rnic)
    );
    for (name, run) in [("Soft-RoCE", rxe), (rnic_name, rnic)] {
        assert!(run.finished, "the suite did not run to its end on {name}");
        let seconds = run.seconds.map_or("?".to_string(), |s| s.to_string());
        eprintln!("{name}: the suite took {seconds} s in the guest");
        let passed = run.passed().count();
        assert!(
            passed >= 60,
            "only {passed} of rdma-core's tests passed on {name}"
        );
        for (module, (end, seconds)) in &run.modules {
            eprintln!("{name}: {module} {end} in {seconds:.1} s");
        }
    }
    let m = compare(rxe, rnic, &expected_differences(expected));
    let unlisted: Vec<String> = m
        .unlisted
        .iter()
        .map(|(id, r)| format!("{id}: {:?} {}", r.outcome, r.reason))
        .collect();
    assert!(
        unlisted.is_empty(),
        "these pass on Soft-RoCE, not on {rnic_name}, and {expected} does not list them:\n{}",
        unlisted.join("\n")
    );
    assert!(
        m.stale.is_empty(),
        "these pass on {rnic_name} now: take them out of {expected}:\n{}",
        m.stale.join("\n")
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONSOLE: &str = "boot noise\r\n\
        @@@ RDMA-CORE TEST tests.test_qp.QPTest.test_a pass\r\n\
        @@@ RDMA-CORE TEST tests.test_qp.QPTest.test_b skip Create UC QP is not supported\n\
        @@@ RDMA-CORE TEST tests.test_qp.QPTest.test_c error PyverbsRDMAError: x\n\
        \x20   Traceback (most recent call last):\n\
        @@@ RDMA-CORE MODULE test_qp ok seconds 1.5\n\
        @@@ RDMA-CORE TEST tests.test_cq.CQTest.test_d pass\n\
        @@@ RDMA-CORE TEST tests.test_cq.CQTest.test_e error crashed: SIGSEGV\n\
        @@@ RDMA-CORE MODULE test_cq crashed seconds 0.2 tests.test_cq.CQTest.test_e\n\
        === rdma-core suite done 0 42\n";

    #[test]
    fn the_runners_lines_give_each_tests_outcome_and_reason_and_each_modules_end() {
        let run = SuiteRun::parse(CONSOLE);
        assert!(run.finished);
        assert_eq!(run.seconds, Some(42));
        assert_eq!(run.tests.len(), 5);
        let b = &run.tests["tests.test_qp.QPTest.test_b"];
        assert_eq!(b.outcome, Outcome::Skip);
        assert_eq!(b.reason, "Create UC QP is not supported");
        assert_eq!(run.counts("test_qp"), [1, 0, 1, 1]);
        assert_eq!(run.counts("test_cq"), [1, 0, 1, 0]);
        assert_eq!(run.modules["test_cq"].0, "crashed");
        assert_eq!(run.modules["test_qp"].1, 1.5);
        assert_eq!(
            run.passed().collect::<Vec<_>>(),
            ["tests.test_cq.CQTest.test_d", "tests.test_qp.QPTest.test_a"]
        );
        assert!(!SuiteRun::parse("@@@ RDMA-CORE TEST x pass\n").finished);
    }

    #[test]
    fn a_test_passing_on_soft_roce_must_pass_on_rnic_or_be_listed_and_a_listed_one_must_not_pass() {
        let rxe = SuiteRun::parse(CONSOLE);
        let rnic = SuiteRun::parse(
            "@@@ RDMA-CORE TEST tests.test_qp.QPTest.test_a skip UC\n\
             @@@ RDMA-CORE TEST tests.test_cq.CQTest.test_d pass\n\
             @@@ RDMA-CORE TEST tests.test_qp.QPTest.test_b pass\n",
        );
        let none = BTreeMap::new();
        let m = compare(&rxe, &rnic, &none);
        assert_eq!(m.unlisted.len(), 1);
        assert_eq!(m.unlisted[0].0, "tests.test_qp.QPTest.test_a");
        assert_eq!(m.unlisted[0].1.reason, "UC");
        let listed = parse_expected(
            "# comment\n\ntests.test_qp.QPTest.test_a  needs UC QPs\n\
             tests.test_qp.QPTest.test_b  stale\n\
             tests.test_cq.CQTest.test_d  race: passes when the device is quick\n",
        );
        assert_eq!(listed["tests.test_qp.QPTest.test_a"], "needs UC QPs");
        let m = compare(&rxe, &rnic, &listed);
        assert_eq!(
            m,
            Mismatch {
                unlisted: vec![],
                stale: vec!["tests.test_qp.QPTest.test_b".into()]
            }
        );
        let t = table(&rxe, &rnic);
        assert!(
            t.contains("| test_qp | 1 / 0 / 1 / 1 | 1 / 0 / 0 / 1 |"),
            "{t}"
        );
        assert!(t.contains("| all | 2 / 0 / 2 / 1 | 2 / 0 / 0 / 1 |"), "{t}");
    }

    #[test]
    fn the_kept_differences_each_have_a_reason() {
        for file in [EXPECTED_VERBS, EXPECTED_KERNEL] {
            let listed = expected_differences(file);
            assert!(!listed.is_empty(), "{file}");
            for id in listed.keys() {
                assert!(id.starts_with("tests.test_"), "{file}: {id}");
            }
        }
    }
}
