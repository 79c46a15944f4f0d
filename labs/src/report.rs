//! A checker's verdict: one line per step of the lab, passed, failed with the cause, or
//! not reached because an earlier step failed.

use std::cell::{Cell, RefCell};
use std::fmt;
use std::panic::{self, AssertUnwindSafe};
use std::sync::Once;

/// How one step went.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Done as the datasheet says; what the checker saw.
    Pass(String),
    /// Not done, or done wrong: the cause, and where to read.
    Fail(String),
    /// An earlier step failed.
    NotReached,
}

/// One step of a lab.
#[derive(Clone, Debug)]
pub struct Step {
    /// What the step is, as docs/labs/ names it.
    pub name: &'static str,
    /// How it went.
    pub verdict: Verdict,
}

/// Every step of one lab, judged.
#[derive(Clone, Debug)]
pub struct Report {
    /// The lab's title.
    pub lab: &'static str,
    /// Its steps in order.
    pub steps: Vec<Step>,
}

impl Report {
    /// A report whose steps are all still to be judged.
    pub fn new(lab: &'static str, steps: &[&'static str]) -> Self {
        Self {
            lab,
            steps: steps
                .iter()
                .map(|&name| Step {
                    name,
                    verdict: Verdict::NotReached,
                })
                .collect(),
        }
    }

    /// Judges step `index` (0-based): `Ok(what was seen)` passes, `Err(cause)` fails.
    /// Returns whether it passed, so that a checker stops at the first failure.
    pub fn judge(&mut self, index: usize, outcome: Result<String, String>) -> bool {
        let passed = outcome.is_ok();
        self.steps[index].verdict = match outcome {
            Ok(seen) => Verdict::Pass(seen),
            Err(cause) => Verdict::Fail(cause),
        };
        passed
    }

    /// Records that the student's code stopped with `cause` before the checker could
    /// judge it: on the step a skeleton's `todo!("step N: ...")` names, else on step 1.
    pub fn stopped(&mut self, cause: String) {
        let step = cause
            .split("step ")
            .nth(1)
            .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
            .and_then(|n| n.parse::<usize>().ok())
            .filter(|n| (1..=self.steps.len()).contains(n))
            .unwrap_or(1);
        self.judge(step - 1, Err(cause));
    }

    /// Whether every step passed.
    pub fn passed(&self) -> bool {
        self.steps
            .iter()
            .all(|s| matches!(s.verdict, Verdict::Pass(_)))
    }

    /// The first failed step: its number (1-based) and cause.
    pub fn failure(&self) -> Option<(usize, &str)> {
        self.steps
            .iter()
            .enumerate()
            .find_map(|(i, s)| match &s.verdict {
                Verdict::Fail(cause) => Some((i + 1, cause.as_str())),
                _ => None,
            })
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{}", self.lab)?;
        for (i, step) in self.steps.iter().enumerate() {
            let (mark, text) = match &step.verdict {
                Verdict::Pass(seen) => ("pass", seen.as_str()),
                Verdict::Fail(cause) => ("FAIL", cause.as_str()),
                Verdict::NotReached => ("-", "not reached"),
            };
            writeln!(f, "  step {} {:<50} {mark:<4}  {text}", i + 1, step.name)?;
        }
        let total = self.steps.len();
        let passed = self
            .steps
            .iter()
            .filter(|s| matches!(s.verdict, Verdict::Pass(_)))
            .count();
        write!(f, "  {passed} of {total} steps passed")
    }
}

thread_local! {
    /// Set while this thread runs a student's code.
    static IN_STUDENT: Cell<bool> = const { Cell::new(false) };
    /// Where the student's code last panicked on this thread, with its message.
    static PANIC: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Installs, once per process, the panic hook that keeps a student's panic (on the
/// thread running it) for the verdict instead of printing it; other panics go to the
/// hook that was there before. One hook for all threads, so that checkers running in
/// parallel (the tests) do not swap hooks under each other.
fn install_hook() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let previous = panic::take_hook();
        panic::set_hook(Box::new(move |info| {
            if !IN_STUDENT.with(Cell::get) {
                return previous(info);
            }
            let message = info
                .payload()
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| info.payload().downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic".into());
            let at = info
                .location()
                .map(|l| format!(" (at {}:{})", l.file(), l.line()))
                .unwrap_or_default();
            PANIC.with(|p| *p.borrow_mut() = Some(format!("{message}{at}")));
        }));
    });
}

/// Runs the student's code: its result, or the reason it stopped when it panicked
/// (`todo!()` in a skeleton, an index out of range, the lab device giving up a wait).
pub fn run_student<T>(code: impl FnOnce() -> Result<T, String>) -> Result<T, String> {
    install_hook();
    let outer = IN_STUDENT.with(|f| f.replace(true));
    let outcome = panic::catch_unwind(AssertUnwindSafe(code));
    IN_STUDENT.with(|f| f.set(outer));
    match outcome {
        Ok(result) => result,
        Err(_) => {
            let why = PANIC
                .with(|p| p.borrow_mut().take())
                .unwrap_or_else(|| "a panic".into());
            Err(if why.starts_with("not yet implemented") {
                format!("{why}: this part of the exercise is still to write")
            } else {
                format!("the code panicked: {why}")
            })
        }
    }
}
