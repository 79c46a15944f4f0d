//! A function's GID table (docs/hardware-interface.md §6.13, [`rnic_abi::gid`]): the
//! source addresses its QPs and datagrams choose by `sgid_index`, which are also the
//! addresses it takes RoCEv2 packets for. `SET_GID` fills it as the function's operating
//! system adds addresses to its network interface; entry 0 is the function's own GID
//! until the driver sets it.

use rnic_abi::cmd::Status;
use rnic_abi::gid::{ipv4, SetGidReq, GID_TABLE_LEN, GID_VALID};

const LEN: usize = GID_TABLE_LEN as usize;

/// One entry of the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Entry {
    Empty,
    /// The function's own GID, whatever it is now (the PF may change it).
    Own,
    Gid([u8; 16]),
}

/// The table: copied into each pass's wire and station, so it is small and `Copy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GidTable {
    entries: [Entry; LEN],
}

impl Default for GidTable {
    /// The table at reset: entry 0 the function's GID, the others empty.
    fn default() -> Self {
        let mut entries = [Entry::Empty; LEN];
        entries[0] = Entry::Own;
        Self { entries }
    }
}

impl GidTable {
    /// Entry `index` (`None` when empty or out of range), with `own` the function's GID.
    pub fn get(&self, index: usize, own: [u8; 16]) -> Option<[u8; 16]> {
        match self.entries.get(index)? {
            Entry::Empty => None,
            Entry::Own => Some(own),
            Entry::Gid(gid) => Some(*gid),
        }
    }

    /// The IPv4 address a QP or datagram with `sgid_index` sends from, with `own` the
    /// function's address: `None` when the entry holds no IPv4-mapped GID.
    pub fn source(&self, sgid_index: u8, own: [u8; 4]) -> Option<[u8; 4]> {
        match self.entries.get(usize::from(sgid_index))? {
            Entry::Empty => None,
            Entry::Own => Some(own),
            Entry::Gid(gid) => ipv4(gid),
        }
    }

    /// Whether a QP or datagram with `sgid_index` has an IPv4 address to send from.
    pub fn is_source(&self, sgid_index: u8) -> bool {
        self.source(sgid_index, [0; 4]).is_some()
    }

    /// Whether entry `sgid_index` is the function's own GID, as at reset.
    pub fn is_own(&self, sgid_index: u8) -> bool {
        self.entries.get(usize::from(sgid_index)) == Some(&Entry::Own)
    }

    /// The IPv4 addresses the driver set (the function's own is the switch's already).
    pub fn addresses(&self) -> Vec<[u8; 4]> {
        let mut ips: Vec<[u8; 4]> = self
            .entries
            .iter()
            .filter_map(|e| match e {
                Entry::Gid(gid) => ipv4(gid),
                _ => None,
            })
            .collect();
        ips.sort_unstable();
        ips.dedup();
        ips
    }

    /// Whether a driver-set entry holds `ip`.
    pub fn holds(&self, ip: [u8; 4]) -> bool {
        self.entries
            .iter()
            .any(|e| matches!(e, Entry::Gid(gid) if ipv4(gid) == Some(ip)))
    }

