//! The objects C holds pointers to (PDs, MRs, memory windows, CQs, completion channels,
//! QPs, SRQs, AHs),
//! and how a pointer C hands back is turned into the object again.
//!
//! Each object is an [`Obj`]: the C structure first (so the pointer C holds is the
//! object's address, and a structure that extends another, `ibv_qp_ex` of `ibv_qp` or
//! `ibv_cq_ex` of `ibv_cq`, serves both), then a magic number, then the library's state.
//! It lives in an `Arc` held by the registry until it is destroyed or its context is
//! closed.
//!
//! Two ways back from a pointer:
//!
//! - The control path (create, modify, query, destroy) looks the address up in the
//!   registry ([`lookup`]): a pointer that is not a live object of the right kind is
//!   `EINVAL` and is never dereferenced. The registry is one mutex; creating and
//!   destroying objects is rare.
//! - The data path (post, poll, notify, the `ibv_wr_*` builders) must not take a global
//!   lock: it reads the magic number at the pointer ([`from_c`]). verbs.h's inline
//!   functions have already dereferenced the pointer (`qp->context->ops`) before the
//!   library sees it, so the memory is the caller's object or at least readable; a
//!   destroyed object's magic was cleared, and anything else is `EINVAL`. As in
//!   rdma-core, using an object while another thread destroys it is the caller's error.

use std::any::Any;
use std::cell::UnsafeCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::abi::*;
use crate::ffi::{invalid, Errno};

/// A C structure of an object, with what the registry needs to know of its kind.
pub(crate) trait CType: 'static {
    /// What the kind is called in messages.
    const NAME: &'static str;
    /// The magic number of live objects of this kind.
    const MAGIC: u64;
    /// The order in which a closing context destroys its objects (users before what
    /// they use).
    const RANK: u8;
}

macro_rules! c_types {
    ($($ty:ty = $name:literal, $magic:literal, $rank:literal;)*) => {$(
        impl CType for $ty {
            const NAME: &'static str = $name;
            const MAGIC: u64 = u64::from_be_bytes(*$magic);
            const RANK: u8 = $rank;
        }
    )*};
}

c_types! {
    ibv_qp_ex = "QP", b"rnic-QP\0", 0;
    // Before the regions they may be bound to (a region with a bound window cannot be
    // deregistered).
    ibv_mw = "memory window", b"rnic-MW\0", 1;
    ibv_srq = "SRQ", b"rnicSRQ\0", 2;
    ibv_ah = "AH", b"rnic-AH\0", 3;
    ibv_mr = "MR", b"rnic-MR\0", 4;
    ibv_cq_ex = "CQ", b"rnic-CQ\0", 5;
    ibv_pd = "PD", b"rnic-PD\0", 6;
    ibv_comp_channel = "completion channel", b"rnicCHN\0", 7;
}

/// An object: C's structure, the magic number, the library's state `R`.
#[repr(C)]
pub(crate) struct Obj<C, R> {
    c: UnsafeCell<C>,
    magic: AtomicU64,
    /// The library's side of the object.
    pub(crate) r: R,
}

// SAFETY: the C structure is written by Rust only through raw pointers, at creation and
// in the few fields libibverbs itself maintains (a QP's `state`), as rdma-core does;
// C reads and writes it through the pointer it holds. Rust never makes references into
// it. `R` is Send and Sync itself.
unsafe impl<C, R: Send> Send for Obj<C, R> {}
// SAFETY: as above.
unsafe impl<C, R: Sync> Sync for Obj<C, R> {}

impl<C: CType, R> Obj<C, R> {
    /// The pointer C holds.
    pub(crate) fn c_ptr(&self) -> *mut C {
        self.c.get()
    }

    /// Whether the object is live (not destroyed).
    fn live(&self) -> bool {
        self.magic.load(Ordering::Acquire) == C::MAGIC
    }
}

/// One registered object.
struct Entry {
    /// The `ibv_context` it belongs to.
    ctx: usize,
    rank: u8,
    obj: Arc<dyn Any + Send + Sync>,
    /// Clears its magic number (the object is known to be an `Obj` of some `C`, `R`).
    kill: fn(&(dyn Any + Send + Sync)),
}

/// Every live object by the address of its C structure.
static OBJECTS: Mutex<Option<HashMap<usize, Entry>>> = Mutex::new(None);

