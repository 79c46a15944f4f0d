//! Device-wide resource pools and the quota each function holds of them.
//!
//! The device has a fixed number of each resource kind ([`Resource`]): its totals. Each
//! function (member 0 = PF, n = VF n-1) holds a quota carved from those totals; the sum of
//! all quotas never exceeds them, so a function that stays within its quota can never
//! starve another. Every object a function creates is charged against its quota, and
//! released when the object goes (destroy, reset, FLR). The PF changes quotas with the
//! admin command `SET_QUOTA`.
//!
//! Default split: every function gets [`DEFAULT_SHARE`], and the totals are exactly that
//! share times the number of functions, so nothing is unassigned until the PF lowers a
//! quota; raising one function's quota means lowering another's first.

use std::sync::Mutex;

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
}

impl Resource {
    /// Every kind, in the order of the fields of [`Quota`].
    pub const ALL: [Resource; 6] = [
        Resource::Qp,
        Resource::Cq,
        Resource::Mr,
        Resource::Pd,
        Resource::MrPages,
        Resource::DoorbellPages,
    ];

    /// The kind's index as `rnic_abi::admin::resource` numbers it (syndromes name it).
    pub fn index(self) -> u32 {
        match self {
            Resource::Qp => resource::QPS,
            Resource::Cq => resource::CQS,
            Resource::Mr => resource::MRS,
            Resource::Pd => resource::PDS,
            Resource::MrPages => resource::MR_PAGES,
            Resource::DoorbellPages => resource::DOORBELL_PAGES,
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
    }
}

/// What each function gets by default, and what the device has per function.
pub const DEFAULT_SHARE: Quota = Quota {
    qps: 256,
    cqs: 256,
    mrs: 1024,
    pds: 256,
    // 1 GiB of 4 KiB pages.
    mr_pages: 1 << 18,
    doorbell_pages: rnic_abi::doorbell::PAGES,
};

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

    /// Pools for `functions` functions with [`DEFAULT_SHARE`] each.
    pub fn with_defaults(functions: usize) -> Self {
        Self::new(functions, DEFAULT_SHARE)
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

    /// Gives back `n` of `r` that `function` was charged.
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

    /// Releases everything `function` was charged: its objects are all gone (reset).
    pub fn release_all(&self, function: usize) {
        if let Some(usage) = self.lock().usage.get_mut(function) {
            *usage = Quota::default();
        }
    }

    /// Moves usage from one function to another atomically; fails and changes nothing if
    /// `to` lacks quota (or either function does not exist).
    pub fn transfer(
        &self,
        from: usize,
        to: usize,
        usage: &[(Resource, u64)],
    ) -> Result<(), Status> {
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
        }
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
}
