//! Seeds from real traffic: the world of [`crate::world`] is built with A's link up and
//! A sending every kind of request to every kind of QP of B, with the switch capturing
//! every frame it forwards (as `rnicd --pcap` does); the frames to B become the seeds.

use std::path::PathBuf;

use rnic_device::fabric::frame::Endpoint;
use rnic_device::identity::{FunctionId, Identity};
use rnic_device::net::arp::Arp;
use rnic_device::net::eth::mac_for_ip;

use crate::input::{record, STEP};
use crate::world::{Mode, World, B};

/// Where the recording's capture goes (one per process).
pub fn capture_path() -> PathBuf {
    std::env::temp_dir().join(format!("rnic-fuzz-capture-{}.pcap", std::process::id()))
}

/// The frames B received in the recorded world, in order, sealed.
pub fn frames_to_b() -> Vec<Vec<u8>> {
    let world = World::build(Mode::Record);
    let mac = world.bench.functions[B].endpoint().mac;
    // Dropping the world flushes and closes the capture.
    drop(world);
    let path = capture_path();
    let bytes = std::fs::read(&path).expect("read the capture");
    let _ = std::fs::remove_file(&path);
    rnic_tests::wire::pcap_frames(&bytes)
        .into_iter()
        .filter(|f| f.get(..6) == Some(&mac[..]))
        .collect()
}

/// Seeds of the receive target: each frame alone (resealed, then a pass), and the whole
/// conversation in one input.
pub fn recv_seeds() -> Vec<Vec<u8>> {
    let frames = frames_to_b();
    let mut seeds: Vec<Vec<u8>> = frames.iter().map(|f| record(1 | STEP, f)).collect();
    seeds.push(frames.iter().flat_map(|f| record(1 | STEP, f)).collect());
    seeds
}

/// A host elsewhere on the Ethernet segment.
pub const OUTSIDE: Endpoint = Endpoint {
    mac: [0x52, 0x54, 0, 0x12, 0x34, 0x56],
    ip: [10, 82, 1, 5],
};

/// Seeds of the Ethernet port target: the recorded frames to B as they would come off a
/// segment (B's port MAC, the outside host's as source), and ARP: requests for B's and
/// A's addresses, an unasked reply, a gratuitous announcement.
pub fn eth_seeds() -> Vec<Vec<u8>> {
    let ip_b = Identity::new(FunctionId::Vf(0), 2, None).ipv4();
    let ip_a = Identity::new(FunctionId::Pf, 2, None).ipv4();
    let mac_b = mac_for_ip(ip_b);
    let frames: Vec<Vec<u8>> = frames_to_b()
        .into_iter()
        .map(|mut f| {
            f[..6].copy_from_slice(&mac_b);
            f[6..12].copy_from_slice(&OUTSIDE.mac);
            f
        })
        .collect();
    let b = Endpoint {
        mac: mac_b,
        ip: ip_b.octets(),
    };
    let mut reply = Arp::request(b, OUTSIDE.ip).reply(OUTSIDE);
    reply.tha = mac_b;
    let arp = [
        Arp::request(OUTSIDE, ip_b.octets()).frame(),
        Arp::request(OUTSIDE, ip_a.octets()).frame(),
        reply.frame(),
        Arp::request(OUTSIDE, OUTSIDE.ip).frame(),
    ];
    let mut seeds: Vec<Vec<u8>> = frames
        .iter()
        .chain(arp.iter())
        .map(|f| record(1 | STEP, f))
        .collect();
    seeds.push(
        arp.iter()
            .chain(frames.iter())
            .flat_map(|f| record(1 | STEP, f))
            .collect(),
    );
    seeds
}

