//! Memory windows (`rnic_abi::mw`, docs/hardware-interface.md §14.12): rkeys that grant
//! remote access to a range of one memory region, with rights of their own, bound and
//! unbound by work requests while the region stays registered. As rxe's `rxe_mw.c`.
//!
//! A window lives in the table here, inside the [`super::mr::MrTable`], under a key with
//! [`MW_KEY_BIT`] set: its slot's index and the tag of its latest bind. It is an rkey
//! only: [`super::mr::MrTable::check_remote`] resolves it for the responder, to the region
//! it is bound to (whose own check then runs: validity, PD, bounds), while as an lkey it
//! is a key that does not exist. [`MwTable::bind`] runs a `BIND_MW` WQE when the requester
//! reaches it; [`MwTable::invalidate`] runs LOCAL_INV and SEND with invalidate of a type 2
//! window.

use rnic_abi::mw::{BindMwWqe, MAX_MW_INDEX, MW_ACCESS_ALL, MW_KEY_BIT, MW_TYPE_1, MW_TYPE_2};
use rnic_abi::verbs::{
    ACCESS_LOCAL_WRITE, ACCESS_MW_BIND, ACCESS_REMOTE_ATOMIC, ACCESS_REMOTE_WRITE,
    ACCESS_ZERO_BASED,
};

use super::{Access, KeyError};

/// What a window is bound to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Binding {
    /// The region's key.
    pub mr_key: u32,
    /// Where the window starts in the region's `iova` space.
    pub addr: u64,
    /// Bytes of the window (at least 1).
    pub length: u64,
    /// Its rights (`MW_ACCESS_ALL` bits).
    pub access: u32,
    /// A type 2 window's QP: the only one requests through it may arrive on.
    pub qpn: Option<u32>,
}

/// A memory window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    /// Its protection domain.
    pub pdn: u32,
    /// `MW_TYPE_1` or `MW_TYPE_2`.
    pub mw_type: u8,
    /// The low byte of its key, set by each bind.
    pub tag: u8,
    /// What it grants access to; `None` while unbound (a type 2 window: free).
    pub binding: Option<Binding>,
}

/// The region a bind names, as the MR table knows it: what [`MwTable::bind`] checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Region {
    /// Its protection domain.
    pub pdn: u32,
    /// Its `ACCESS_*` flags.
    pub access: u32,
    /// Its first byte's address.
    pub iova: u64,
    /// Its length.
    pub length: u64,
    /// Not invalidated.
    pub valid: bool,
}

/// Why a bind failed: the WR completes with `MW_BIND_ERR` whatever the reason; this says
/// which, for the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BindError {
    /// No window has the WQE's index, or it is of another PD than the QP.
    NoWindow,
    /// The new key names another window (another index).
    OtherKey,
    /// Rights outside `MW_ACCESS_ALL`, or zero-based for a type 1 window.
    BadAccess,
    /// A type 2 window that is bound already, or a bind of length 0 for one.
    NotFree,
    /// The WQE carries SGEs or inline data.
    Malformed,
    /// The region: none with that key (or not a plain MR), invalidated, of another PD,
    /// without `ACCESS_MW_BIND`, without local write for remote write or atomic rights,
    /// or the range is not inside it.
    Region,
}

/// Whether `key` is a memory window's key: [`MW_KEY_BIT`] set, bit 31 (indirect keys)
/// clear.
pub fn is_window_key(key: u32) -> bool {
    key & (MW_KEY_BIT | rnic_abi::mkey::INDIRECT_KEY_BIT) == MW_KEY_BIT
}

/// The slot index of window key `key`.
fn index(key: u32) -> usize {
    ((key & !MW_KEY_BIT) >> 8) as usize
}

/// The windows of one function.
#[derive(Debug, Default)]
pub struct MwTable {
    slots: Vec<Option<Window>>,
}

impl MwTable {
    /// A new unbound window of `mw_type` in `pdn`: its key (tag 0), or `None` when all
    /// [`MAX_MW_INDEX`] slots are taken. (The function's quota of MRs bounds it first.)
    pub fn alloc(&mut self, pdn: u32, mw_type: u8) -> Option<u32> {
        let index = match self.slots.iter().position(Option::is_none) {
            Some(i) => i,
            None if (self.slots.len() as u32) < MAX_MW_INDEX => {
                self.slots.push(None);
                self.slots.len() - 1
            }
            None => return None,
        };
        self.slots[index] = Some(Window {
            pdn,
            mw_type,
            tag: 0,
            binding: None,
        });
        Some(MW_KEY_BIT | (index as u32) << 8)
    }

