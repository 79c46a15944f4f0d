//! Device-wide resource pools and the quota each function holds of them.
//!
//! The device has a fixed number of each resource kind ([`Resource`]): its totals. Each
//! function (member 0 = PF, n = VF n-1) holds a quota carved from those totals; the sum of
//! all quotas never exceeds them, so a function that stays within its quota can never
//! starve another. The PF changes quotas with the admin command `SET_QUOTA`.
//!
//! Two families of kinds are charged:
//!
//! - **Objects** (QPs, CQs, MRs, PDs, MR pages, doorbell pages): every object a function
//!   creates is charged against its quota, and released when the object goes (destroy,
//!   or any reset of the function: [`ResourcePool::release_all`]).
//! - **DMA** ([`Resource::DmaWindows`], [`Resource::DmaPages`]): every DMA_MAP of the
//!   function's vfio-user client (its VMM) is one mapping in this process, which takes
//!   address space and one of the `vm.max_map_count` mappings Linux allows a process. The
//!   DMA code charges each window when it maps it and releases it when it unmaps it
//!   (DMA_UNMAP, or the client leaving). The mappings belong to the client and survive
//!   every reset of the function, so [`ResourcePool::release_all`] leaves this usage
//!   alone, and QP migration never moves it ([`ResourcePool::transfer`]).
//!
//! Default split ([`default_share`]): every function gets the same quota and the totals
//! are exactly that quota times the number of functions, so nothing is unassigned until
//! the PF lowers a quota; raising one function's quota means lowering another's first.
//! Of the object kinds each function gets [`DEFAULT_SHARE`]; the DMA kinds split a
//! device-wide budget ([`DmaBudget`]) evenly, since what runs out is the process's.

use std::sync::{Arc, Mutex};

use rnic_abi::admin::{resource, Quota};
use rnic_abi::cmd::Status;

/// A kind of resource the device counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Resource {
    /// Queue pairs.
    Qp,
    /// Completion queues.
    Cq,
    /// Memory regions.
    Mr,
    /// Protection domains.
    Pd,
    /// Pages of registered memory regions.
    MrPages,
    /// Doorbell pages with at least one assigned slot.
    DoorbellPages,
    /// DMA windows: DMA_MAP mappings of the function's client held at once.
    DmaWindows,
    /// 4 KiB pages the function's DMA windows cover in all.
    DmaPages,
}

impl Resource {
    /// Every kind, in the order of the fields of [`Quota`].
    pub const ALL: [Resource; 8] = [
        Resource::Qp,
        Resource::Cq,
        Resource::Mr,
        Resource::Pd,
        Resource::MrPages,
        Resource::DoorbellPages,
        Resource::DmaWindows,
        Resource::DmaPages,
    ];

    /// Whether the kind counts what the function's vfio-user client mapped (DMA windows
    /// and their pages) rather than objects of the function: such usage survives resets
    /// of the function and never moves to another function.
    pub fn is_dma(self) -> bool {
        matches!(self, Resource::DmaWindows | Resource::DmaPages)
    }

    /// The kind's index as `rnic_abi::admin::resource` numbers it (syndromes name it).
    pub fn index(self) -> u32 {
        match self {
            Resource::Qp => resource::QPS,
            Resource::Cq => resource::CQS,
            Resource::Mr => resource::MRS,
            Resource::Pd => resource::PDS,
            Resource::MrPages => resource::MR_PAGES,
            Resource::DoorbellPages => resource::DOORBELL_PAGES,
            Resource::DmaWindows => resource::DMA_WINDOWS,
            Resource::DmaPages => resource::DMA_PAGES,
        }
    }
}

/// The count of resource `r` in `q`.
pub fn get(q: &Quota, r: Resource) -> u32 {
    match r {
        Resource::Qp => q.qps,
        Resource::Cq => q.cqs,
        Resource::Mr => q.mrs,
        Resource::Pd => q.pds,
        Resource::MrPages => q.mr_pages,
        Resource::DoorbellPages => q.doorbell_pages,
        Resource::DmaWindows => q.dma_windows,
        Resource::DmaPages => q.dma_pages,
    }
}

fn get_mut(q: &mut Quota, r: Resource) -> &mut u32 {
    match r {
        Resource::Qp => &mut q.qps,
        Resource::Cq => &mut q.cqs,
        Resource::Mr => &mut q.mrs,
        Resource::Pd => &mut q.pds,
        Resource::MrPages => &mut q.mr_pages,
        Resource::DoorbellPages => &mut q.doorbell_pages,
        Resource::DmaWindows => &mut q.dma_windows,
        Resource::DmaPages => &mut q.dma_pages,
    }
}