/// Seeds of the `eth_rings` target: frames sent whole and gathered, receive buffers
/// filled by frames from the switch, malformed descriptors, a posted count past the ring,
/// arm words, `SET_ETH` with a multicast list, queues destroyed, created and queried.
pub fn eth_rings_seeds() -> Vec<Vec<u8>> {
    use crate::rings::Action;
    let desc = |slot: u64, offset: u64, len: u32, flags: u16| {
        let mut b = (slot << 32 | offset).to_le_bytes().to_vec();
        b.extend_from_slice(&len.to_le_bytes());
        b.extend_from_slice(&flags.to_le_bytes());
        b.extend_from_slice(&0u16.to_le_bytes());
        b
    };
    let act = |a: Action, step: bool, relative: bool, bytes: &[u8]| {
        record(a.flags(step, relative), bytes)
    };
    let mut arp = vec![0xff; 6];
    arp.extend_from_slice(&OUTSIDE.mac);
    arp.extend_from_slice(&[0x08, 0x06]);
    arp.resize(60, 0x11);
    let mut ipv4 = vec![0; 12];
    ipv4.extend_from_slice(&[0x08, 0x00, 0x45]);
    ipv4.resize(1514, 0x22);
    let set_eth = {
        let mut b = 9000u32.to_le_bytes().to_vec();
        b.extend_from_slice(&7u32.to_le_bytes());
        b.extend_from_slice(&0xffffu16.to_le_bytes());
        b.extend_from_slice(&0u16.to_le_bytes());
        b.extend_from_slice(&1u32.to_le_bytes());
        b.extend_from_slice(&[0x01, 0x00, 0x5e, 0, 0, 1, 0, 0]);
        b
    };
    vec![
        [
            act(Action::PostTx, false, true, &desc(0, 0, 60, 0)),
            act(Action::PostTx, true, true, &desc(1, 0, 0, 0)),
            act(Action::PostTx, false, true, &desc(2, 0, 14, 1)),
            act(Action::PostTx, false, true, &desc(3, 0, 100, 1)),
            act(Action::PostTx, true, true, &desc(4, 0, 1400, 0)),
        ]
        .concat(),
        [
            act(Action::PostRx, false, true, &desc(0, 0, 2048, 0)),
            act(Action::PostRx, true, true, &desc(1, 0, 64, 0)),
            act(Action::Frame, true, false, &arp),
            act(Action::Frame, true, false, &ipv4),
        ]
        .concat(),
        [
            act(Action::WriteSlot, true, false, &[0, 0, 100, 0, 0, 0]),
            act(Action::Queue, true, false, &[0, 0, 0, 0, 0]),
            act(Action::Queue, true, false, &[0x81, 0, 0, 0, 0]),
            act(Action::Create, true, false, &[0; 32]),
            act(Action::Query, true, false, &[]),
        ]
        .concat(),
        [
            act(Action::SetEth, true, false, &set_eth),
            act(Action::WriteSlot, false, false, &[1, 1, 0, 0, 1, 0]),
            act(Action::PostRx, false, false, &desc(0, 0xdead_0000, 4096, 0)),
            act(Action::Frame, true, false, &arp),
        ]
        .concat(),
    ]
}

