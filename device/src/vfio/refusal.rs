//! The rules a vfio-user client must follow, what breaking one costs it, and a log of
//! refusals that a client cannot flood (docs/hardware-interface.md §9.6).
//!
//! Every refusal names one [`Rule`]: the datasheet lists them by these names, the error
//! reply carries the rule's errno, and the log says which function broke which rule. The
//! log keeps a budget per function and rule ([`ClientLog`]): the first few refusals of a
//! rule in a window are logged whole, the rest are counted and summed up in one line,
//! so a client that breaks rules in a loop costs a few lines, not megabytes.

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// A rule of the protocol or of rnicd's limits that a client can break.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Rule {
    /// A header announces a message shorter than the header or longer than
    /// [`rnic_abi::vfio_user::MAX_MESSAGE`]: the connection ends.
    MessageSize,
    /// A message did not arrive whole within the read timeout, or the connection ended
    /// in the middle of one: the connection ends.
    MessageIncomplete,
    /// A command's body has the wrong length for the command.
    MessageLength,
    /// More descriptors than `max_msg_fds`, or descriptors with a message that takes none.
    MessageFds,
    /// A command before VERSION, a second VERSION, or a reply where a command belongs.
    MessageOrder,
    /// A command rnicd does not implement (DMA_READ/WRITE, migration, ioeventfds).
    CommandUnsupported,
    /// The client left its replies unread for the write timeout: the connection ends.
    ReplyUnread,
    /// DMA_MAP without a descriptor: rnicd reaches only memory it can map.
    DmaNoFd,
    /// DMA_MAP of a descriptor that is not a sealed, shrink-proof memfd.
    DmaFile,
    /// DMA_MAP or DMA_UNMAP of a range that is empty, unaligned, overflows, lies
    /// outside its file, or cuts a mapping.
    DmaRange,
    /// DMA_MAP over an existing mapping.
    DmaOverlap,
    /// DMA_MAP beyond the function's quota of windows or pages, or of distinct files.
    DmaQuota,
    /// DMA_MAP or DMA_UNMAP flags rnicd does not take.
    DmaFlags,
    /// SET_IRQS of an index, range or action the function does not have.
    IrqRequest,
    /// SET_IRQS with a descriptor that is not a non-blocking eventfd.
    IrqFd,
    /// An access to a region that does not exist or that it does not lie in.
    RegionAccess,
    /// A second client connected while one was attached: it gets `EBUSY`.
    SocketBusy,
}

impl Rule {
    /// Every rule, in the datasheet's order.
    pub const ALL: [Rule; 17] = [
        Rule::MessageSize,
        Rule::MessageIncomplete,
        Rule::MessageLength,
        Rule::MessageFds,
        Rule::MessageOrder,
        Rule::CommandUnsupported,
        Rule::ReplyUnread,
        Rule::DmaNoFd,
        Rule::DmaFile,
        Rule::DmaRange,
        Rule::DmaOverlap,
        Rule::DmaQuota,
        Rule::DmaFlags,
        Rule::IrqRequest,
        Rule::IrqFd,
        Rule::RegionAccess,
        Rule::SocketBusy,
    ];