    /// The window whose index `key` names, whatever its tag.
    pub fn get(&self, key: u32) -> Option<&Window> {
        if !is_window_key(key) {
            return None;
        }
        self.slots.get(index(key))?.as_ref()
    }

    /// Frees the window whose index `key` names, bound or not.
    pub fn dealloc(&mut self, key: u32) -> Option<Window> {
        if !is_window_key(key) {
            return None;
        }
        self.slots.get_mut(index(key))?.take()
    }

    /// Windows in `pdn`.
    pub fn count_in_pd(&self, pdn: u32) -> usize {
        self.slots.iter().flatten().filter(|w| w.pdn == pdn).count()
    }

    /// Whether a window is bound to the region with key `mr_key`.
    pub fn bound_to(&self, mr_key: u32) -> bool {
        self.slots
            .iter()
            .flatten()
            .any(|w| w.binding.is_some_and(|b| b.mr_key == mr_key))
    }

    /// QP `qpn` is gone: the type 2 windows bound through it are free again (no request
    /// can arrive on it any more).
    pub fn release_qp(&mut self, qpn: u32) {
        for w in self.slots.iter_mut().flatten() {
            if w.binding.is_some_and(|b| b.qpn == Some(qpn)) {
                w.binding = None;
            }
        }
    }

    /// Runs `BIND_MW` WQE `wqe` posted on QP `qpn` of `pdn`; `num_sge` and `inline` are
    /// what the WQE's fixed part says follows it, and `region(key)` looks the region up.
    /// Nothing changes unless every check passes.
    pub fn bind(
        &mut self,
        wqe: &BindMwWqe,
        (pdn, qpn): (u32, u32),
        inline: bool,
        region: impl Fn(u32) -> Option<Region>,
    ) -> Result<(), BindError> {
        if wqe.num_sge != 0 || inline {
            return Err(BindError::Malformed);
        }
        let w = self
            .get(wqe.mw_key)
            .filter(|w| w.pdn == pdn)
            .copied()
            .ok_or(BindError::NoWindow)?;
        if !is_window_key(wqe.new_key) || index(wqe.new_key) != index(wqe.mw_key) {
            return Err(BindError::OtherKey);
        }
        let zero_based = wqe.access & ACCESS_ZERO_BASED != 0;
        if wqe.access & !MW_ACCESS_ALL != 0 || (zero_based && w.mw_type == MW_TYPE_1) {
            return Err(BindError::BadAccess);
        }
        if w.mw_type == MW_TYPE_2 && (w.binding.is_some() || wqe.length == 0) {
            return Err(BindError::NotFree);
        }
        let binding = if wqe.length == 0 {
            // A type 1 window unbound: it grants nothing until the next bind.
            None
        } else {
            let r = region(wqe.mr_lkey).ok_or(BindError::Region)?;
            let writes = wqe.access & (ACCESS_REMOTE_WRITE | ACCESS_REMOTE_ATOMIC) != 0;
            let end = wqe.addr.checked_add(wqe.length).ok_or(BindError::Region)?;
            let inside = wqe.addr >= r.iova && end <= r.iova.saturating_add(r.length);
            if !r.valid
                || r.pdn != pdn
                || r.access & ACCESS_MW_BIND == 0
                || (writes && r.access & ACCESS_LOCAL_WRITE == 0)
                || !inside
            {
                return Err(BindError::Region);
            }
            Some(Binding {
                mr_key: wqe.mr_lkey,
                addr: wqe.addr,
                length: wqe.length,
                access: wqe.access,
                qpn: (w.mw_type == MW_TYPE_2).then_some(qpn),
            })
        };
        if let Some(slot) = self
            .slots
            .get_mut(index(wqe.mw_key))
            .and_then(Option::as_mut)
        {
            slot.tag = wqe.new_key as u8;
            slot.binding = binding;
        }
        Ok(())
    }