fn objects() -> MutexGuard<'static, Option<HashMap<usize, Entry>>> {
    OBJECTS.lock().unwrap_or_else(|e| e.into_inner())
}

/// Clears the magic number of an `Obj<C, R>` behind `any`.
fn kill<C: CType, R: Send + Sync + 'static>(any: &(dyn Any + Send + Sync)) {
    if let Some(o) = any.downcast_ref::<Obj<C, R>>() {
        o.magic.store(0, Ordering::Release);
    }
}

/// Makes an object of context `ctx` from its C structure `c` (which `init` may finish
/// once the object has its address) and state `r`, and registers it.
pub(crate) fn register<C: CType, R: Send + Sync + 'static>(
    ctx: *const ibv_context,
    c: C,
    r: R,
    init: impl FnOnce(&Obj<C, R>),
) -> Arc<Obj<C, R>> {
    let obj = Arc::new(Obj {
        c: UnsafeCell::new(c),
        magic: AtomicU64::new(C::MAGIC),
        r,
    });
    init(&obj);
    let entry = Entry {
        ctx: ctx as usize,
        rank: C::RANK,
        obj: obj.clone(),
        kill: kill::<C, R>,
    };
    objects()
        .get_or_insert_with(HashMap::new)
        .insert(obj.c_ptr() as usize, entry);
    obj
}

/// The live object of kind `C` at `ptr` (control path: the registry says, the pointer is
/// never dereferenced).
pub(crate) fn lookup<C: CType, R: Send + Sync + 'static>(
    ptr: *const C,
) -> Result<Arc<Obj<C, R>>, Errno> {
    if ptr.is_null() {
        return Err(invalid(format_args!("{} is NULL", C::NAME)));
    }
    objects()
        .as_ref()
        .and_then(|all| all.get(&(ptr as usize)))
        .and_then(|e| e.obj.clone().downcast::<Obj<C, R>>().ok())
        .ok_or_else(|| invalid(format_args!("{ptr:p} is not a live {}", C::NAME)))
}

/// Removes the object at `ptr` from the registry (it is then destroyed when the last
/// holder lets go) and clears its magic number, after `check` (run under the registry's
/// lock, so no other destroy races it) agreed.
pub(crate) fn unregister<C: CType, R: Send + Sync + 'static>(
    ptr: *const C,
    check: impl FnOnce(&Arc<Obj<C, R>>) -> Result<(), Errno>,
) -> Result<Arc<Obj<C, R>>, Errno> {
    let mut guard = objects();
    let all = guard.get_or_insert_with(HashMap::new);
    let obj = all
        .get(&(ptr as usize))
        .and_then(|e| e.obj.clone().downcast::<Obj<C, R>>().ok())
        .ok_or_else(|| invalid(format_args!("{ptr:p} is not a live {}", C::NAME)))?;
    check(&obj)?;
    all.remove(&(ptr as usize));
    obj.magic.store(0, Ordering::Release);
    Ok(obj)
}

/// How many holders an object has besides the registry and the caller's own reference:
/// the objects created from it (an MR of a PD, a QP of a CQ, ...), which keep it.
pub(crate) fn users<C, R>(obj: &Arc<Obj<C, R>>) -> usize {
    Arc::strong_count(obj).saturating_sub(2)
}

/// Removes every object of context `ctx` from the registry and returns them in the order
/// they are to be dropped (users before what they use).
pub(crate) fn take_context(ctx: *const ibv_context) -> Vec<Arc<dyn Any + Send + Sync>> {
    let mut guard = objects();
    let Some(all) = guard.as_mut() else {
        return Vec::new();
    };
    let keys: Vec<usize> = all
        .iter()
        .filter(|(_, e)| e.ctx == ctx as usize)
        .map(|(k, _)| *k)
        .collect();
    let mut taken: Vec<Entry> = keys.iter().filter_map(|k| all.remove(k)).collect();
    drop(guard);
    taken.sort_by_key(|e| e.rank);
    taken
        .into_iter()
        .map(|e| {
            (e.kill)(&*e.obj);
            e.obj
        })
        .collect()
}

