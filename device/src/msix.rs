//! MSI-X: the vector table and pending bits in BAR0, and the eventfds that deliver them.
//!
//! Over vfio-user the VMM owns interrupt delivery: it hands the device one eventfd per
//! vector (SET_IRQS) and turns a write to it into the guest's interrupt. The VMM also owns
//! the vector table: QEMU emulates it and masks a vector by swapping its eventfd, and
//! never forwards table writes. So the table here is plain storage, and what gates a
//! message is what the VMM does forward: MSI-X Enable and Function Mask in config space.
//! While either blocks, a message waits in the pending-bit array and goes out when it
//! clears, as on hardware.

use std::fs::File;
use std::io::{self, Write};

use rnic_abi::pci::{MSIX_ENTRY_SIZE, MSIX_PBA_OFFSET, MSIX_TABLE_OFFSET};
use vfio_bindings::bindings::vfio::{
    VFIO_IRQ_SET_ACTION_MASK, VFIO_IRQ_SET_ACTION_TRIGGER, VFIO_IRQ_SET_ACTION_TYPE_MASK,
    VFIO_IRQ_SET_ACTION_UNMASK, VFIO_IRQ_SET_DATA_EVENTFD, VFIO_IRQ_SET_DATA_NONE,
    VFIO_IRQ_SET_DATA_TYPE_MASK,
};

/// Vector control word: the per-vector mask bit.
const VECTOR_MASKED: u32 = 1;

/// MSI-X state of one function.
#[derive(Debug)]
pub struct Msix {
    table: Vec<u8>,
    pending: Vec<u64>,
    triggers: Vec<Option<File>>,
}

/// Where a BAR0 offset falls in the MSI-X structures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MsixArea {
    /// Byte offset into the vector table.
    Table(usize),
    /// Byte offset into the pending-bit array.
    Pba(usize),
}

impl Msix {
    /// `vectors` vectors, all masked, none pending, no eventfds.
    pub fn new(vectors: u16) -> Self {
        let mut m = Self {
            table: vec![0; vectors as usize * MSIX_ENTRY_SIZE as usize],
            pending: vec![0; (vectors as usize).div_ceil(64)],
            triggers: (0..vectors).map(|_| None).collect(),
        };
        m.reset();
        m
    }

    /// Number of vectors.
    pub fn vectors(&self) -> u16 {
        self.triggers.len() as u16
    }

    /// Back to power-on: every vector masked with a zero message, nothing pending. The
    /// eventfds belong to the VMM and survive a function reset.
    pub fn reset(&mut self) {
        self.table.fill(0);
        for v in 0..self.triggers.len() {
            self.set_control(v, VECTOR_MASKED);
        }
        self.pending.fill(0);
    }

    /// Forgets the eventfds (the VMM went away).
    pub fn clear_triggers(&mut self) {
        self.triggers.iter_mut().for_each(|t| *t = None);
    }

    /// Which MSI-X structure `offset` (into BAR0) of an access of `len` bytes lies in.
    pub fn area(&self, offset: u64, len: usize) -> Option<MsixArea> {
        let end = offset.checked_add(len as u64)?;
        let table_end = MSIX_TABLE_OFFSET + self.table.len() as u64;
        let pba_end = MSIX_PBA_OFFSET + self.pending.len() as u64 * 8;
        if offset >= MSIX_TABLE_OFFSET && end <= table_end {
            Some(MsixArea::Table((offset - MSIX_TABLE_OFFSET) as usize))
        } else if offset >= MSIX_PBA_OFFSET && end <= pba_end {
            Some(MsixArea::Pba((offset - MSIX_PBA_OFFSET) as usize))
        } else {
            None
        }
    }

    /// Reads table or PBA bytes.
    pub fn read(&self, area: MsixArea, data: &mut [u8]) {
        match area {
            MsixArea::Table(off) => data.copy_from_slice(&self.table[off..off + data.len()]),
            MsixArea::Pba(off) => {
                let bytes: Vec<u8> = self.pending.iter().flat_map(|w| w.to_le_bytes()).collect();
                data.copy_from_slice(&bytes[off..off + data.len()]);
            }
        }
    }