    /// Invalidates window `key` for `pdn` (LOCAL_INV, SEND with invalidate): a bound type
    /// 2 window whose key is exactly `key` becomes free. A type 1 window cannot be
    /// invalidated ([`KeyError::NoAccess`]). A SEND with invalidate names the QP it
    /// arrived on (`remote_qpn`): only the one the window was bound through may free it.
    pub fn invalidate(
        &mut self,
        key: u32,
        pdn: u32,
        remote_qpn: Option<u32>,
    ) -> Result<(), KeyError> {
        let w = self
            .slots
            .get_mut(index(key))
            .and_then(Option::as_mut)
            .filter(|w| is_window_key(key) && w.tag == key as u8)
            .ok_or(KeyError::NoSuchKey)?;
        if w.pdn != pdn {
            return Err(KeyError::OtherPd);
        }
        if w.mw_type != MW_TYPE_2 {
            return Err(KeyError::NoAccess);
        }
        let Some(b) = w.binding else {
            return Err(KeyError::Invalidated);
        };
        if remote_qpn.is_some_and(|q| b.qpn != Some(q)) {
            return Err(KeyError::OtherQp);
        }
        w.binding = None;
        Ok(())
    }

    /// Resolves an access through window `key` by a request of QP `qpn` of `pdn`: the
    /// region's key and the address in it where `[addr, addr + len)` of the window lies,
    /// if the window allows it. The region's own check is the caller's.
    pub fn resolve(
        &self,
        key: u32,
        (pdn, qpn): (u32, u32),
        access: Access,
        addr: u64,
        len: u64,
    ) -> Result<(u32, u64), KeyError> {
        let w = self
            .get(key)
            .filter(|w| w.tag == key as u8)
            .ok_or(KeyError::NoSuchKey)?;
        let b = w.binding.ok_or(KeyError::Invalidated)?;
        if w.pdn != pdn {
            return Err(KeyError::OtherPd);
        }
        if b.qpn.is_some_and(|q| q != qpn) {
            return Err(KeyError::OtherQp);
        }
        let wanted = match access {
            Access::RemoteWrite => ACCESS_REMOTE_WRITE,
            Access::RemoteRead | Access::ReadResponse => rnic_abi::verbs::ACCESS_REMOTE_READ,
            Access::RemoteAtomic => ACCESS_REMOTE_ATOMIC,
            // A window is an rkey only.
            Access::LocalRead | Access::LocalWrite => return Err(KeyError::NoSuchKey),
            // Nor does it grant FLUSH rights (`MW_ACCESS_ALL`).
            Access::Flush(_) => return Err(KeyError::NoAccess),
        };
        if b.access & wanted == 0 {
            return Err(KeyError::NoAccess);
        }
        // Zero-based: the peer's address 0 is the window's first byte.
        let start = if b.access & ACCESS_ZERO_BASED != 0 {
            b.addr.checked_add(addr).ok_or(KeyError::OutOfRange)?
        } else {
            addr
        };
        let end = start.checked_add(len).ok_or(KeyError::OutOfRange)?;
        if start < b.addr || end > b.addr + b.length {
            return Err(KeyError::OutOfRange);
        }
        Ok((b.mr_key, start))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rnic_abi::verbs::{wr, ACCESS_REMOTE_READ};

    const MR: u32 = 0x0000_0101;

    fn region(key: u32) -> Option<Region> {
        (key == MR).then_some(Region {
            pdn: 1,
            access: ACCESS_LOCAL_WRITE | ACCESS_MW_BIND,
            iova: 0x1000,
            length: 0x1000,
            valid: true,
        })
    }

    fn bind_wqe(mw_key: u32, tag: u8, addr: u64, length: u64, access: u32) -> BindMwWqe {
        BindMwWqe {
            opcode: wr::BIND_MW,
            mw_key,
            new_key: (mw_key & !0xFF) | u32::from(tag),
            mr_lkey: MR,
            addr,
            length,
            access,
            ..BindMwWqe::default()
        }
    }

    const RW: u32 = ACCESS_REMOTE_READ | ACCESS_REMOTE_WRITE;

    #[test]
    fn a_type_1_window_is_bound_again_and_again_for_any_qp_and_never_invalidated() {
        let mut t = MwTable::default();
        let k = t.alloc(1, MW_TYPE_1).unwrap();
        assert!(is_window_key(k) && k & 0xFF == 0);
        assert_eq!(
            t.resolve(k, (1, 0x11), Access::RemoteRead, 0x1000, 1),
            Err(KeyError::Invalidated),
            "unbound: grants nothing"
        );
        t.bind(&bind_wqe(k, 1, 0x1100, 0x100, RW), (1, 0x11), false, region)
            .unwrap();
        let k1 = k | 1;
        // Any QP of the PD; the window's range and rights only.
        assert_eq!(
            t.resolve(k1, (1, 0x99), Access::RemoteWrite, 0x1180, 0x80),
            Ok((MR, 0x1180))
        );
        assert_eq!(
            t.resolve(k1, (1, 0x11), Access::RemoteWrite, 0x1180, 0x81),
            Err(KeyError::OutOfRange)
        );
        assert_eq!(
            t.resolve(k1, (1, 0x11), Access::RemoteRead, 0x10FF, 1),
            Err(KeyError::OutOfRange)
        );
        assert_eq!(
            t.resolve(k1, (1, 0x11), Access::RemoteAtomic, 0x1100, 8),
            Err(KeyError::NoAccess)
        );
        assert_eq!(
            t.resolve(k1, (2, 0x11), Access::RemoteRead, 0x1100, 8),
            Err(KeyError::OtherPd)
        );
        assert_eq!(
            t.resolve(k1, (1, 0x11), Access::LocalRead, 0x1100, 8),
            Err(KeyError::NoSuchKey),
            "an rkey only"
        );
        // Bound again: the old key is refused, the new one works.
        t.bind(
            &bind_wqe(k1, 2, 0x1000, 0x10, ACCESS_REMOTE_READ),
            (1, 0x11),
            false,
            region,
        )
        .unwrap();
        assert_eq!(
            t.resolve(k1, (1, 0x11), Access::RemoteRead, 0x1000, 1),
            Err(KeyError::NoSuchKey)
        );
        assert!(t
            .resolve(k | 2, (1, 0x11), Access::RemoteRead, 0x1000, 1)
            .is_ok());
        assert!(t.bound_to(MR));
        assert_eq!(t.invalidate(k | 2, 1, None), Err(KeyError::NoAccess));
        // A bind of length 0 unbinds it.
        t.bind(&bind_wqe(k | 2, 3, 0, 0, 0), (1, 0x11), false, region)
            .unwrap();
        assert!(!t.bound_to(MR));
        assert_eq!(
            t.resolve(k | 3, (1, 0x11), Access::RemoteRead, 0x1000, 1),
            Err(KeyError::Invalidated)
        );
        // Zero-based is for type 2 only.
        assert_eq!(
            t.bind(
                &bind_wqe(k | 3, 4, 0x1000, 8, ACCESS_ZERO_BASED),
                (1, 0x11),
                false,
                region
            ),
            Err(BindError::BadAccess)
        );
    }

    #[test]
    fn a_type_2_window_is_of_its_qp_until_invalidated_and_then_free_again() {
        let mut t = MwTable::default();
        let k = t.alloc(1, MW_TYPE_2).unwrap();
        assert_eq!(
            t.bind(&bind_wqe(k, 7, 0x1000, 0, RW), (1, 0x11), false, region),
            Err(BindError::NotFree),
            "length 0"
        );
        t.bind(
            &bind_wqe(k, 7, 0x1200, 0x100, RW | ACCESS_ZERO_BASED),
            (1, 0x11),
            false,
            region,
        )
        .unwrap();
        let k7 = k | 7;
        // Zero-based: the peer's 0 is the window's first byte.
        assert_eq!(
            t.resolve(k7, (1, 0x11), Access::RemoteRead, 0x10, 0x10),
            Ok((MR, 0x1210))
        );
        assert_eq!(
            t.resolve(k7, (1, 0x11), Access::RemoteRead, 0xF0, 0x11),
            Err(KeyError::OutOfRange)
        );
        assert_eq!(
            t.resolve(k7, (1, 0x12), Access::RemoteRead, 0, 1),
            Err(KeyError::OtherQp)
        );
        assert_eq!(
            t.bind(&bind_wqe(k7, 8, 0x1000, 8, RW), (1, 0x11), false, region),
            Err(BindError::NotFree),
            "bound already"
        );
        assert_eq!(
            t.invalidate(k | 6, 1, None),
            Err(KeyError::NoSuchKey),
            "stale key"
        );
        assert_eq!(t.invalidate(k7, 2, None), Err(KeyError::OtherPd));
        assert_eq!(
            t.invalidate(k7, 1, Some(0x12)),
            Err(KeyError::OtherQp),
            "a SEND with invalidate on another QP"
        );
        t.invalidate(k7, 1, Some(0x11)).unwrap();
        assert_eq!(
            t.invalidate(k7, 1, None),
            Err(KeyError::Invalidated),
            "free"
        );
        assert_eq!(
            t.resolve(k7, (1, 0x11), Access::RemoteRead, 0, 1),
            Err(KeyError::Invalidated)
        );
        // Free again: bound through another QP.
        t.bind(&bind_wqe(k7, 9, 0x1000, 8, RW), (1, 0x12), false, region)
            .unwrap();
        assert!(t
            .resolve(k | 9, (1, 0x12), Access::RemoteWrite, 0x1000, 8)
            .is_ok());
        t.release_qp(0x12);
        assert!(!t.bound_to(MR));
    }

    #[test]
    fn binds_check_the_window_the_key_the_rights_and_the_region() {
        let mut t = MwTable::default();
        let k = t.alloc(1, MW_TYPE_1).unwrap();
        let good = bind_wqe(k, 1, 0x1000, 0x1000, RW | ACCESS_REMOTE_ATOMIC);
        let bind = |t: &mut MwTable, w: BindMwWqe| t.bind(&w, (1, 0x11), false, region);
        assert_eq!(
            t.bind(&good, (2, 0x11), false, region),
            Err(BindError::NoWindow),
            "another PD's window"
        );
        assert_eq!(
            bind(
                &mut t,
                BindMwWqe {
                    mw_key: k + 0x100,
                    ..good
                }
            ),
            Err(BindError::NoWindow)
        );
        assert_eq!(
            bind(
                &mut t,
                BindMwWqe {
                    new_key: k + 0x101,
                    ..good
                }
            ),
            Err(BindError::OtherKey)
        );
        assert_eq!(
            bind(
                &mut t,
                BindMwWqe {
                    access: 0x100,
                    ..good
                }
            ),
            Err(BindError::BadAccess)
        );
        assert_eq!(
            bind(&mut t, BindMwWqe { num_sge: 1, ..good }),
            Err(BindError::Malformed)
        );
        assert_eq!(
            t.bind(&good, (1, 0x11), true, region),
            Err(BindError::Malformed)
        );
        for bad in [
            BindMwWqe {
                mr_lkey: 0x202,
                ..good
            },
            BindMwWqe {
                addr: 0xFFF,
                ..good
            },
            BindMwWqe {
                length: 0x1001,
                ..good
            },
            BindMwWqe {
                addr: u64::MAX,
                ..good
            },
        ] {
            assert_eq!(bind(&mut t, bad), Err(BindError::Region), "{bad:?}");
        }
        let without = |access, valid, pdn| {
            move |key: u32| {
                region(key).map(|r| Region {
                    access,
                    valid,
                    pdn,
                    ..r
                })
            }
        };
        for r in [
            without(ACCESS_LOCAL_WRITE, true, 1),
            without(ACCESS_MW_BIND, true, 1),
            without(ACCESS_LOCAL_WRITE | ACCESS_MW_BIND, false, 1),
            without(ACCESS_LOCAL_WRITE | ACCESS_MW_BIND, true, 2),
        ] {
            assert_eq!(t.bind(&good, (1, 0x11), false, r), Err(BindError::Region));
        }
        // Read rights alone need no local write of the region.
        let read = BindMwWqe {
            access: ACCESS_REMOTE_READ,
            ..good
        };
        t.bind(&read, (1, 0x11), false, without(ACCESS_MW_BIND, true, 1))
            .unwrap();
        assert_eq!(t.get(k).unwrap().tag, 1);
        assert_eq!(t.count_in_pd(1), 1);
        assert!(t.dealloc(k | 0x55).is_some(), "any tag names the window");
        assert!(t.get(k).is_none());
        assert_eq!(t.count_in_pd(1), 0);
    }

    #[test]
    fn keys_of_windows_are_told_from_other_keys() {
        assert!(is_window_key(MW_KEY_BIT | 0x1234));
        assert!(!is_window_key(0x1234));
        assert!(!is_window_key(
            rnic_abi::mkey::INDIRECT_KEY_BIT | MW_KEY_BIT
        ));
        let mut t = MwTable::default();
        let a = t.alloc(1, MW_TYPE_1).unwrap();
        let b = t.alloc(1, MW_TYPE_2).unwrap();
        assert_ne!(index(a), index(b));
        t.dealloc(a);
        assert_eq!(t.alloc(2, MW_TYPE_2), Some(a), "a free slot is taken again");
    }
}