/// The live object of kind `C` at `ptr`, for the data path: checked by its magic number
/// only (see the module's documentation).
///
/// # Safety
///
/// `ptr` is NULL, or points to memory readable for an `Obj<C, R>`'s header: the C
/// structure and the magic number (any object of this library of kind `C`, live or
/// destroyed but not yet freed, is; so is what verbs.h's inline functions reached
/// through the pointer already).
pub(crate) unsafe fn from_c<'a, C: CType, R>(ptr: *const C) -> Result<&'a Obj<C, R>, Errno> {
    if ptr.is_null() {
        return Err(invalid(format_args!("{} is NULL", C::NAME)));
    }
    // SAFETY: `c` is the first field of the repr(C) Obj, so an object's C pointer is the
    // object's address; the caller promises the header is readable. The magic number is
    // read atomically, and only a match lets the rest of the object be used.
    let obj = unsafe { &*(ptr as *const Obj<C, R>) };
    if obj.live() {
        Ok(obj)
    } else {
        Err(invalid(format_args!("{ptr:p} is not a live {}", C::NAME)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type TestPd = Obj<ibv_pd, u32>;

    #[test]
    fn objects_are_found_by_their_c_pointer_until_destroyed() {
        let ctx = 0x1000 as *const ibv_context;
        let obj: Arc<TestPd> = register(ctx, ibv_pd::zeroed(), 7, |o| {
            // SAFETY: the structure is ours and not yet shared.
            unsafe { (*o.c_ptr()).handle = 9 };
        });
        let p = obj.c_ptr();
        assert_eq!(lookup::<ibv_pd, u32>(p).unwrap().r, 7);
        // SAFETY: p is a live object of ours.
        assert_eq!(unsafe { from_c::<ibv_pd, u32>(p) }.unwrap().r, 7);
        // SAFETY: as above.
        assert_eq!(unsafe { (*p).handle }, 9);
        // The wrong state type or kind is not found.
        assert!(lookup::<ibv_pd, u64>(p).is_err());
        assert!(lookup::<ibv_mr, u32>(p as *const ibv_mr).is_err());
        // A check that refuses keeps it.
        let busy = unregister::<ibv_pd, u32>(p, |_| Err(libc::EBUSY));
        assert_eq!(busy.err(), Some(libc::EBUSY));
        let gone = unregister::<ibv_pd, u32>(p, |_| Ok(())).unwrap();
        assert!(lookup::<ibv_pd, u32>(p).is_err());
        assert_eq!(
            // SAFETY: `gone` keeps the memory alive; the magic is cleared.
            unsafe { from_c::<ibv_pd, u32>(p) }.err(),
            Some(libc::EINVAL)
        );
        drop((gone, obj));
    }

    #[test]
    fn garbage_and_null_are_einval() {
        assert!(lookup::<ibv_pd, u32>(std::ptr::null()).is_err());
        assert!(lookup::<ibv_pd, u32>(0x42 as *const ibv_pd).is_err());
        // SAFETY: NULL is allowed.
        assert!(unsafe { from_c::<ibv_pd, u32>(std::ptr::null()) }.is_err());
        // A readable structure that is not an object of ours.
        let not_ours = [0u64; 8];
        // SAFETY: 64 readable bytes, more than an Obj<ibv_pd, u32>'s header.
        let r = unsafe { from_c::<ibv_pd, u32>(not_ours.as_ptr().cast()) };
        assert!(r.is_err());
    }

    #[test]
    fn closing_a_context_takes_its_objects_users_first() {
        let ctx = 0x2000 as *const ibv_context;
        let other = 0x3000 as *const ibv_context;
        let pd: Arc<Obj<ibv_pd, ()>> = register(ctx, ibv_pd::zeroed(), (), |_| ());
        let mr: Arc<Obj<ibv_mr, ()>> = register(ctx, ibv_mr::zeroed(), (), |_| ());
        let keep: Arc<Obj<ibv_pd, ()>> = register(other, ibv_pd::zeroed(), (), |_| ());
        let taken = take_context(ctx);
        assert_eq!(taken.len(), 2);
        assert!(taken[0].downcast_ref::<Obj<ibv_mr, ()>>().is_some());
        assert!(!pd.live() && !mr.live() && keep.live());
        assert!(lookup::<ibv_pd, ()>(keep.c_ptr()).is_ok());
        assert!(lookup::<ibv_pd, ()>(pd.c_ptr()).is_err());
        unregister::<ibv_pd, ()>(keep.c_ptr(), |_| Ok(())).unwrap();
    }
}
