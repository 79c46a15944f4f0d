//! Memory regions of any size in memory that is not contiguous for the device (issue 28,
//! docs/hardware-interface.md §7.3 "Page lists"): between two VFs of one rnicd over the
//! host transport with scattered DMA memory (`VfioUserOptions::scatter`: no page of a
//! buffer follows the one before it in device memory, as guest-physical pages from a VM's
//! page map), a region's flat page list would not be contiguous either, so the driver
//! registers it with a page table, whose table pages are scattered too. Every test
//! checks the bytes that RDMA WRITE and READ move at the regions' far ends and across the
//! boundaries between table pages, and the device refuses malformed tables with the
//! statuses of §7.3.

use std::sync::Arc;

use rnic_abi::cmd::{Opcode, Status};
use rnic_abi::verbs::{ObjectResp, PageList, RegMrReq, MAX_PAGE_LIST};
use rnic_driver::verbs::{
    Mr, SendWr, Sge, WcOpcode, WrOpcode, ACCESS_LOCAL_WRITE, ACCESS_REMOTE_READ,
    ACCESS_REMOTE_WRITE,
};
use rnic_tests::verbs_checks::{assert_ok, one};
use rnic_tests::verbs_pair::{pair, pattern, PairOptions, Side};
use rnic_tests::Rnicd;
use zerocopy::{FromBytes, IntoBytes};

const MIB: usize = 1 << 20;

/// Pairs with scattered DMA memory and `buf_len`-byte regions.
fn scattered(buf_len: usize) -> PairOptions {
    PairOptions {
        buf_len,
        scatter: true,
        ..PairOptions::default()
    }
}

/// Posts `op` on `side`'s QP with one SGE and waits for its successful completion.
fn run(side: &Side, wr_id: u64, op: WrOpcode, sge: Sge) {
    let opcode = match op {
        WrOpcode::RdmaRead { .. } => WcOpcode::RdmaRead,
        _ => WcOpcode::RdmaWrite,
    };
    side.qp
        .post_send(&SendWr {
            wr_id,
            opcode: op,
            sges: vec![sge],
            signaled: true,
            ..SendWr::default()
        })
        .expect("post");
    let wc = one(&side.cq);
    assert_ok(&wc);
    assert_eq!((wc.wr_id, wc.opcode), (wr_id, opcode));
}

/// WRITEs `len` bytes at `from` of `a`'s region to `to` of `mr` (registered on the other
/// side of `a`'s QP).
fn write(a: &Side, wr_id: u64, from: usize, mr: &Mr, to: usize, len: usize) {
    let op = WrOpcode::RdmaWrite {
        remote_addr: mr.addr(to),
        rkey: mr.rkey(),
    };
    run(a, wr_id, op, a.mr.sge(from, len));
}

/// READs `len` bytes at `from` of `mr` (on the other side of `a`'s QP) to `to` of `a`'s
/// region.
fn read(a: &Side, wr_id: u64, mr: &Mr, from: usize, to: usize, len: usize) {
    let op = WrOpcode::RdmaRead {
        remote_addr: mr.addr(from),
        rkey: mr.rkey(),
    };
    run(a, wr_id, op, a.mr.sge(to, len));
}

/// The bytes of `mr` at `offset`.
fn bytes(mr: &Mr, offset: usize, len: usize) -> Vec<u8> {
    let mut out = vec![0u8; len];
    mr.read(offset, &mut out);
    out
}