/// Seeds of the `ops` target: what drivers and VMMs do, and some of what they should not:
/// queries, a QP moved to ERR with work in flight, objects destroyed while in use (an
/// MR under a READ, an SRQ under a QP), creations naming another function's numbers,
/// register sweeps, a reset, the command queue stopped, bus mastering off, an FLR,
/// doorbells rung through messages, admin commands that disable, reset, take the link of
/// and move a QP out of B; B's writable MR registered again through its own page list,
/// flat and read as page tables of one and two levels.
pub fn ops_seeds() -> Vec<Vec<u8>> {
    use rnic_abi::admin::{MemberReq, SetLinkReq, SetNumVfsReq, LINK_DOWN};
    use rnic_abi::cmd::Opcode;
    use rnic_abi::migration::MigrateQpReq;
    use rnic_abi::pci::cfg;
    use rnic_abi::regs;
    use rnic_abi::verbs::{
        attr, CreateCqReq, ModifyQpReq, ObjectReq, PageList, QpAttr, QpState, RegMrReq,
    };
    use zerocopy::IntoBytes;

    use crate::ops::{op, Op};
    use crate::world::{Mode, World, A, B};

    let world = World::build(Mode::Fuzz);
    let qpns = world.qpns();
    let (qb, qb2, qa) = (qpns[&B][0], qpns[&B][1], qpns[&A][0]);
    let mr_b = world.sides[B].mrs[0].lkey();
    // B's writable MR again, through the page list it was registered with: its flat
    // array starts a page, so the same page read as a one-level table names the same
    // pages; as a two-level table its entries name table pages of region bytes.
    let (b_mr, b_pdn) = (&world.sides[B].mrs[0], world.sides[B].pd.pdn());
    let rereg = |pages: PageList| RegMrReq {
        pdn: b_pdn,
        access: rnic_abi::verbs::ACCESS_LOCAL_WRITE,
        iova: b_mr.iova(),
        length: b_mr.len() as u64,
        pages,
    };
    let flat = b_mr.page_list();
    let rereg_lists = [
        flat,
        PageList::table(flat.addr, flat.count, 1),
        PageList::table(flat.addr, flat.count, 2),
    ]
    .map(rereg);
    let srq = world.sides[B].srq.as_ref().map_or(0, |s| s.srqn());
    let cq_a = world.sides[A].cq.cqn();
    drop(world);

    let cmd = |opcode: Opcode, room: u16, body: &[u8]| {
        let mut a = (opcode as u16).to_le_bytes().to_vec();
        a.extend(room.to_le_bytes());
        a.extend(body);
        a
    };
    let command = |opcode: Opcode, body: &[u8]| op(Op::Command, &cmd(opcode, 256, body));
    let admin = |opcode: Opcode, body: &[u8]| op(Op::Admin, &cmd(opcode, 256, body));
    let object = |handle: u32| ObjectReq {
        handle,
        reserved: 0,
    };
    let reg = |kind: Op, offset: u64, width_sel: u8, value: u64| {
        let mut a = (offset as u16).to_le_bytes().to_vec();
        a.push(width_sel);
        a.extend(value.to_le_bytes());
        op(kind, &a)
    };
    let step = op(Op::Step, &[]);
    let to_err = ModifyQpReq {
        qpn: qb,
        attr_mask: attr::STATE,
        attr: QpAttr {
            qp_state: QpState::Err as u8,
            ..QpAttr::default()
        },
    };
    let cq_in_guard = CreateCqReq {
        ring: PageList::flat(crate::transport::IOVA_BASE, 1),
        entries: 64,
        doorbell_page: 1,
    };
    let sweep: Vec<u8> = (0..regs::REGS_END + 8)
        .step_by(4)
        .flat_map(|o| reg(Op::Bar0Read, o, 0, 0))
        .collect();
    let mut seeds = vec![
        command(Opcode::QueryDevice, &[]),
        command(Opcode::QueryQp, object(qb).as_bytes()),
        [
            command(Opcode::ModifyQp, to_err.as_bytes()),
            step.clone(),
            step.clone(),
        ]
        .concat(),
        [
            command(Opcode::DeregMr, object(mr_b).as_bytes()),
            step.clone(),
        ]
        .concat(),
        [
            command(Opcode::DestroySrq, object(srq).as_bytes()),
            command(Opcode::DestroyQp, object(qb2).as_bytes()),
            command(Opcode::DestroySrq, object(srq).as_bytes()),
        ]
        .concat(),
        command(Opcode::QueryQp, object(qa).as_bytes()),
        command(Opcode::DestroyCq, object(cq_a).as_bytes()),
        command(Opcode::CreateCq, cq_in_guard.as_bytes()),
        sweep,
        [
            reg(
                Op::Bar0Write,
                regs::DEVICE_CONTROL,
                0,
                u64::from(regs::CONTROL_RESET),
            ),
            step.clone(),
        ]
        .concat(),
        [reg(Op::Bar0Write, regs::CMDQ_CONTROL, 0, 0), step.clone()].concat(),
        [
            reg(
                Op::ConfigWrite,
                cfg::COMMAND as u64,
                4,
                u64::from(cfg::COMMAND_MEMORY),
            ),
            step.clone(),
            reg(
                Op::ConfigWrite,
                cfg::COMMAND as u64,
                4,
                u64::from(cfg::COMMAND_MEMORY | cfg::COMMAND_BUS_MASTER),
            ),
            step.clone(),
        ]
        .concat(),
        [
            reg(
                Op::ConfigWrite,
                (cfg::PCIE_CAP + cfg::PCIE_DEVCTL) as u64,
                4,
                u64::from(cfg::PCIE_DEVCTL_FLR),
            ),
            step.clone(),
        ]
        .concat(),
        admin(Opcode::AdminQuery, &[]),
        admin(
            Opcode::GetStats,
            MemberReq {
                member: 1,
                reserved: 0,
            }
            .as_bytes(),
        ),
        [
            admin(
                Opcode::SetLink,
                SetLinkReq {
                    member: 1,
                    state: LINK_DOWN,
                }
                .as_bytes(),
            ),
            step.clone(),
        ]
        .concat(),
        [
            admin(
                Opcode::ResetVf,
                MemberReq {
                    member: 1,
                    reserved: 0,
                }
                .as_bytes(),
            ),
            step.clone(),
        ]
        .concat(),
        [
            admin(
                Opcode::SetNumVfs,
                SetNumVfsReq {
                    num_vfs: 1,
                    reserved: 0,
                }
                .as_bytes(),
            ),
            step.clone(),
        ]
        .concat(),
        [
            admin(
                Opcode::MigrateQp,
                MigrateQpReq {
                    from: 1,
                    to: 2,
                    qpn: qb,
                    ..MigrateQpReq::default()
                }
                .as_bytes(),
            ),
            step.clone(),
        ]
        .concat(),
    ];
    seeds.extend(
        rereg_lists
            .iter()
            .map(|r| [command(Opcode::RegMr, r.as_bytes()), step.clone()].concat()),
    );
    // Doorbells rung through region writes: every slot of B's first verbs page.
    seeds.push(
        (0..64u32)
            .flat_map(|slot| {
                let mut a = (4096 + 8 * slot).to_le_bytes().to_vec();
                a.extend(1u32.to_le_bytes());
                [op(Op::DoorbellWrite, &a), step.clone()].concat()
            })
            .collect(),
    );
    seeds
}