    /// Writes table bytes; the PBA is read-only.
    pub fn write(&mut self, area: MsixArea, data: &[u8]) {
        if let MsixArea::Table(off) = area {
            self.table[off..off + data.len()].copy_from_slice(data);
        }
    }

    fn set_control(&mut self, vector: usize, value: u32) {
        let at = vector * MSIX_ENTRY_SIZE as usize + 12;
        self.table[at..at + 4].copy_from_slice(&value.to_le_bytes());
    }

    /// Handles SET_IRQS for the MSI-X index. Other indexes have no vectors and accept only
    /// requests that set nothing.
    pub fn set_irqs(
        &mut self,
        flags: u32,
        start: u32,
        count: u32,
        fds: Vec<File>,
    ) -> io::Result<()> {
        let invalid = |why: String| io::Error::new(io::ErrorKind::InvalidInput, why);
        let end = start
            .checked_add(count)
            .filter(|&e| e as usize <= self.triggers.len())
            .ok_or_else(|| {
                invalid(format!(
                    "SET_IRQS for vectors {start}..+{count}, but the function has {}",
                    self.triggers.len()
                ))
            })?;
        let range = start as usize..end as usize;
        match (
            flags & VFIO_IRQ_SET_DATA_TYPE_MASK,
            flags & VFIO_IRQ_SET_ACTION_TYPE_MASK,
        ) {
            (VFIO_IRQ_SET_DATA_EVENTFD, VFIO_IRQ_SET_ACTION_TRIGGER) => {
                if !fds.is_empty() && fds.len() != count as usize {
                    return Err(invalid(format!(
                        "SET_IRQS for {count} vectors came with {} eventfds",
                        fds.len()
                    )));
                }
                // No descriptors at all means "tear these vectors down".
                let mut fds = fds.into_iter();
                for v in range {
                    self.triggers[v] = fds.next();
                }
                Ok(())
            }
            (VFIO_IRQ_SET_DATA_NONE, VFIO_IRQ_SET_ACTION_TRIGGER) => {
                if count == 0 {
                    // The vfio convention: DATA_NONE with count 0 disables them all.
                    self.clear_triggers();
                } else {
                    for v in range {
                        self.fire(v);
                    }
                }
                Ok(())
            }
            (_, VFIO_IRQ_SET_ACTION_MASK | VFIO_IRQ_SET_ACTION_UNMASK) => Err(invalid(
                "MSI-X vectors are masked through the table, not SET_IRQS".into(),
            )),
            _ => Err(invalid(format!("unsupported SET_IRQS flags {flags:#x}"))),
        }
    }

    /// Signals `vector`, or makes it pending while MSI-X is disabled or the function
    /// masked. Returns whether a message was sent.
    pub fn signal(&mut self, vector: u16, enabled: bool, function_masked: bool) -> bool {
        let v = vector as usize;
        if v >= self.triggers.len() {
            return false;
        }
        if !enabled || function_masked {
            self.pending[v / 64] |= 1 << (v % 64);
            return false;
        }
        self.fire(v)
    }

    /// Delivers every pending vector that is no longer masked.
    pub fn deliver_pending(&mut self, enabled: bool, function_masked: bool) {
        if !enabled || function_masked {
            return;
        }
        for v in 0..self.triggers.len() {
            if self.pending[v / 64] & (1 << (v % 64)) != 0 {
                self.pending[v / 64] &= !(1 << (v % 64));
                self.fire(v);
            }
        }
    }

