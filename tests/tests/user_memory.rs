//! Application memory registered in place (`Transport::map_user_memory` and
//! `Pd::reg_mr_iova`, what `ibv_reg_mr` is built on) between two VFs of one rnicd over the
//! host transport: ordinary heap buffers, at their own addresses, carry RDMA WRITE and READ
//! byte for byte, bytes around them are untouched, and memory the process does not have
//! is refused.

use std::sync::Arc;
use std::time::Duration;

use rnic_driver::verbs::{
    self, SendWr, WcOpcode, WcStatus, WrOpcode, ACCESS_LOCAL_WRITE, ACCESS_REMOTE_READ,
    ACCESS_REMOTE_WRITE,
};
use rnic_driver::Error;
use rnic_tests::verbs_pair::{pair, pattern, poll_n, PairOptions, Side};
use rnic_tests::Rnicd;

/// Registers `len` bytes at `addr` of this process on `side`, at iova `addr`.
fn reg(side: &Side, addr: usize, len: usize, access: u32) -> verbs::Mr {
    let writable = access & (ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE) != 0;
    let buf = side
        .ctx
        .device()
        .transport()
        .map_user_memory(addr, len, writable)
        .expect("map user memory");
    // The buffer starts at the page of `addr`.
    let offset = addr % 4096;
    side.pd
        .reg_mr_iova(Arc::new(buf), offset, len, addr as u64, access)
        .expect("register")
}

fn complete(side: &Side, wr_id: u64, opcode: WcOpcode) {
    let wcs = poll_n(&side.cq, 1, Duration::from_secs(10));
    assert_eq!(wcs.len(), 1, "no completion");
    assert_eq!(
        wcs[0].status,
        Ok(WcStatus::Success),
        "{}",
        wcs[0].status_str()
    );
    assert_eq!((wcs[0].wr_id, wcs[0].opcode), (wr_id, opcode));
}

#[test]
fn heap_buffers_carry_write_and_read_at_their_own_addresses() {
    let rnicd = Rnicd::start(2, &[]);
    let (a, b) = pair(&rnicd, "vf0", "vf1", &PairOptions::default());

    // Odd sizes at odd offsets inside ordinary heap allocations, with neighbours.
    let source: Vec<u8> = pattern(10_000, 7);
    let mut target = vec![0x5Au8; 3 * 4096];
    let mut back = vec![0u8; 10_000];
    let src = source.as_ptr() as usize + 3;
    let dst = target.as_mut_ptr() as usize + 1001;
    let a_src = reg(&a, src, 9_000, 0);
    let b_dst = reg(
        &b,
        dst,
        9_000,
        ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ,
    );
    let a_back = reg(&a, back.as_mut_ptr() as usize, 10_000, ACCESS_LOCAL_WRITE);
    assert_eq!(b_dst.iova(), dst as u64);

    a.qp.post_send(&SendWr {
        wr_id: 1,
        opcode: WrOpcode::RdmaWrite {
            remote_addr: dst as u64,
            rkey: b_dst.rkey(),
        },
        sges: vec![verbs::Sge {
            addr: src as u64,
            length: 9_000,
            lkey: a_src.lkey(),
        }],
        signaled: true,
        ..SendWr::default()
    })
    .unwrap();
    complete(&a, 1, WcOpcode::RdmaWrite);
    // SAFETY: the device finished writing (the completion came); a volatile read sees
    // what it wrote through the shared memfd.
    let got: Vec<u8> = (0..target.len())
        .map(|i| unsafe { std::ptr::read_volatile(target.as_ptr().add(i)) })
        .collect();
    assert!(got[..1001].iter().all(|&x| x == 0x5A), "bytes before");
    assert!(got[1001..10_001] == source[3..9_003], "the data written");
    assert!(got[10_001..].iter().all(|&x| x == 0x5A), "bytes after");

    // READ it back from B into a third heap buffer of A.
    a.qp.post_send(&SendWr {
        wr_id: 2,
        opcode: WrOpcode::RdmaRead {
            remote_addr: dst as u64,
            rkey: b_dst.rkey(),
        },
        sges: vec![verbs::Sge {
            addr: back.as_ptr() as u64 + 500,
            length: 9_000,
            lkey: a_back.lkey(),
        }],
        signaled: true,
        ..SendWr::default()
    })
    .unwrap();
    complete(&a, 2, WcOpcode::RdmaRead);
    // SAFETY: as above.
    let got: Vec<u8> = (0..back.len())
        .map(|i| unsafe { std::ptr::read_volatile(back.as_ptr().add(i)) })
        .collect();
    assert!(got[500..9_500] == source[3..9_003], "the data read");
    assert!(got[..500].iter().all(|&x| x == 0), "bytes before the read");

    // The application still owns and uses its memory after deregistration.
    drop((a_src, b_dst, a_back));
    target[0] = 1;
    assert_eq!(target[0], 1);
}

#[test]
fn memory_this_process_does_not_have_is_refused() {
    let rnicd = Rnicd::start(1, &[]);
    let a = rnic_tests::verbs_pair::side(&rnicd.socket("vf0"), &PairOptions::default());
    let t = a.ctx.device().transport();
    let errno = |e: Error| match e {
        Error::Io(_, io) => io.raw_os_error(),
        _ => None,
    };
    // Page 0 and a kernel address are nobody's memory here.
    assert_eq!(
        errno(t.map_user_memory(16, 64, false).unwrap_err()),
        Some(libc::EFAULT)
    );
    assert_eq!(
        errno(
            t.map_user_memory(0xffff_8000_0000_0000, 4096, false)
                .unwrap_err()
        ),
        Some(libc::EFAULT)
    );
    // Read-only memory registered for writes.
    static CONSTANT: [u8; 64] = [1; 64];
    assert_eq!(
        errno(
            t.map_user_memory(CONSTANT.as_ptr() as usize, 64, true)
                .unwrap_err()
        ),
        Some(libc::EFAULT)
    );
    // A zero length is not a registration.
    assert_eq!(
        errno(t.map_user_memory(0x1000, 0, false).unwrap_err()),
        Some(libc::EINVAL)
    );
}