/// Seeds of the `send` target: WQEs as the driver encodes them, of every opcode, with one
/// SGE and several, inline, through B's memory, indirect and pattern keys, and a UD send
/// to A. Each is posted by the driver in a live world and read back from B's send ring
/// (found by its `wr_id`) before the engine runs.
pub fn send_seeds() -> Vec<Vec<u8>> {
    use rnic_driver::verbs::{SendWr, UdAddress, WrOpcode, QKEY_USE_OWN};

    use crate::world::{caps, Mode, World, A};

    let world = World::build(Mode::Live);
    let keys = world.b_keys();
    let (b, a) = (&world.sides[B], &world.sides[A]);
    let (mr, ro, remote) = (&b.mrs[0], &b.mrs[1], &a.mrs[0]);
    let write = |imm: Option<u32>| match imm {
        Some(imm) => WrOpcode::RdmaWriteWithImm {
            remote_addr: remote.addr(0x2000),
            rkey: remote.rkey(),
            imm,
        },
        None => WrOpcode::RdmaWrite {
            remote_addr: remote.addr(0x2000),
            rkey: remote.rkey(),
        },
    };
    let wr = |opcode: WrOpcode, sges: Vec<rnic_driver::verbs::Sge>| SendWr {
        opcode,
        sges,
        signaled: true,
        ..SendWr::default()
    };
    // (QP index on B, the WR): 0 qb, 1 qb2, 2 ub, 3 ucb.
    let wrs: Vec<(u8, SendWr)> = vec![
        (0, wr(WrOpcode::Send, vec![mr.sge(0, 100)])),
        (
            0,
            wr(
                WrOpcode::Send,
                vec![mr.sge(0, 3000), ro.sge(0, 1000), mr.sge(0x4000, 8)],
            ),
        ),
        (
            0,
            SendWr {
                inline: Some(b"inline data, as a driver puts it into the WQE".to_vec()),
                ..wr(WrOpcode::SendWithImm(0xfeed), Vec::new())
            },
        ),
        (
            0,
            wr(WrOpcode::SendWithInv(remote.rkey()), vec![mr.sge(0, 64)]),
        ),
        (0, wr(write(None), vec![mr.sge(0x100, 2500)])),
        (0, wr(write(Some(9)), vec![keys[0].sge(4000, 8000)])),
        (
            0,
            wr(
                WrOpcode::RdmaRead {
                    remote_addr: remote.addr(0x3000),
                    rkey: remote.rkey(),
                },
                vec![keys[1].sge(0, 1024)],
            ),
        ),
        (
            0,
            wr(
                WrOpcode::AtomicCmpSwp {
                    remote_addr: remote.addr(0x10),
                    rkey: remote.rkey(),
                    compare: 0x5a5a_5a5a_5a5a_5a5a,
                    swap: 7,
                },
                vec![mr.sge(0x8, 8)],
            ),
        ),
        (
            0,
            wr(
                WrOpcode::AtomicFetchAdd {
                    remote_addr: remote.addr(0x18),
                    rkey: remote.rkey(),
                    add: 1,
                },
                vec![mr.sge(0x10, 8)],
            ),
        ),
        (0, wr(WrOpcode::LocalInv(keys[1].lkey()), Vec::new())),
        (1, wr(WrOpcode::Send, vec![mr.sge(0, 512)])),
        // On ucb: a UC WRITE with immediate to A, a bind of the type 1 window to part of
        // its region, and a LOCAL_INV of the type 2 window.
        (3, wr(write(Some(10)), vec![mr.sge(0x200, 2100)])),
        (
            3,
            wr(
                b.mws[0].bind_opcode(
                    rnic_driver::verbs::inc_rkey(b.mws[0].rkey()),
                    &rnic_driver::verbs::BindInfo {
                        mr: Some(&b.mrs[2]),
                        addr: b.mrs[2].addr(0x1000),
                        length: 0x1000,
                        access: rnic_driver::verbs::ACCESS_REMOTE_READ,
                    },
                ),
                Vec::new(),
            ),
        ),
        (3, wr(WrOpcode::LocalInv(b.mws[1].rkey()), Vec::new())),
    ];
    let stride = rnic_abi::verbs::sq_stride(caps().max_send_sge, caps().max_inline_data) as usize;
    let ram = &world.bench.rams[B];
    let find = |wr_id: u64| -> Vec<u8> {
        let bytes = ram.bytes();
        let at = bytes
            .windows(8)
            .position(|w| w == wr_id.to_le_bytes())
            .expect("the posted WQE is in B's send ring");
        bytes[at..(at + stride).min(bytes.len())].to_vec()
    };
    let mut wqes: Vec<(u8, Vec<u8>)> = Vec::new();
    for (i, (which, wr)) in wrs.into_iter().enumerate() {
        let wr_id = 0x5eed_0000_0000_0100 + i as u64;
        b.qps[[0, 1, 2, 4][usize::from(which)]]
            .post_send(&SendWr { wr_id, ..wr })
            .expect("post a seed WR");
        wqes.push((which, find(wr_id)));
    }
    let ud_id = 0x5eed_0000_0000_0200;
    b.qps[2]
        .post_ud_send(
            &SendWr {
                wr_id: ud_id,
                ..wr(WrOpcode::Send, vec![mr.sge(0, 256)])
            },
            &UdAddress {
                dest_qpn: a.qps[2].qp_num(),
                qkey: QKEY_USE_OWN,
                dgid: a.ctx.attr().gid,
                hop_limit: 0,
                traffic_class: 0,
                sgid_index: 0,
            },
        )
        .expect("post a seed datagram");
    wqes.push((2, find(ud_id)));
    drop(keys);
    drop(world);

    let mut seeds: Vec<Vec<u8>> = wqes
        .iter()
        .map(|(which, w)| record(which | STEP, w))
        .collect();
    // The same through the MMIO window (where they fit), and all of them in one input.
    seeds.extend(
        wqes.iter()
            .filter(|(which, _)| *which == 0)
            .map(|(_, w)| record(STEP | 1 << 3, w)),
    );
    seeds.push(
        wqes.iter()
            .flat_map(|(which, w)| record(*which, w))
            .collect(),
    );
    seeds
}