    fn fire(&mut self, v: usize) -> bool {
        match &mut self.triggers[v] {
            Some(fd) => match fd.write_all(&1u64.to_ne_bytes()) {
                Ok(()) => true,
                Err(e) => {
                    log::warn!("MSI-X vector {v}: eventfd write failed: {e}");
                    false
                }
            },
            None => {
                log::debug!("MSI-X vector {v} fired with no eventfd set");
                false
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::os::fd::FromRawFd;

    fn eventfd() -> File {
        // SAFETY: plain eventfd creation.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK) };
        assert!(fd >= 0);
        // SAFETY: fresh fd we own.
        unsafe { File::from_raw_fd(fd) }
    }

    fn count(f: &mut File) -> u64 {
        let mut b = [0u8; 8];
        match f.read(&mut b) {
            Ok(8) => u64::from_ne_bytes(b),
            _ => 0,
        }
    }

    fn eventfd_trigger() -> u32 {
        VFIO_IRQ_SET_DATA_EVENTFD | VFIO_IRQ_SET_ACTION_TRIGGER
    }

    #[test]
    fn signal_writes_the_vectors_eventfd() {
        let mut m = Msix::new(4);
        let mut e = eventfd();
        m.set_irqs(eventfd_trigger(), 2, 1, vec![e.try_clone().unwrap()])
            .unwrap();
        assert!(m.signal(2, true, false));
        assert_eq!(count(&mut e), 1);
        assert!(!m.signal(1, true, false));
    }

    #[test]
    fn disabled_or_masked_signals_become_pending_then_delivered() {
        let mut m = Msix::new(2);
        let mut e = eventfd();
        m.set_irqs(eventfd_trigger(), 0, 1, vec![e.try_clone().unwrap()])
            .unwrap();
        assert!(!m.signal(0, false, false));
        let mut pba = [0u8; 8];
        m.read(MsixArea::Pba(0), &mut pba);
        assert_eq!(pba[0], 1);
        m.deliver_pending(true, true);
        assert_eq!(count(&mut e), 0);
        m.deliver_pending(true, false);
        assert_eq!(count(&mut e), 1);
        m.read(MsixArea::Pba(0), &mut pba);
        assert_eq!(pba[0], 0);
    }

    #[test]
    fn table_is_storage_that_reset_masks() {
        let mut m = Msix::new(2);
        m.write(MsixArea::Table(16), &0xfee0_0000u32.to_le_bytes());
        let mut b = [0u8; 4];
        m.read(MsixArea::Table(16), &mut b);
        assert_eq!(u32::from_le_bytes(b), 0xfee0_0000);
        m.reset();
        m.read(MsixArea::Table(16), &mut b);
        assert_eq!(u32::from_le_bytes(b), 0);
        m.read(MsixArea::Table(28), &mut b);
        assert_eq!(u32::from_le_bytes(b), VECTOR_MASKED);
    }

    #[test]
    fn bad_set_irqs_requests_are_refused() {
        let mut m = Msix::new(2);
        assert!(m
            .set_irqs(eventfd_trigger(), 1, 2, vec![eventfd(), eventfd()])
            .is_err());
        assert!(m
            .set_irqs(eventfd_trigger(), 0, 2, vec![eventfd()])
            .is_err());
        assert!(m.set_irqs(eventfd_trigger(), u32::MAX, 2, vec![]).is_err());
        assert!(m
            .set_irqs(
                VFIO_IRQ_SET_DATA_NONE | VFIO_IRQ_SET_ACTION_MASK,
                0,
                1,
                vec![]
            )
            .is_err());
    }

    #[test]
    fn areas_are_bounded() {
        let m = Msix::new(16);
        assert_eq!(m.area(MSIX_TABLE_OFFSET, 4), Some(MsixArea::Table(0)));
        assert_eq!(
            m.area(MSIX_TABLE_OFFSET + 16 * 16 - 4, 4),
            Some(MsixArea::Table(252))
        );
        assert_eq!(m.area(MSIX_TABLE_OFFSET + 16 * 16, 4), None);
        assert_eq!(m.area(MSIX_PBA_OFFSET + 4, 4), Some(MsixArea::Pba(4)));
        assert_eq!(m.area(MSIX_PBA_OFFSET + 8, 4), None);
        assert_eq!(m.area(u64::MAX, 4), None);
    }
}