#[test]
fn regions_of_16_mib_in_scattered_memory_carry_write_and_read_to_their_far_ends() {
    let rnicd = Rnicd::start(2, &[]);
    let len = 16 * MIB;
    let (a, b) = pair(&rnicd, "vf0", "vf1", &scattered(len));
    for side in [&a, &b] {
        // Not one page of the region follows the one before it, so a flat list would not
        // be contiguous either: 4096 pages under eight level-1 tables and a top one.
        assert!(side.mr.buffer().contiguous().is_none());
        let pages = side.mr.buffer().pages();
        assert!(pages.windows(2).all(|w| w[1] != w[0] + 4096));
        let list = side.mr.page_list();
        assert_eq!((list.levels, list.count), (2, 4096), "{list:?}");
    }

    // The whole region in one WRITE: every page of both lists, in order.
    let data = pattern(len, 28);
    a.mr.write(0, &data);
    write(&a, 1, 0, &b.mr, 0, len);
    assert!(bytes(&b.mr, 0, len) == data, "16 MiB written page by page");

    // The far end, and across the boundary between the first two level-1 tables (page
    // 511 to page 512): small WRITEs from A's far end.
    let edge = 512 * 4096;
    let small = pattern(8191, 3);
    a.mr.write(len - small.len(), &small);
    write(
        &a,
        2,
        len - small.len(),
        &b.mr,
        len - small.len(),
        small.len(),
    );
    write(&a, 3, len - small.len(), &b.mr, edge - 4000, small.len());
    assert_eq!(bytes(&b.mr, len - small.len(), small.len()), small);
    assert_eq!(bytes(&b.mr, edge - 4000, small.len()), small);
    assert_eq!(bytes(&b.mr, edge - 4001, 1), [data[edge - 4001]]);
    assert_eq!(bytes(&b.mr, edge + 4191, 1), [data[edge + 4191]]);

    // READ them back into A's first bytes and across A's own last table boundary.
    a.mr.write(0, &vec![0; 3 * 4096]);
    read(&a, 4, &b.mr, len - small.len(), 100, small.len());
    assert_eq!(bytes(&a.mr, 100, small.len()), small);
    let last_edge = 7 * edge;
    read(&a, 5, &b.mr, edge - 4000, last_edge - 5, small.len());
    assert_eq!(bytes(&a.mr, last_edge - 5, small.len()), small);
}

/// What `ibv_reg_mr` of a 1 GiB buffer does: application memory (the host transport
/// maps it page by page, at IOVAs of its own) registered at an address 16 bytes into a
/// page, so its 262145 pages need three levels of table pages, which come from the
/// scattered DMA memory. QUERY_DEVICE says this much fits; WRITE and READ reach both ends.
#[test]
fn a_1_gib_region_of_application_memory_registers_with_a_three_level_table() {
    let rnicd = Rnicd::start(2, &[]);
    let (a, b) = pair(&rnicd, "vf0", "vf1", &scattered(MIB));
    let limits = b.ctx.attr().limits;
    let len = 1usize << 30;
    assert!(limits.max_mr_size >= len as u64, "{limits:?}");
    assert_eq!(limits.max_mr_pages, MAX_PAGE_LIST);

    // 1 GiB plus two pages of zeroes (untouched until the transport moves them onto a
    // memfd), registered from 16 bytes into its first whole page.
    let heap = vec![0u8; len + 2 * 4096];
    let addr = ((heap.as_ptr() as usize + 4095) & !4095) + 16;
    let access = ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ;
    let buf = b
        .ctx
        .device()
        .transport()
        .map_user_memory(addr, len, true)
        .expect("map 1 GiB of application memory");
    let big =
        b.pd.reg_mr_iova(Arc::new(buf), 16, len, addr as u64, access)
            .expect("register 1 GiB");
    let list = big.page_list();
    assert_eq!((list.levels, list.count), (3, 262145), "{list:?}");

    // The last bytes (across the boundary between the two level-2 tables: page 262144,
    // the last, is the first of the second) and the first.
    let data = pattern(64 * 1024, 9);
    a.mr.write(0, &data);
    write(&a, 1, 0, &big, len - data.len(), data.len());
    write(&a, 2, 0, &big, 0, data.len());
    let at_heap = |offset: usize, n: usize| -> Vec<u8> {
        let start = addr - heap.as_ptr() as usize + offset;
        // SAFETY: inside `heap`; the device finished writing (the completion came), and
        // a volatile read sees what it wrote through the shared memfd.
        (start..start + n)
            .map(|i| unsafe { std::ptr::read_volatile(heap.as_ptr().add(i)) })
            .collect()
    };
    assert!(at_heap(len - data.len(), data.len()) == data, "the far end");
    assert!(at_heap(0, data.len()) == data, "the first bytes");
    a.mr.write(0, &vec![0; data.len()]);
    read(&a, 3, &big, len - data.len(), 0, data.len());
    assert!(
        bytes(&a.mr, 0, data.len()) == data,
        "read back from the far end"
    );
    drop(big);
}