/// What each function gets by default of the object kinds, and what the device has of
/// them per function. Its DMA counts are 0: the DMA kinds are not a fixed share but an
/// even split of a device-wide [`DmaBudget`], which [`default_share`] fills in.
pub const DEFAULT_SHARE: Quota = Quota {
    qps: 256,
    cqs: 256,
    mrs: 1024,
    pds: 256,
    // 4 GiB of 4 KiB pages: one region of `max_mr_size`.
    mr_pages: 1 << 20,
    doorbell_pages: rnic_abi::doorbell::PAGES,
    dma_windows: 0,
    dma_pages: 0,
};

/// Where Linux says how many memory mappings a process may have.
pub const MAX_MAP_COUNT_PATH: &str = "/proc/sys/vm/max_map_count";

/// The DMA windows budget when [`MAX_MAP_COUNT_PATH`] cannot be read or parsed: half of
/// 65536, about what Linux's default `vm.max_map_count` (65530) gives.
pub const FALLBACK_DMA_WINDOWS: u32 = 32768;

/// The DMA pages budget: `u32::MAX` pages of 4 KiB (16 TiB less a page), as far as a
/// [`Quota`] counts.
pub const DMA_PAGES_BUDGET: u32 = u32::MAX;

/// What the device has of the DMA kinds in all, to be split between its functions.
///
/// Every DMA window is a mapping of the rnicd process, which Linux allows
/// `vm.max_map_count` of; rnicd needs the rest for itself (its code, heap, thread stacks,
/// the functions' doorbell BARs), so the functions get half. Pages bound the
/// address space the windows take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DmaBudget {
    /// DMA windows (mappings), device-wide.
    pub windows: u32,
    /// 4 KiB pages of DMA windows, device-wide.
    pub pages: u32,
}

impl DmaBudget {
    /// The budget of this machine: [`DmaBudget::from_max_map_count`] of what
    /// [`MAX_MAP_COUNT_PATH`] reads now.
    pub fn of_host() -> Self {
        Self::from_max_map_count(std::fs::read_to_string(MAX_MAP_COUNT_PATH))
    }

    /// The budget for a machine whose `vm.max_map_count` reads `read` (the text of
    /// [`MAX_MAP_COUNT_PATH`]): half of it in windows ([`FALLBACK_DMA_WINDOWS`] if it could
    /// not be read or is no number), and [`DMA_PAGES_BUDGET`] pages.
    pub fn from_max_map_count(read: std::io::Result<String>) -> Self {
        let windows = match read.map(|text| text.trim().parse::<u64>()) {
            Ok(Ok(count)) => u32::try_from(count / 2).unwrap_or(u32::MAX),
            Ok(Err(e)) => {
                log::warn!(
                    "{MAX_MAP_COUNT_PATH} is no number ({e}): {FALLBACK_DMA_WINDOWS} DMA windows"
                );
                FALLBACK_DMA_WINDOWS
            }
            Err(e) => {
                log::warn!(
                    "cannot read {MAX_MAP_COUNT_PATH} ({e}): {FALLBACK_DMA_WINDOWS} DMA windows"
                );
                FALLBACK_DMA_WINDOWS
            }
        };
        Self {
            windows,
            pages: DMA_PAGES_BUDGET,
        }
    }
}

/// The default quota of each of `functions` functions: [`DEFAULT_SHARE`] of the object
/// kinds, and `budget` split evenly (rounded down) of the DMA kinds. The device totals
/// are this times `functions`, so at most `functions - 1` of a DMA budget stays out of
/// every quota and the totals.
pub fn default_share(functions: usize, budget: DmaBudget) -> Quota {
    let split = |total: u32| {
        let n = u64::try_from(functions).unwrap_or(u64::MAX).max(1);
        // At most `total`, a u32.
        (u64::from(total) / n) as u32
    };
    Quota {
        dma_windows: split(budget.windows),
        dma_pages: split(budget.pages),
        ..DEFAULT_SHARE
    }
}

/// Why a quota could not be set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QuotaError {
    /// No such function.
    NoFunction,
    /// The new quota is below what the function uses of this resource.
    BelowUsage(Resource),
    /// The new quota needs more of this resource than is unassigned.
    Exhausted(Resource),
    /// The new quota exceeds what one function can address of this resource (doorbell
    /// pages beyond its BAR).
    TooLarge(Resource),
}