/// Seeds of the `vfio` target: what QEMU sends (region reads of every register, a
/// descriptor-less ROM map, MSI-X set-up and tear-down, a reset), and what it should not
/// (B's RAM unmapped under its queues and mapped again, overlapping and out-of-range
/// maps, a descriptor shorter than its range, unmapping what was never mapped).
pub fn vfio_seeds() -> Vec<Vec<u8>> {
    use crate::transport::{IOVA_BASE, RAM_SIZE};
    use crate::vfio::{request, Request};
    use rnic_abi::pci::REG_BAR;
    use rnic_abi::vfio_user::{
        IRQ_MSIX, IRQ_SET_ACTION_TRIGGER, IRQ_SET_DATA_EVENTFD, IRQ_SET_DATA_NONE, REGION_CONFIG,
    };

    let map = |flags: u8, sel: u8, address: u64, size: u32, offset: u32, len: u32| {
        let mut a = vec![flags, sel];
        a.extend(address.to_le_bytes());
        a.extend(size.to_le_bytes());
        a.extend(offset.to_le_bytes());
        a.extend(&len.to_le_bytes()[..3]);
        request(Request::DmaMap, &a)
    };
    let unmap = |flags: u8, address: u64, size: u32| {
        let mut a = vec![flags, 2];
        a.extend(address.to_le_bytes());
        a.extend(size.to_le_bytes());
        request(Request::DmaUnmap, &a)
    };
    let read = |region: u32, offset: u64, len: u16| {
        let mut a = vec![region as u8];
        a.extend(offset.to_le_bytes());
        a.extend(len.to_le_bytes());
        request(Request::RegionRead, &a)
    };
    let irqs = |index: u32, flags: u32, start: u32, count: u32, fds: u8| {
        let mut a = vec![index as u8];
        a.extend(flags.to_le_bytes());
        a.extend(start.to_le_bytes());
        a.extend(count.to_le_bytes());
        a.push(fds);
        request(Request::SetIrqs, &a)
    };
    let step = request(Request::Step, &[]);
    let ram = RAM_SIZE as u32;
    // Selector bits 0-1: the address as given (2); bits 2-3: the descriptor (0 none, 1
    // the guest RAM, 2 a fresh file).
    let (none, guest, fresh) = (2, 2 | 1 << 2, 2 | 2 << 2);
    let reg = u32::from(REG_BAR);
    vec![
        (0..0x90u64)
            .step_by(4)
            .flat_map(|o| read(reg, o, 4))
            .chain(read(REGION_CONFIG, 0, 256))
            .collect(),
        map(1, none, 0xfeb0_0000, 0x2_0000, 0, 0),
        [
            irqs(
                IRQ_MSIX,
                IRQ_SET_DATA_EVENTFD | IRQ_SET_ACTION_TRIGGER,
                0,
                4,
                4,
            ),
            step.clone(),
            irqs(
                IRQ_MSIX,
                IRQ_SET_DATA_NONE | IRQ_SET_ACTION_TRIGGER,
                0,
                0,
                0,
            ),
            step.clone(),
        ]
        .concat(),
        [request(Request::Reset, &[]), step.clone()].concat(),
        [
            unmap(0, IOVA_BASE, ram),
            step.clone(),
            step.clone(),
            map(3, guest, IOVA_BASE, ram, 0, 0),
            step.clone(),
        ]
        .concat(),
        [
            map(3, guest, IOVA_BASE + 0x1000, 0x2000, 0, 0),
            step.clone(),
        ]
        .concat(),
        [
            map(3, guest, IOVA_BASE + u64::from(ram), ram, 0, 0),
            step.clone(),
        ]
        .concat(),
        [
            map(3, fresh, 0x10_0000_0000, 0x10_0000, 0, 0x1000),
            step.clone(),
        ]
        .concat(),
        [
            map(3, fresh, u64::MAX - 0xfff, 0x1000, 0, 0x1000),
            step.clone(),
        ]
        .concat(),
        [
            unmap(0, IOVA_BASE + 0x1000, 0x1000),
            unmap(0, 0x1234_5000, 0x1000),
            step.clone(),
        ]
        .concat(),
        [unmap(1 << 2, 0, 0), step.clone(), step.clone()].concat(),
    ]
}