/// A REG_MR of `length` bytes on `side` naming `pages`, as the device answers it.
fn reg_mr_status(side: &Side, pdn: u32, length: u64, pages: PageList) -> Status {
    let req = RegMrReq {
        pdn,
        access: ACCESS_LOCAL_WRITE,
        iova: 0,
        length,
        pages,
    };
    let c = side
        .ctx
        .device()
        .raw_command(Opcode::RegMr as u16, req.as_bytes(), 8)
        .expect("REG_MR answered");
    Status::from_u16(c.header.status).expect("a known status")
}

#[test]
fn malformed_page_tables_are_refused_with_the_statuses_of_7_3() {
    let rnicd = Rnicd::start(2, &[]);
    let (a, _b) = pair(&rnicd, "vf0", "vf1", &scattered(MIB));
    let body = a
        .ctx
        .device()
        .command(Opcode::AllocPd, &[], 8)
        .expect("ALLOC_PD");
    let pdn = ObjectResp::read_from_bytes(&body).expect("PDN").handle;
    let t = a.ctx.device().transport();
    // 600 pages under two level-1 tables: the table pages and the data pages scattered.
    let data = t.alloc_dma(600 * 4096).expect("data");
    let tables = t.alloc_dma(3 * 4096).expect("tables");
    let entries = |table: usize, list: &[u64]| {
        tables.write(
            table * 4096,
            &list
                .iter()
                .flat_map(|p| p.to_le_bytes())
                .collect::<Vec<_>>(),
        )
    };
    let (leaf0, leaf1, top) = (tables.pages()[0], tables.pages()[1], tables.pages()[2]);
    entries(0, &data.pages()[..512]);
    entries(1, &data.pages()[512..]);
    entries(2, &[leaf0, leaf1]);
    let good = PageList::table(top, 600, 2);
    let length = 600 * 4096;
    assert_eq!(reg_mr_status(&a, pdn, length, good), Status::Ok);

    // The list's own fields: BAD_PARAM.
    for bad in [
        PageList { levels: 4, ..good },
        PageList { levels: 1, ..good },
        PageList {
            reserved: 1,
            ..good
        },
        PageList {
            addr: top + 8,
            ..good
        },
    ] {
        assert_eq!(
            reg_mr_status(&a, pdn, 4096, bad),
            Status::BadParam,
            "{bad:?}"
        );
    }
    // More pages than any list (or region) may have: REG_MR checks `max_mr_pages` first.
    let too_many = PageList {
        count: MAX_PAGE_LIST + 1,
        levels: 3,
        ..good
    };
    assert_eq!(reg_mr_status(&a, pdn, 4096, too_many), Status::NoResources);
    // Fewer pages than the region needs.
    assert_eq!(reg_mr_status(&a, pdn, length + 1, good), Status::BadParam);
    // An unaligned entry at either level: BAD_PARAM.
    entries(2, &[leaf0, leaf1 + 8]);
    assert_eq!(reg_mr_status(&a, pdn, length, good), Status::BadParam);
    entries(2, &[leaf0, leaf1]);
    entries(1, &[data.pages()[512] + 1]);
    assert_eq!(reg_mr_status(&a, pdn, length, good), Status::BadParam);
    entries(1, &data.pages()[512..]);
    // A table page or a page the function's client did not map: DMA_ERROR, at the top,
    // the middle or the bottom.
    let unmapped = 0x7000_0000_0000;
    assert_eq!(
        reg_mr_status(
            &a,
            pdn,
            length,
            PageList {
                addr: unmapped,
                ..good
            }
        ),
        Status::DmaError
    );
    entries(2, &[leaf0, unmapped]);
    assert_eq!(reg_mr_status(&a, pdn, length, good), Status::DmaError);
    entries(2, &[leaf0, leaf1]);
    entries(1, &[unmapped]);
    assert_eq!(reg_mr_status(&a, pdn, length, good), Status::DmaError);
    entries(1, &data.pages()[512..]);
    assert_eq!(reg_mr_status(&a, pdn, length, good), Status::Ok);
}