impl QuotaError {
    /// The command status and syndrome that report this error.
    pub fn status(self) -> (Status, u32) {
        match self {
            QuotaError::NoFunction => (Status::NotFound, 0),
            QuotaError::BelowUsage(r) => (Status::BadState, r.index()),
            QuotaError::Exhausted(r) => (Status::NoResources, r.index()),
            QuotaError::TooLarge(r) => (Status::BadParam, r.index()),
        }
    }
}

#[derive(Debug)]
struct Pools {
    totals: Quota,
    quota: Vec<Quota>,
    usage: Vec<Quota>,
}

impl Pools {
    fn assigned(&self, r: Resource, except: Option<usize>) -> u64 {
        self.quota
            .iter()
            .enumerate()
            .filter(|(i, _)| Some(*i) != except)
            .map(|(_, q)| u64::from(get(q, r)))
            .sum()
    }
}

/// The device's resource pools, shared by all functions as `Arc<ResourcePool>`.
#[derive(Debug)]
pub struct ResourcePool {
    pools: Mutex<Pools>,
}

impl ResourcePool {
    /// Pools for `functions` functions (PF first), each given `share`; the totals are the
    /// sum of the shares.
    pub fn new(functions: usize, share: Quota) -> Self {
        let mut totals = Quota::default();
        for r in Resource::ALL {
            let sum = u64::from(get(&share, r)) * functions as u64;
            *get_mut(&mut totals, r) = u32::try_from(sum).unwrap_or(u32::MAX);
        }
        Self {
            pools: Mutex::new(Pools {
                totals,
                quota: vec![share; functions],
                usage: vec![Quota::default(); functions],
            }),
        }
    }

    /// Pools for `functions` functions with the default split ([`default_share`]) of this
    /// machine's DMA budget ([`DmaBudget::of_host`]).
    pub fn with_defaults(functions: usize) -> Self {
        Self::with_budget(functions, DmaBudget::of_host())
    }