    /// The rule's name, as the datasheet and the log give it.
    pub fn name(self) -> &'static str {
        match self {
            Rule::MessageSize => "message-size",
            Rule::MessageIncomplete => "message-incomplete",
            Rule::MessageLength => "message-length",
            Rule::MessageFds => "message-fds",
            Rule::MessageOrder => "message-order",
            Rule::CommandUnsupported => "command-unsupported",
            Rule::ReplyUnread => "reply-unread",
            Rule::DmaNoFd => "dma-no-fd",
            Rule::DmaFile => "dma-file",
            Rule::DmaRange => "dma-range",
            Rule::DmaOverlap => "dma-overlap",
            Rule::DmaQuota => "dma-quota",
            Rule::DmaFlags => "dma-flags",
            Rule::IrqRequest => "irq-request",
            Rule::IrqFd => "irq-fd",
            Rule::RegionAccess => "region-access",
            Rule::SocketBusy => "socket-busy",
        }
    }

    /// The errno the error reply carries.
    pub fn errno(self) -> i32 {
        match self {
            Rule::MessageSize
            | Rule::MessageIncomplete
            | Rule::MessageLength
            | Rule::MessageFds
            | Rule::MessageOrder
            | Rule::DmaRange
            | Rule::DmaFlags
            | Rule::IrqRequest
            | Rule::RegionAccess => libc::EINVAL,
            Rule::CommandUnsupported => libc::EOPNOTSUPP,
            Rule::ReplyUnread => libc::ETIMEDOUT,
            Rule::DmaNoFd | Rule::DmaFile | Rule::IrqFd => libc::EBADF,
            Rule::DmaOverlap => libc::EEXIST,
            Rule::DmaQuota => libc::ENOSPC,
            Rule::SocketBusy => libc::EBUSY,
        }
    }

    /// Whether breaking the rule ends the connection (the stream cannot be trusted to be
    /// at a message boundary any more, or the client stopped talking).
    pub fn ends_connection(self) -> bool {
        matches!(
            self,
            Rule::MessageSize | Rule::MessageIncomplete | Rule::ReplyUnread
        )
    }
}

impl std::fmt::Display for Rule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A refused request: the rule it broke and what exactly was wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The rule.
    pub rule: Rule,
    /// The errno of the error reply (the rule's, unless the device knows better).
    pub errno: i32,
    /// What was wrong, for the log.
    pub detail: String,
}

impl Refusal {
    /// A refusal under `rule`, with the rule's errno.
    pub fn new(rule: Rule, detail: impl Into<String>) -> Self {
        Self {
            rule,
            errno: rule.errno(),
            detail: detail.into(),
        }
    }
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.detail, self.rule)
    }
}

/// How many lines one kind of message may log per [`WINDOW`].
pub const BURST: u32 = 5;
/// The window of the log budget.
pub const WINDOW: Duration = Duration::from_secs(10);

/// What one kind of message logged in the current window.
#[derive(Debug, Clone, Copy)]
struct Budget {
    since: Instant,
    logged: u32,
    suppressed: u64,
}

/// A kind of line the log budgets: a rule's refusals, or an event a client can cause at
/// will (connections, resets).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// A refusal under this rule.
    Refused(Rule),
    /// A client connected or left.
    Connection,
    /// The client reset the function.
    Reset,
}

impl Kind {
    fn describe(self) -> String {
        match self {
            Kind::Refused(rule) => format!("refusals under rule {rule}"),
            Kind::Connection => "client connections and departures".into(),
            Kind::Reset => "function resets by the client".into(),
        }
    }
}

/// The log of one function's clients, with a budget per kind of line, kept across
/// connections (a client that reconnects in a loop gets no fresh budget).
#[derive(Debug)]
pub struct ClientLog {
    name: String,
    budgets: HashMap<Kind, Budget>,
    /// Refusals per rule since the current client connected.
    session: HashMap<Rule, u64>,
}