    /// `SET_GID`: checks `req` and sets or clears its entry. `taken` says whether an IPv4
    /// address is another function's; `own_only` that the function cannot have any
    /// address but `own` (its network, `--net udp`, binds a socket to each function's).
    pub fn set(
        &mut self,
        req: &SetGidReq,
        own: [u8; 4],
        own_only: bool,
        taken: impl Fn([u8; 4]) -> bool,
    ) -> Result<(), (Status, u32)> {
        let index = usize::try_from(req.index)
            .ok()
            .filter(|&i| i < LEN)
            .ok_or((Status::BadParam, 0))?;
        if req.flags & !GID_VALID != 0 || req.reserved != 0 {
            return Err((Status::BadParam, 4));
        }
        if req.flags & GID_VALID == 0 {
            if req.gid != [0; 16] {
                return Err((Status::BadParam, 4));
            }
            self.entries[index] = Entry::Empty;
            return Ok(());
        }
        if req.gid == [0; 16] {
            return Err((Status::BadParam, 8));
        }
        if let Some(ip) = ipv4(&req.gid) {
            // Not an address a function can have: 0.0.0.0, broadcast, multicast.
            if ip == [0; 4] || ip == [255; 4] || (224..240).contains(&ip[0]) {
                return Err((Status::BadParam, 8));
            }
            if ip != own {
                if taken(ip) {
                    return Err((Status::BadParam, 16));
                }
                if own_only {
                    return Err((Status::BadState, 16));
                }
            }
        }
        self.entries[index] = Entry::Gid(req.gid);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rnic_abi::gid::mapped;

    const OWN: [u8; 4] = [10, 82, 0, 2];

    fn req(index: u32, gid: Option<[u8; 16]>) -> SetGidReq {
        SetGidReq {
            index,
            flags: if gid.is_some() { GID_VALID } else { 0 },
            gid: gid.unwrap_or_default(),
            ..SetGidReq::default()
        }
    }

    #[test]
    fn entry_0_is_the_function_s_gid_until_the_driver_sets_it() {
        let mut t = GidTable::default();
        assert_eq!(t.source(0, OWN), Some(OWN));
        assert_eq!(t.get(0, mapped(OWN)), Some(mapped(OWN)));
        assert_eq!(t.source(1, OWN), None);
        assert_eq!(t.source(200, OWN), None);
        assert!(t.addresses().is_empty());
        // An operating system's link-local IPv6 GID: held, but no source.
        let link_local = [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0xff, 0xfe, 0, 0, 1];
        t.set(&req(0, Some(link_local)), OWN, false, |_| false)
            .unwrap();
        assert_eq!(t.get(0, mapped(OWN)), Some(link_local));
        assert_eq!(t.source(0, OWN), None);
        t.set(&req(1, Some(mapped([192, 168, 7, 1]))), OWN, false, |_| {
            false
        })
        .unwrap();
        t.set(&req(2, Some(mapped(OWN))), OWN, false, |_| false)
            .unwrap();
        assert_eq!(t.source(1, OWN), Some([192, 168, 7, 1]));
        assert_eq!(t.source(2, OWN), Some(OWN));
        assert!(t.holds([192, 168, 7, 1]) && !t.holds([192, 168, 7, 2]));
        assert_eq!(t.addresses(), vec![OWN, [192, 168, 7, 1]]);
        t.set(&req(1, None), OWN, false, |_| false).unwrap();
        assert_eq!(t.source(1, OWN), None);
        assert_eq!(t.addresses(), vec![OWN]);
    }

    #[test]
    fn what_cannot_be_an_address_is_refused_and_changes_nothing() {
        let mut t = GidTable::default();
        let before = t;
        let other = [10, 82, 0, 3];
        let cases = [
            (
                req(GID_TABLE_LEN, Some(mapped([1, 2, 3, 4]))),
                (Status::BadParam, 0),
            ),
            (
                SetGidReq {
                    flags: GID_VALID | 2,
                    ..req(1, Some(mapped([1, 2, 3, 4])))
                },
                (Status::BadParam, 4),
            ),
            (
                SetGidReq {
                    reserved: 1,
                    ..req(1, Some(mapped([1, 2, 3, 4])))
                },
                (Status::BadParam, 4),
            ),
            (
                SetGidReq {
                    flags: 0,
                    ..req(1, Some(mapped([1, 2, 3, 4])))
                },
                (Status::BadParam, 4),
            ),
            (req(1, Some([0; 16])), (Status::BadParam, 8)),
            (req(1, Some(mapped([0; 4]))), (Status::BadParam, 8)),
            (req(1, Some(mapped([255; 4]))), (Status::BadParam, 8)),
            (req(1, Some(mapped([239, 1, 1, 1]))), (Status::BadParam, 8)),
            (req(1, Some(mapped(other))), (Status::BadParam, 16)),
        ];
        for (r, want) in cases {
            assert_eq!(t.set(&r, OWN, false, |ip| ip == other), Err(want), "{r:?}");
        }
        // With `--net udp` only the function's own address can be set.
        assert_eq!(
            t.set(&req(1, Some(mapped([1, 2, 3, 4]))), OWN, true, |_| false),
            Err((Status::BadState, 16))
        );
        assert_eq!(t, before);
        t.set(&req(1, Some(mapped(OWN))), OWN, true, |_| true)
            .unwrap();
        assert_eq!(t.source(1, OWN), Some(OWN));
    }
}