/// Seeds of the `vfio_socket` target: QEMU's conversation when it attaches a function (its
/// version and capabilities, the device, region and IRQ questions, a DMA_MAP of guest RAM
/// with its memfd, MSI-X eventfds, config space accesses, a reset), and the hostile
/// clients of issue 26 (a memfd that can shrink, a window larger than its file, a pipe as
/// an eventfd, a header announcing 4 GiB, commands before VERSION, descriptors where none
/// belong).
pub fn vfio_socket_seeds() -> Vec<Vec<u8>> {
    use crate::transport::{IOVA_BASE, RAM_SIZE};
    use crate::vfio_socket::{flags, message, record, Fds, Shape};
    use rnic_abi::vfio_user::{
        DeviceInfo, DmaMap, DmaUnmap, Header, IrqInfo, RegionAccess, RegionInfo, SetIrqs, Version,
        CMD_DEVICE_GET_INFO, CMD_DEVICE_GET_IRQ_INFO, CMD_DEVICE_GET_REGION_INFO, CMD_DEVICE_RESET,
        CMD_DEVICE_SET_IRQS, CMD_DMA_MAP, CMD_DMA_UNMAP, CMD_REGION_READ, CMD_REGION_WRITE,
        CMD_VERSION, DMA_MAP_READ, DMA_MAP_WRITE, IRQ_MSIX, IRQ_SET_ACTION_TRIGGER,
        IRQ_SET_DATA_EVENTFD, IRQ_SET_DATA_NONE, NUM_IRQS, NUM_REGIONS, REGION_CONFIG,
    };
    use zerocopy::IntoBytes;

    let msg = |shape: Shape, fds: Fds, size: u8, command: u16, body: &[u8]| {
        record(flags(shape, fds, size), &message(command, body))
    };
    let plain = |command: u16, body: &[u8]| msg(Shape::Message, Fds::None, 0, command, body);
    let mut caps = Version { major: 0, minor: 0 }.as_bytes().to_vec();
    caps.extend_from_slice(
        b"{\"capabilities\":{\"max_msg_fds\":16,\"max_data_xfer_size\":1048576,\"pgsizes\":4096,\
          \"max_dma_maps\":65535,\"write_multiple\":true}}\0",
    );
    let version = plain(CMD_VERSION, &caps);
    let info = plain(
        CMD_DEVICE_GET_INFO,
        DeviceInfo {
            argsz: 16,
            ..Default::default()
        }
        .as_bytes(),
    );
    let region = |index: u32, argsz: u32| {
        plain(
            CMD_DEVICE_GET_REGION_INFO,
            RegionInfo {
                argsz,
                index,
                ..Default::default()
            }
            .as_bytes(),
        )
    };
    let irq = |index: u32| {
        plain(
            CMD_DEVICE_GET_IRQ_INFO,
            IrqInfo {
                argsz: 16,
                index,
                ..Default::default()
            }
            .as_bytes(),
        )
    };
    let map = |fds: Fds, size: u8, address: u64, len: u64, offset: u64| {
        let body = DmaMap {
            argsz: 32,
            flags: DMA_MAP_READ | DMA_MAP_WRITE,
            offset,
            address,
            size: len,
        };
        msg(Shape::NoReply, fds, size, CMD_DMA_MAP, body.as_bytes())
    };
    let unmap = |address: u64, size: u64| {
        let body = DmaUnmap {
            argsz: 24,
            flags: 0,
            address,
            size,
        };
        plain(CMD_DMA_UNMAP, body.as_bytes())
    };
    let set_irqs = |fds: Fds, flags: u32, start: u32, count: u32| {
        let body = SetIrqs {
            argsz: 20,
            flags,
            index: IRQ_MSIX,
            start,
            count,
        };
        msg(Shape::Message, fds, 0, CMD_DEVICE_SET_IRQS, body.as_bytes())
    };
    let access = |region: u32, offset: u64, count: u32| RegionAccess {
        offset,
        region,
        count,
    };
    let read = |region: u32, offset: u64, count: u32| {
        plain(CMD_REGION_READ, access(region, offset, count).as_bytes())
    };
    let write = |region: u32, offset: u64, data: &[u8]| {
        let mut body = access(region, offset, data.len() as u32)
            .as_bytes()
            .to_vec();
        body.extend_from_slice(data);
        plain(CMD_REGION_WRITE, &body)
    };
    let eventfds = IRQ_SET_DATA_EVENTFD | IRQ_SET_ACTION_TRIGGER;
    let ram = RAM_SIZE as u64;
    let alias = IOVA_BASE + 2 * ram;

    let attach: Vec<u8> = [version.clone(), info.clone()]
        .into_iter()
        .chain((0..NUM_REGIONS).map(|i| region(i, 32)))
        .chain([region(2, 80)])
        .chain((0..NUM_IRQS).map(irq))
        .chain([
            map(Fds::GuestRam, 2, alias, ram, 0),
            set_irqs(Fds::Eventfd, eventfds, 0, 1),
            read(REGION_CONFIG, 0, 64),
            write(REGION_CONFIG, 4, &6u16.to_le_bytes()),
            read(0, 0, 4),
            set_irqs(Fds::None, IRQ_SET_DATA_NONE | IRQ_SET_ACTION_TRIGGER, 0, 1),
            unmap(alias, ram),
            plain(CMD_DEVICE_RESET, &[]),
        ])
        .flatten()
        .collect();
    let hostile_maps: Vec<u8> = [
        version.clone(),
        map(Fds::Unsealed, 0, 0x10_0000_0000, 0x1000, 0),
        map(Fds::Sealed, 0, 0x10_0000_0000, 1 << 40, 0),
        map(Fds::Sealed, 0, 0x10_0000_0000, 0x1000, 0x1000),
        map(Fds::None, 0, 0xfeb0_0000, 0x2_0000, 0),
        map(Fds::FullPipe, 0, 0x10_0000_0000, 0x1000, 0),
        map(Fds::Sealed, 3, 0x20_0000_0000, 1 << 30, 0),
        unmap(0x20_0000_0000, 1 << 30),
    ]
    .concat();
    let hostile_irqs: Vec<u8> = [
        version.clone(),
        set_irqs(Fds::FullPipe, eventfds, 0, 1),
        set_irqs(Fds::BlockingEventfd, eventfds, 1, 1),
        set_irqs(Fds::Several, eventfds, 0, 3),
        set_irqs(Fds::Eventfd, eventfds, 15, 2),
    ]
    .concat();
    let mut huge = Header {
        message_id: 1,
        command: CMD_REGION_WRITE,
        message_size: u32::MAX,
        flags: 0,
        error: 0,
    }
    .as_bytes()
    .to_vec();
    huge.extend_from_slice(access(0, 0, u32::MAX - 32).as_bytes());
    let oversized: Vec<u8> = [
        version.clone(),
        record(flags(Shape::Raw, Fds::None, 0), &huge),
    ]
    .concat();
    let out_of_order: Vec<u8> = [
        info.clone(),
        msg(Shape::Split, Fds::None, 0, CMD_VERSION, &caps),
        version.clone(),
        msg(
            Shape::Message,
            Fds::Eventfd,
            0,
            CMD_REGION_READ,
            access(REGION_CONFIG, 0, 4).as_bytes(),
        ),
        read(REGION_CONFIG, 0xffe, 4),
        read(9, 0, 4),
    ]
    .concat();
    vec![attach, hostile_maps, hostile_irqs, oversized, out_of_order]
}