    /// Pools for `functions` functions with the default split ([`default_share`]) of
    /// `budget`.
    pub fn with_budget(functions: usize, budget: DmaBudget) -> Self {
        Self::new(functions, default_share(functions, budget))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Pools> {
        // Every update below completes before anything can panic, so a poisoned lock still
        // guards consistent numbers.
        self.pools.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Number of functions.
    pub fn functions(&self) -> usize {
        self.lock().quota.len()
    }

    /// Charges `n` of `r` to `function`; fails with [`Status::NoResources`], charging
    /// nothing, if that would exceed its quota (or the function does not exist).
    pub fn charge(&self, function: usize, r: Resource, n: u64) -> Result<(), Status> {
        let mut p = self.lock();
        let quota = p.quota.get(function).map(|q| u64::from(get(q, r)));
        let (Some(quota), Some(usage)) = (quota, p.usage.get_mut(function)) else {
            return Err(Status::NoResources);
        };
        let used = get_mut(usage, r);
        match u64::from(*used).checked_add(n) {
            Some(total) if total <= quota => {
                // total <= quota, a u32.
                *used = total as u32;
                Ok(())
            }
            _ => Err(Status::NoResources),
        }
    }

    /// Gives back `n` of `r` that `function` was charged. The only way DMA usage goes
    /// down.
    pub fn release(&self, function: usize, r: Resource, n: u64) {
        let mut p = self.lock();
        if let Some(usage) = p.usage.get_mut(function) {
            let used = get_mut(usage, r);
            if u64::from(*used) < n {
                // A release without its charge is a device bug; keep the count sane.
                log::error!("function {function}: released {n} of {r:?} but uses {used}");
            }
            *used = (u64::from(*used).saturating_sub(n)) as u32;
        }
    }

    /// Releases everything `function`'s objects were charged: they are all gone (reset).
    /// DMA usage ([`Resource::is_dma`]) stays: the client's mappings survive the reset,
    /// and the DMA code releases them one by one when they go.
    pub fn release_all(&self, function: usize) {
        if let Some(usage) = self.lock().usage.get_mut(function) {
            for r in Resource::ALL.into_iter().filter(|r| !r.is_dma()) {
                *get_mut(usage, r) = 0;
            }
        }
    }

    /// Moves usage of objects from one function to another atomically (QP migration);
    /// fails and changes nothing if `to` lacks quota (or either function does not exist).
    /// DMA usage never moves: the client's mappings stay with their function, so a DMA
    /// kind in `usage` fails the whole move.
    pub fn transfer(
        &self,
        from: usize,
        to: usize,
        usage: &[(Resource, u64)],
    ) -> Result<(), Status> {
        if let Some((r, _)) = usage.iter().find(|(r, _)| r.is_dma()) {
            // A device bug: nothing that moves with a QP holds DMA windows.
            log::error!("function {from} to {to}: {r:?} usage does not move");
            return Err(Status::BadParam);
        }
        let mut p = self.lock();
        if from >= p.usage.len() || to >= p.usage.len() {
            return Err(Status::NoResources);
        }
        if from == to {
            return Ok(());
        }
        // Check the whole move first (the same kind may appear more than once).
        let mut incoming = Quota::default();
        for &(r, n) in usage {
            let slot = get_mut(&mut incoming, r);
            *slot = u32::try_from(u64::from(*slot) + n).map_err(|_| Status::NoResources)?;
        }
        for r in Resource::ALL {
            let want = u64::from(get(&p.usage[to], r)) + u64::from(get(&incoming, r));
            if want > u64::from(get(&p.quota[to], r)) {
                return Err(Status::NoResources);
            }
        }
        for r in Resource::ALL {
            let n = get(&incoming, r);
            let src = get_mut(&mut p.usage[from], r);
            *src = src.saturating_sub(n);
            *get_mut(&mut p.usage[to], r) += n;
        }
        Ok(())
    }

    /// What `function` uses now (zeros for a function that does not exist).
    pub fn usage(&self, function: usize) -> Quota {
        self.lock().usage.get(function).copied().unwrap_or_default()
    }

    /// `function`'s quota (zeros for a function that does not exist).
    pub fn quota(&self, function: usize) -> Quota {
        self.lock().quota.get(function).copied().unwrap_or_default()
    }

    /// The device totals.
    pub fn totals(&self) -> Quota {
        self.lock().totals
    }

    /// What no function's quota holds.
    pub fn unassigned(&self) -> Quota {
        let p = self.lock();
        let mut free = Quota::default();
        for r in Resource::ALL {
            let left = u64::from(get(&p.totals, r)).saturating_sub(p.assigned(r, None));
            *get_mut(&mut free, r) = left as u32;
        }
        free
    }

    /// Sets `function`'s quota to `quota`, all or nothing: fails if it is below what the
    /// function uses, or would take more than is unassigned.
    pub fn set_quota(&self, function: usize, quota: Quota) -> Result<(), QuotaError> {
        let mut p = self.lock();
        if function >= p.quota.len() {
            return Err(QuotaError::NoFunction);
        }
        for r in Resource::ALL {
            let want = u64::from(get(&quota, r));
            if r == Resource::DoorbellPages && want > u64::from(rnic_abi::doorbell::PAGES) {
                return Err(QuotaError::TooLarge(r));
            }
            if want < u64::from(get(&p.usage[function], r)) {
                return Err(QuotaError::BelowUsage(r));
            }
            if p.assigned(r, Some(function)) + want > u64::from(get(&p.totals, r)) {
                return Err(QuotaError::Exhausted(r));
            }
        }
        p.quota[function] = quota;
        Ok(())
    }
}

/// A function's DMA windows charged to its quota in the device's pool
/// ([`Resource::DmaWindows`], [`Resource::DmaPages`]): what its [`crate::dma::DmaSpace`]
/// checks every DMA_MAP against.
#[derive(Debug)]
pub struct PoolQuota {
    pool: Arc<ResourcePool>,
    member: usize,
}

impl PoolQuota {
    /// The DMA quota of `member` in `pool`.
    pub fn new(pool: Arc<ResourcePool>, member: usize) -> Self {
        Self { pool, member }
    }
}

impl crate::dma::DmaQuota for PoolQuota {
    fn charge_window(&self, pages: u64) -> Result<(), String> {
        let (quota, usage) = (self.pool.quota(self.member), self.pool.usage(self.member));
        self.pool
            .charge(self.member, Resource::DmaWindows, 1)
            .map_err(|_| {
                format!(
                    "the function holds {} DMA windows, its quota (rnic-admin quota set \
                     --dma-windows)",
                    usage.dma_windows
                )
            })?;
        if self
            .pool
            .charge(self.member, Resource::DmaPages, pages)
            .is_err()
        {
            self.pool.release(self.member, Resource::DmaWindows, 1);
            return Err(format!(
                "{pages} more pages would take the function's DMA windows past its quota of \
                 {} pages ({} in use; rnic-admin quota set --dma-memory)",
                quota.dma_pages, usage.dma_pages
            ));
        }
        Ok(())
    }

    fn release_window(&self, pages: u64) {
        self.pool.release(self.member, Resource::DmaWindows, 1);
        self.pool.release(self.member, Resource::DmaPages, pages);
    }

    fn max_windows(&self) -> u32 {
        self.pool.quota(self.member).dma_windows
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn share() -> Quota {
        Quota {
            qps: 4,
            cqs: 4,
            mrs: 4,
            pds: 2,
            mr_pages: 100,
            doorbell_pages: 2,
            dma_windows: 3,
            dma_pages: 1000,
        }
    }

    /// A machine whose `vm.max_map_count` reads 65530, Linux's default.
    fn linux_default() -> DmaBudget {
        DmaBudget::from_max_map_count(Ok("65530\n".into()))
    }

    #[test]
    fn charges_stop_at_the_quota_and_releases_give_back() {
        let pool = ResourcePool::new(3, share());
        assert_eq!(pool.totals().qps, 12);
        for _ in 0..4 {
            pool.charge(1, Resource::Qp, 1).unwrap();
        }
        assert_eq!(pool.charge(1, Resource::Qp, 1), Err(Status::NoResources));
        assert_eq!(pool.usage(1).qps, 4);
        // Other functions are untouched by one's exhaustion.
        pool.charge(2, Resource::Qp, 4).unwrap();
        pool.release(1, Resource::Qp, 3);
        assert_eq!(pool.usage(1).qps, 1);
        assert_eq!(
            pool.charge(1, Resource::MrPages, 101),
            Err(Status::NoResources)
        );
        assert_eq!(pool.usage(1).mr_pages, 0);
        pool.release_all(2);
        assert_eq!(pool.usage(2), Quota::default());
        assert_eq!(pool.charge(9, Resource::Qp, 1), Err(Status::NoResources));
    }

    #[test]
    fn quotas_never_exceed_the_totals() {
        let pool = ResourcePool::new(3, share());
        assert_eq!(pool.unassigned(), Quota::default());
        let grow = Quota { qps: 5, ..share() };
        assert_eq!(
            pool.set_quota(1, grow),
            Err(QuotaError::Exhausted(Resource::Qp))
        );
        pool.set_quota(2, Quota { qps: 3, ..share() }).unwrap();
        assert_eq!(pool.unassigned().qps, 1);
        pool.set_quota(1, grow).unwrap();
        assert_eq!(pool.unassigned().qps, 0);
        assert_eq!(pool.quota(1).qps, 5);
        let total: u32 = (0..3).map(|f| pool.quota(f).qps).sum();
        assert_eq!(total, pool.totals().qps);
    }

    #[test]
    fn a_quota_cannot_drop_below_usage() {
        let pool = ResourcePool::new(2, share());
        pool.charge(1, Resource::Pd, 2).unwrap();
        assert_eq!(
            pool.set_quota(1, Quota { pds: 1, ..share() }),
            Err(QuotaError::BelowUsage(Resource::Pd))
        );
        assert_eq!(pool.quota(1), share());
        assert_eq!(
            pool.set_quota(
                1,
                Quota {
                    doorbell_pages: rnic_abi::doorbell::PAGES + 1,
                    ..share()
                }
            ),
            Err(QuotaError::TooLarge(Resource::DoorbellPages))
        );
        assert_eq!(pool.set_quota(5, share()), Err(QuotaError::NoFunction));
    }

    #[test]
    fn transfer_is_all_or_nothing() {
        let pool = ResourcePool::new(2, share());
        pool.charge(0, Resource::Qp, 1).unwrap();
        pool.charge(0, Resource::Mr, 3).unwrap();
        pool.charge(1, Resource::Mr, 2).unwrap();
        // 2 + 3 MRs exceed function 1's 4: nothing moves.
        assert_eq!(
            pool.transfer(0, 1, &[(Resource::Qp, 1), (Resource::Mr, 3)]),
            Err(Status::NoResources)
        );
        assert_eq!(pool.usage(0).mrs, 3);
        assert_eq!(pool.usage(1).qps, 0);
        pool.transfer(0, 1, &[(Resource::Qp, 1), (Resource::Mr, 2)])
            .unwrap();
        assert_eq!((pool.usage(0).qps, pool.usage(0).mrs), (0, 1));
        assert_eq!((pool.usage(1).qps, pool.usage(1).mrs), (1, 4));
    }

    #[test]
    fn the_dma_windows_budget_is_half_the_map_count() {
        assert_eq!(
            linux_default(),
            DmaBudget {
                windows: 32765,
                pages: u32::MAX
            }
        );
        let big = DmaBudget::from_max_map_count(Ok("262144".into()));
        assert_eq!(big.windows, 131072);
        // Beyond what a count holds, it saturates.
        let huge = DmaBudget::from_max_map_count(Ok(format!("{}", u64::MAX)));
        assert_eq!(huge.windows, u32::MAX);
        // Unreadable or garbled: the fallback.
        let missing = std::io::Error::from(std::io::ErrorKind::NotFound);
        assert_eq!(
            DmaBudget::from_max_map_count(Err(missing)).windows,
            FALLBACK_DMA_WINDOWS
        );
        assert_eq!(
            DmaBudget::from_max_map_count(Ok("many".into())).windows,
            FALLBACK_DMA_WINDOWS
        );
        // This machine's, whatever it is, gives every function some.
        assert!(DmaBudget::of_host().windows > 0);
    }

    #[test]
    fn the_dma_budget_is_split_evenly_and_the_quotas_add_up_to_the_totals() {
        // 3 functions: 32765 windows = 3 x 10921 + 2 left out; u32::MAX pages divide by 3.
        let pool = ResourcePool::with_budget(3, linux_default());
        let share = pool.quota(2);
        assert_eq!((share.dma_windows, share.dma_pages), (10921, u32::MAX / 3));
        assert_eq!(
            Quota {
                dma_windows: 0,
                dma_pages: 0,
                ..share
            },
            DEFAULT_SHARE
        );
        let totals = pool.totals();
        assert_eq!(
            (totals.dma_windows, totals.dma_pages),
            (3 * 10921, u32::MAX)
        );
        assert_eq!(pool.unassigned(), Quota::default());
        // 257 functions (the PF and 256 VFs): 127 windows and 16711935 pages each.
        let pool = ResourcePool::with_budget(257, linux_default());
        let share = pool.quota(256);
        assert_eq!((share.dma_windows, share.dma_pages), (127, 16711935));
        assert_eq!(share.qps, DEFAULT_SHARE.qps);
        for f in 0..257 {
            assert_eq!(pool.quota(f), share, "function {f}");
        }
        let totals = pool.totals();
        assert_eq!(totals.dma_windows, 257 * 127);
        assert_eq!(u64::from(totals.dma_pages), 257 * 16711935);
        assert!(totals.dma_windows <= 32765);
        assert_eq!(pool.unassigned(), Quota::default());
        for r in Resource::ALL {
            let sum: u64 = (0..257).map(|f| u64::from(get(&pool.quota(f), r))).sum();
            assert_eq!(sum, u64::from(get(&totals, r)), "{r:?}");
        }
        // A lone function gets the whole budget.
        let alone = ResourcePool::with_budget(1, linux_default()).quota(0);
        assert_eq!((alone.dma_windows, alone.dma_pages), (32765, u32::MAX));
    }

    #[test]
    fn dma_usage_is_charged_like_objects_and_survives_resets() {
        let pool = ResourcePool::new(2, share());
        for _ in 0..3 {
            pool.charge(1, Resource::DmaWindows, 1).unwrap();
        }
        assert_eq!(
            pool.charge(1, Resource::DmaWindows, 1),
            Err(Status::NoResources)
        );
        pool.charge(1, Resource::DmaPages, 600).unwrap();
        assert_eq!(
            pool.charge(1, Resource::DmaPages, 401),
            Err(Status::NoResources)
        );
        // More pages than a count holds are refused, not wrapped.
        assert_eq!(
            pool.charge(1, Resource::DmaPages, u64::MAX),
            Err(Status::NoResources)
        );
        pool.charge(1, Resource::Qp, 2).unwrap();
        pool.charge(1, Resource::MrPages, 50).unwrap();
        // A reset releases the objects' charges and keeps the client's mappings'.
        pool.release_all(1);
        let left = pool.usage(1);
        assert_eq!(
            left,
            Quota {
                dma_windows: 3,
                dma_pages: 600,
                ..Quota::default()
            }
        );
        assert_eq!(
            pool.charge(1, Resource::DmaWindows, 1),
            Err(Status::NoResources),
            "still full after the reset"
        );
        // Only release gives them back.
        pool.release(1, Resource::DmaWindows, 1);
        pool.release(1, Resource::DmaPages, 200);
        assert_eq!(
            (pool.usage(1).dma_windows, pool.usage(1).dma_pages),
            (2, 400)
        );
        pool.charge(1, Resource::DmaWindows, 1).unwrap();
        assert_eq!(pool.usage(0), Quota::default(), "function 0 untouched");
        assert_eq!(Resource::DmaWindows.index(), resource::DMA_WINDOWS);
        assert_eq!(Resource::DmaPages.index(), resource::DMA_PAGES);
        let dma: Vec<_> = Resource::ALL.into_iter().filter(|r| r.is_dma()).collect();
        assert_eq!(dma, [Resource::DmaWindows, Resource::DmaPages]);
    }

    #[test]
    fn dma_quotas_are_set_as_the_others_are() {
        let pool = ResourcePool::new(3, share());
        pool.charge(1, Resource::DmaWindows, 2).unwrap();
        pool.charge(1, Resource::DmaPages, 500).unwrap();
        let windows = |n| Quota {
            dma_windows: n,
            ..share()
        };
        let pages = |n| Quota {
            dma_pages: n,
            ..share()
        };
        use QuotaError::{BelowUsage, Exhausted};
        use Resource::{DmaPages, DmaWindows};
        use Status::{BadState, NoResources};
        for (function, quota, error, status, syndrome) in [
            // Not below usage: BAD_STATE with the resource index.
            (1, windows(1), BelowUsage(DmaWindows), BadState, 6),
            (1, pages(499), BelowUsage(DmaPages), BadState, 7),
            // Not beyond what is unassigned: NO_RESOURCES with the resource index.
            (2, windows(4), Exhausted(DmaWindows), NoResources, 6),
            (2, pages(1001), Exhausted(DmaPages), NoResources, 7),
        ] {
            assert_eq!(pool.set_quota(function, quota), Err(error));
            assert_eq!(error.status(), (status, syndrome));
        }
        assert_eq!(pool.quota(1), share());
        assert_eq!(pool.quota(2), share());
        // Lowering one function's frees room for another's.
        pool.set_quota(
            0,
            Quota {
                dma_windows: 0,
                dma_pages: 0,
                ..share()
            },
        )
        .unwrap();
        assert_eq!(
            (pool.unassigned().dma_windows, pool.unassigned().dma_pages),
            (3, 1000)
        );
        pool.set_quota(
            2,
            Quota {
                dma_windows: 6,
                dma_pages: 2000,
                ..share()
            },
        )
        .unwrap();
        assert_eq!(pool.unassigned(), Quota::default());
        pool.set_quota(
            1,
            Quota {
                dma_windows: 2,
                dma_pages: 500,
                ..share()
            },
        )
        .unwrap();
        assert_eq!(
            (pool.unassigned().dma_windows, pool.unassigned().dma_pages),
            (1, 500)
        );
    }

    #[test]
    fn transfer_never_moves_dma_usage() {
        let pool = ResourcePool::new(2, share());
        pool.charge(0, Resource::DmaWindows, 2).unwrap();
        pool.charge(0, Resource::DmaPages, 10).unwrap();
        pool.charge(0, Resource::Qp, 1).unwrap();
        let before = (pool.usage(0), pool.usage(1));
        for r in [Resource::DmaWindows, Resource::DmaPages] {
            assert_eq!(
                pool.transfer(0, 1, &[(Resource::Qp, 1), (r, 1)]),
                Err(Status::BadParam),
                "{r:?}"
            );
            assert_eq!(pool.transfer(0, 0, &[(r, 1)]), Err(Status::BadParam));
            assert_eq!((pool.usage(0), pool.usage(1)), before, "nothing moved");
        }
        // Moving the objects leaves the DMA usage where it is.
        pool.transfer(0, 1, &[(Resource::Qp, 1)]).unwrap();
        assert_eq!(
            (pool.usage(0).dma_windows, pool.usage(0).dma_pages),
            (2, 10)
        );
        assert_eq!(
            pool.usage(1),
            Quota {
                qps: 1,
                ..Quota::default()
            }
        );
    }
}