impl ClientLog {
    /// The log of function `name` ("vf0").
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            budgets: HashMap::new(),
            session: HashMap::new(),
        }
    }

    /// Whether a line of `kind` may be logged now; counts it if not. A window that ended
    /// with lines suppressed is summed up first.
    fn allow(&mut self, kind: Kind, now: Instant) -> bool {
        let budget = self.budgets.entry(kind).or_insert(Budget {
            since: now,
            logged: 0,
            suppressed: 0,
        });
        if now.duration_since(budget.since) >= WINDOW {
            if budget.suppressed > 0 {
                log::warn!(
                    "{}: {} more {} were not logged in the last {} s",
                    self.name,
                    budget.suppressed,
                    kind.describe(),
                    now.duration_since(budget.since).as_secs()
                );
            }
            *budget = Budget {
                since: now,
                logged: 0,
                suppressed: 0,
            };
        }
        if budget.logged < BURST {
            budget.logged += 1;
            true
        } else {
            budget.suppressed += 1;
            false
        }
    }

    /// Logs that `command` was refused (within the budget), and counts it.
    pub fn refused(&mut self, command: &str, refusal: &Refusal) {
        let count = self.session.entry(refusal.rule).or_default();
        *count += 1;
        if refusal.rule == Rule::DmaNoFd && *count > 1 {
            // QEMU maps its ROMs and other devices' BARs without descriptors at every
            // boot: the first such refusal says how to give rnicd guest RAM, the others
            // are expected and only counted.
            log::debug!(
                "{}: {command} refused, rule {}: {}",
                self.name,
                refusal.rule,
                refusal.detail
            );
            return;
        }
        if self.allow(Kind::Refused(refusal.rule), Instant::now()) {
            log::warn!(
                "{}: {command} refused, rule {}: {}",
                self.name,
                refusal.rule,
                refusal.detail
            );
        }
    }

    /// Logs an event of `kind` at info level, within the budget.
    pub fn event(&mut self, kind: Kind, message: std::fmt::Arguments<'_>) {
        if self.allow(kind, Instant::now()) {
            log::info!("{}: {message}", self.name);
        }
    }

    /// The client left: one line with its refusals by rule, if it had any.
    pub fn client_left(&mut self) {
        if self.session.is_empty() {
            return;
        }
        let mut rules: Vec<_> = self.session.drain().collect();
        rules.sort();
        let list: Vec<String> = rules.iter().map(|(r, n)| format!("{r} {n}")).collect();
        if self.allow(Kind::Connection, Instant::now()) {
            log::info!(
                "{}: the client that left had refusals: {}",
                self.name,
                list.join(", ")
            );
        }
    }

    /// Refusals per rule since the current client connected (for tests).
    pub fn session_refusals(&self, rule: Rule) -> u64 {
        self.session.get(&rule).copied().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_have_distinct_names_and_errnos() {
        let names: std::collections::HashSet<_> = Rule::ALL.iter().map(|r| r.name()).collect();
        assert_eq!(names.len(), Rule::ALL.len());
        assert!(Rule::ALL.iter().all(|r| r.errno() > 0));
        assert_eq!(Rule::DmaOverlap.errno(), libc::EEXIST, "the protocol's");
        assert_eq!(Rule::SocketBusy.errno(), libc::EBUSY);
        assert!(Rule::MessageSize.ends_connection());
        assert!(!Rule::DmaFile.ends_connection());
    }

    #[test]
    fn the_budget_logs_a_burst_then_counts() {
        let mut log = ClientLog::new("vf0");
        let t0 = Instant::now();
        let kind = Kind::Refused(Rule::DmaFile);
        let allowed = (0..1000).filter(|_| log.allow(kind, t0)).count();
        assert_eq!(allowed, BURST as usize);
        assert_eq!(log.budgets[&kind].suppressed, 1000 - u64::from(BURST));
        // Another rule has its own budget.
        assert!(log.allow(Kind::Refused(Rule::DmaRange), t0));
        // A new window starts the count again (and sums up the last one).
        assert!(log.allow(kind, t0 + WINDOW));
        assert_eq!(log.budgets[&kind].suppressed, 0);
    }

    #[test]
    fn refusals_are_counted_per_client() {
        let mut log = ClientLog::new("vf1");
        for _ in 0..7 {
            log.refused("DMA_MAP", &Refusal::new(Rule::DmaNoFd, "no fd"));
        }
        assert_eq!(log.session_refusals(Rule::DmaNoFd), 7);
        log.client_left();
        assert_eq!(log.session_refusals(Rule::DmaNoFd), 0);
    }
}
