//! Keeping the library's own threads off the heap while registration moves pages.
//!
//! On the host, `ibv_reg_mr` makes the application's pages reachable by rnicd by moving
//! them, in place, onto a memfd: their contents are copied, then the memfd is mapped over
//! the same addresses (`rnic_driver`'s `back_with_memfd`). A write to those pages by
//! another thread between the copy and the new mapping is lost. malloc'd buffers share
//! their first and last pages with the allocator's bookkeeping of neighbouring chunks,
//! and the library's own threads (the event thread, the thread that opens a function)
//! allocate and free: a free that lands in such a page during the move corrupts the heap
//! ("corrupted double-linked list" in `ibv_ud_pingpong`, whose buffer is `size + 40`
//! bytes). So those threads touch the heap only while holding [`shared`], and the
//! mapping of user memory runs under [`exclusive`]. The application's own threads are
//! its business (README.md: register before other threads touch the pages).

use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

static HEAP: RwLock<()> = RwLock::new(());

/// Held by a library thread while it may allocate or free.
pub(crate) fn shared() -> RwLockReadGuard<'static, ()> {
    HEAP.read().unwrap_or_else(|e| e.into_inner())
}

/// Held while the transport maps user memory: no library thread is on the heap.
pub(crate) fn exclusive() -> RwLockWriteGuard<'static, ()> {
    HEAP.write().unwrap_or_else(|e| e.into_inner())
}
