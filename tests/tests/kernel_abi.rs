//! The kernel driver's copy of the hardware interface (kernel/rnic_abi.h) agrees with the
//! ABI crate: every size, field offset, constant and helper the driver uses is printed by
//! a small C program that includes the header (compiled here with the host's `cc`, as
//! userspace C: the header is written to allow that), and compared with what `rnic_abi`
//! says.

use std::mem::{offset_of, size_of};
use std::process::Command;

use rnic_abi::cmd::{
    CmdHeader, Limits, Opcode, QueryDeviceResp, RespHeader, Status, CMDQ_MAX_SIZE, CMD_MAX_LEN,
    FUNCTION_KIND_PF, FUNCTION_KIND_VF,
};
use rnic_abi::eth::{self, *};
use rnic_abi::fast_reg::{AllocFastRegMrReq, FastRegWqe, RegDmaMrReq, MAX_FAST_REG_PAGES};
use rnic_abi::gid::SetGidReq;
use rnic_abi::mw::{self, AllocMwReq, AllocMwResp};
use rnic_abi::srq::{self, CreateSrqReq, CreateSrqResp, ModifySrqReq, QuerySrqResp, ResizeSrqReq};
use rnic_abi::ud::{self, ModifyQpQkey, UdSendWqe};
use rnic_abi::verbs::{
    self, attr, event, owner_phase, rq_stride, send_flags, sq_stride, wc, wc_flags, wr, Cqe,
    CreateCqReq, CreateCqResp, CreateEqReq, CreateEqResp, CreateQpReq, CreateQpResp, DoorbellSlot,
    Eqe, ModifyQpReq, ObjectReq, ObjectResp, PageList, QpAttr, QpState, QueryQpResp, RecvWqe,
    RegMrReq, RegMrResp, SendWqe, Sge, WcStatus, MAX_PAGE_LEVELS, MAX_PAGE_LIST, PAGE_SHIFT,
    PAGE_TABLE_ENTRIES,
};
use rnic_abi::{doorbell, pci, regs, uverbs};

/// One check: a C expression and the value the ABI crate gives it.
struct Item {
    c: String,
    rust: u64,
}

fn item(c: impl Into<String>, rust: impl TryInto<u64>) -> Item {
    Item {
        c: c.into(),
        rust: rust.try_into().ok().expect("a value that fits a u64"),
    }
}

/// The size of `struct $c` and the offset of each field, against the Rust type `$r`
/// (fields of the same names).
macro_rules! layout {
    ($v:ident, $c:literal, $r:ty $(, $f:ident)*) => {
        $v.push(item(concat!("sizeof(struct ", $c, ")"), size_of::<$r>()));
        $(
            $v.push(item(
                concat!("offsetof(struct ", $c, ", ", stringify!($f), ")"),
                offset_of!($r, $f),
            ));
        )*
    };
}

/// A constant of the header against its value in the crate.
macro_rules! konst {
    ($v:ident, $( $c:literal = $r:expr ),* $(,)?) => {
        $( $v.push(item($c, $r)); )*
    };
}

fn items() -> Vec<Item> {
    let mut v = Vec::new();
    layout!(v, "rnic_cmd_header", CmdHeader, opcode, reserved, token);
    layout!(
        v,
        "rnic_resp_header",
        RespHeader,
        status,
        opcode,
        token,
        syndrome,
        reserved
    );
    layout!(
        v,
        "rnic_limits",
        Limits,
        max_qp,
        max_qp_wr,
        max_sge,
        max_cq,
        max_cqe,
        max_mr,
        max_pd,
        max_qp_rd_atom,
        max_qp_init_rd_atom,
        max_inline_data,
        max_mr_size,
        max_mr_pages,
        doorbell_pages,
        msix_vectors,
        cmdq_max_size
    );
    layout!(
        v,
        "rnic_query_device_resp",
        QueryDeviceResp,
        vendor_id,
        device_id,
        abi_major,
        abi_minor,
        fw_version,
        function_kind,
        vf_index,
        total_vfs,
        caps,
        mac,
        reserved0,
        gid,
        limits
    );
    layout!(
        v,
        "rnic_page_list",
        PageList,
        addr,
        count,
        page_shift,
        levels,
        reserved
    );
    layout!(v, "rnic_doorbell_slot", DoorbellSlot, page, slot);
    layout!(v, "rnic_eth_desc", EthDesc, addr, len, flags, status);
    layout!(
        v,
        "rnic_create_eth_queue_req",
        CreateEthQueueReq,
        kind,
        reserved0,
        msix_vector,
        entries,
        doorbell_page,
        moderation_usecs,
        ring
    );
    layout!(
        v,
        "rnic_create_eth_queue_resp",
        CreateEthQueueResp,
        queue,
        reserved,
        doorbell
    );
    layout!(v, "rnic_eth_queue_req", EthQueueReq, kind, reserved0, queue);
    layout!(
        v,
        "rnic_set_eth_req",
        SetEthReq,
        mtu,
        rx_mode,
        event_vector,
        reserved,
        mc_count
    );
    layout!(v, "rnic_mac_entry", MacEntry, mac, reserved);
    layout!(
        v,
        "rnic_mcast_req",
        rnic_abi::mcast::McastReq,
        qpn,
        reserved,
        gid
    );
    layout!(
        v,
        "rnic_set_gid_req",
        SetGidReq,
        index,
        flags,
        reserved,
        gid
    );
    layout!(
        v,
        "rnic_eth_counters",
        EthCounters,
        tx_frames,
        tx_bytes,
        tx_malformed,
        tx_dma_errors,
        tx_spoofed,
        tx_link_down,
        rx_frames,
        rx_bytes,
        rx_no_buffer,
        rx_too_long,
        rx_filtered,
        rx_disabled,
        rx_dma_errors,
        rx_link_down,
        ring_errors,
        interrupts
    );
    layout!(
        v,
        "rnic_query_eth_resp",
        QueryEthResp,
        mac,
        reserved,
        flags,
        mtu,
        rx_mode,
        max_mtu,
        counters
    );
    layout!(
        v,
        "rnic_eth_queue_stats",
        EthQueueStats,
        frames,
        bytes,
        errors,
        interrupts,
        completed,
        posted
    );
    // The verbs of the RDMA device (rnic_ib*.c, ABI 1.1 to 1.8).
    layout!(
        v,
        "rnic_create_eq_req",
        CreateEqReq,
        ring,
        entries,
        vector,
        doorbell_page,
        reserved
    );
    layout!(
        v,
        "rnic_create_eq_resp",
        CreateEqResp,
        eqn,
        reserved,
        doorbell
    );
    layout!(v, "rnic_eqe", Eqe, object, data, event_type, reserved, owner);
    layout!(v, "rnic_object_req", ObjectReq, handle, reserved);
    layout!(v, "rnic_object_resp", ObjectResp, handle, reserved);
    layout!(v, "rnic_reg_mr_resp", RegMrResp, lkey, rkey);
    layout!(
        v,
        "rnic_reg_mr_req",
        RegMrReq,
        pdn,
        access,
        iova,
        length,
        pages
    );
    layout!(
        v,
        "rnic_uverbs_alloc_ucontext_resp",
        uverbs::AllocUcontextResp,
        abi_version,
        doorbell_page,
        doorbell_offset,
        kick_offset,
        caps
    );
    layout!(
        v,
        "rnic_uverbs_alloc_pd_resp",
        uverbs::AllocPdResp,
        pdn,
        reserved
    );
    layout!(
        v,
        "rnic_uverbs_create_cq_req",
        uverbs::CreateCqReq,
        ring_va,
        entries,
        reserved
    );
    layout!(
        v,
        "rnic_uverbs_resize_cq_req",
        uverbs::ResizeCqReq,
        ring_va,
        entries,
        reserved
    );
    layout!(
        v,
        "rnic_uverbs_create_cq_resp",
        uverbs::CreateCqResp,
        cqn,
        entries,
        doorbell_slot,
        reserved
    );
    layout!(
        v,
        "rnic_uverbs_create_qp_req",
        uverbs::CreateQpReq,
        sq_va,
        rq_va,
        sq_entries,
        rq_entries
    );
    layout!(
        v,
        "rnic_uverbs_create_qp_resp",
        uverbs::CreateQpResp,
        qpn,
        sq_slot,
        rq_slot,
        sq_stride,
        rq_stride,
        max_inline_data
    );
    layout!(v, "rnic_reg_dma_mr_req", RegDmaMrReq, pdn, access);
    layout!(v, "rnic_alloc_mw_req", AllocMwReq, pdn, mw_type, reserved);
    layout!(v, "rnic_alloc_mw_resp", AllocMwResp, rkey, reserved);
    layout!(
        v,
        "rnic_alloc_fast_reg_mr_req",
        AllocFastRegMrReq,
        pdn,
        max_pages
    );
    layout!(
        v,
        "rnic_create_cq_req",
        CreateCqReq,
        ring,
        entries,
        doorbell_page
    );
    layout!(
        v,
        "rnic_resize_cq_req",
        rnic_abi::verbs::ResizeCqReq,
        ring,
        entries,
        cqn
    );
    layout!(
        v,
        "rnic_create_cq_resp",
        CreateCqResp,
        cqn,
        reserved,
        doorbell
    );
    layout!(
        v, "rnic_cqe", Cqe, wr_id, byte_len, imm_or_inv, qp_num, src_qp, opcode, status, wc_flags,
        owner, vendor_err
    );
    layout!(
        v,
        "rnic_create_qp_req",
        CreateQpReq,
        pdn,
        send_cqn,
        recv_cqn,
        sq_entries,
        rq_entries,
        max_send_sge,
        max_recv_sge,
        max_inline_data,
        doorbell_page,
        qp_type,
        sq_sig_all,
        srqn,
        sq,
        rq
    );
    layout!(
        v,
        "rnic_uverbs_create_srq_req",
        uverbs::CreateSrqReq,
        ring_va,
        entries,
        reserved
    );
    layout!(
        v,
        "rnic_uverbs_create_srq_resp",
        uverbs::CreateSrqResp,
        srqn,
        doorbell_slot,
        stride,
        reserved
    );
    layout!(
        v,
        "rnic_create_srq_req",
        CreateSrqReq,
        pdn,
        entries,
        max_sge,
        srq_limit,
        doorbell_page,
        reserved,
        ring
    );
    layout!(
        v,
        "rnic_create_srq_resp",
        CreateSrqResp,
        srqn,
        reserved,
        doorbell
    );
    layout!(
        v,
        "rnic_modify_srq_req",
        ModifySrqReq,
        srqn,
        attr_mask,
        max_wr,
        srq_limit
    );
    layout!(v, "rnic_resize_srq_req", ResizeSrqReq, ring, entries, srqn);
    layout!(
        v,
        "rnic_uverbs_resize_srq_req",
        uverbs::ResizeSrqReq,
        ring_va,
        entries,
        reserved
    );
    layout!(
        v,
        "rnic_query_srq_resp",
        QuerySrqResp,
        max_wr,
        max_sge,
        srq_limit,
        consumed
    );
    layout!(
        v,
        "rnic_create_qp_resp",
        CreateQpResp,
        qpn,
        reserved,
        sq_doorbell,
        rq_doorbell
    );
    layout!(
        v,
        "rnic_qp_attr",
        QpAttr,
        qp_state,
        cur_qp_state,
        path_mtu,
        timeout,
        retry_cnt,
        rnr_retry,
        min_rnr_timer,
        max_rd_atomic,
        max_dest_rd_atomic,
        port_num,
        sgid_index,
        hop_limit,
        traffic_class,
        reserved0,
        pkey_index,
        qp_access_flags,
        dest_qp_num,
        rq_psn,
        sq_psn,
        flow_label,
        dgid
    );
    layout!(v, "rnic_modify_qp_req", ModifyQpReq, qpn, attr_mask, attr);
    layout!(v, "rnic_modify_qp_qkey", ModifyQpQkey, qkey, reserved);
    layout!(
        v,
        "rnic_query_qp_resp",
        QueryQpResp,
        attr,
        sq_consumed,
        rq_consumed
    );
    layout!(
        v,
        "rnic_send_wqe",
        SendWqe,
        wr_id,
        opcode,
        flags,
        num_sge,
        session_group,
        imm_or_inv,
        remote_addr,
        rkey,
        inline_len,
        compare_add,
        swap,
        reserved1
    );
    layout!(
        v,
        "rnic_ud_send_wqe",
        UdSendWqe,
        wr_id,
        opcode,
        flags,
        num_sge,
        reserved0,
        imm,
        remote_qkey,
        remote_qpn,
        reserved1,
        inline_len,
        dgid,
        hop_limit,
        traffic_class,
        sgid_index,
        reserved2
    );
    layout!(
        v,
        "rnic_fast_reg_wqe",
        FastRegWqe,
        wr_id,
        opcode,
        flags,
        num_sge,
        page_shift,
        key,
        iova,
        access,
        page_count,
        page_list,
        length,
        reserved
    );
    layout!(v, "rnic_recv_wqe", RecvWqe, wr_id, num_sge, reserved);
    layout!(v, "rnic_sge", Sge, addr, length, lkey);
    // The virtio descriptor of the command queue (datasheet §6.3): 16 bytes.
    konst!(v, "sizeof(struct rnic_vring_desc)" = 16u64);
    konst!(v, "RNIC_ETH_COUNTERS" = size_of::<EthCounters>() / 8);

    konst!(
        v,
        "RNIC_ABI_MAJOR" = rnic_abi::ABI_MAJOR,
        "RNIC_ABI_MINOR" = rnic_abi::ABI_MINOR,
        "RNIC_PAGE_SIZE" = rnic_abi::PAGE_SIZE,
        "RNIC_VENDOR_ID" = pci::VENDOR_ID,
        "RNIC_PF_DEVICE_ID" = pci::PF_DEVICE_ID,
        "RNIC_VF_DEVICE_ID" = pci::VF_DEVICE_ID,
        "RNIC_REG_BAR" = pci::REG_BAR,
        "RNIC_DOORBELL_BAR" = pci::DOORBELL_BAR,
        "RNIC_MSIX_VECTORS" = pci::MSIX_VECTORS,
        "RNIC_REG_MAGIC" = regs::MAGIC_REG,
        "RNIC_REG_ABI_VERSION" = regs::ABI_VERSION,
        "RNIC_REG_FUNCTION_INFO" = regs::FUNCTION_INFO,
        "RNIC_REG_CAPS_LO" = regs::CAPS_LO,
        "RNIC_REG_CAPS_HI" = regs::CAPS_HI,
        "RNIC_REG_DEVICE_STATUS" = regs::DEVICE_STATUS,
        "RNIC_REG_DEVICE_CONTROL" = regs::DEVICE_CONTROL,
        "RNIC_REG_CMDQ_DESC_LO" = regs::CMDQ_DESC_LO,
        "RNIC_REG_CMDQ_DESC_HI" = regs::CMDQ_DESC_HI,
        "RNIC_REG_CMDQ_AVAIL_LO" = regs::CMDQ_AVAIL_LO,
        "RNIC_REG_CMDQ_AVAIL_HI" = regs::CMDQ_AVAIL_HI,
        "RNIC_REG_CMDQ_USED_LO" = regs::CMDQ_USED_LO,
        "RNIC_REG_CMDQ_USED_HI" = regs::CMDQ_USED_HI,
        "RNIC_REG_CMDQ_SIZE" = regs::CMDQ_SIZE,
        "RNIC_REG_CMDQ_MSIX_VECTOR" = regs::CMDQ_MSIX_VECTOR,
        "RNIC_REG_CMDQ_CONTROL" = regs::CMDQ_CONTROL,
        "RNIC_REG_CMDQ_MAX_SIZE" = regs::CMDQ_MAX_SIZE,
        "RNIC_REG_DOORBELL_KICK" = regs::DOORBELL_KICK,
        "RNIC_REG_DOORBELL_PAGES" = regs::DOORBELL_PAGES,
        "RNIC_REG_MSIX_VECTORS" = regs::MSIX_VECTORS,
        "RNIC_REG_ERROR_CODE" = regs::ERROR_CODE,
        "RNIC_REG_USER_KICK_PAGE" = regs::USER_KICK_PAGE,
        "RNIC_REG_USER_KICK" = regs::USER_KICK,
        "RNIC_MAGIC" = regs::MAGIC,
        "RNIC_FUNCTION_IS_VF" = regs::FUNCTION_IS_VF,
        "RNIC_CAP_CMDQ" = regs::CAP_CMDQ,
        "RNIC_CAP_DOORBELL_NOTIFY" = regs::CAP_DOORBELL_NOTIFY,
        "RNIC_CAP_MSIX" = regs::CAP_MSIX,
        "RNIC_CAP_FUNCTION_RESET" = regs::CAP_FUNCTION_RESET,
        "RNIC_CAP_ETH" = regs::CAP_ETH,
        "RNIC_STATUS_READY" = regs::STATUS_READY,
        "RNIC_STATUS_CMDQ_RUNNING" = regs::STATUS_CMDQ_RUNNING,
        "RNIC_STATUS_FATAL" = regs::STATUS_FATAL,
        "RNIC_STATUS_DISABLED" = regs::STATUS_DISABLED,
        "RNIC_STATUS_LINK_DOWN" = regs::STATUS_LINK_DOWN,
        "RNIC_CONTROL_RESET" = regs::CONTROL_RESET,
        "RNIC_CMDQ_ENABLE" = regs::CMDQ_ENABLE,
        "RNIC_NO_VECTOR" = regs::NO_VECTOR,
        "RNIC_DB_NOTIFY_REQUEST" = doorbell::NOTIFY_REQUEST,
        "RNIC_DB_CMDQ_DOORBELL" = doorbell::CMDQ_DOORBELL,
        "RNIC_DB_RESET_COUNT" = doorbell::RESET_COUNT,
        "RNIC_DB_RUNG_BITMAP" = doorbell::RUNG_BITMAP,
        "RNIC_DB_SLOTS_BASE" = doorbell::SLOTS_BASE,
        "RNIC_DB_SLOT_SIZE" = doorbell::SLOT_SIZE,
        "RNIC_DB_SLOTS" = doorbell::SLOTS,
        "RNIC_DB_PAGES" = doorbell::PAGES,
        "rnic_db_slot_offset(3, 7)" = doorbell::slot_offset(3, 7),
        "rnic_db_slot_offset(15, 479)" = doorbell::slot_offset(15, 479),
        "RNIC_CMDQ_MAX_SIZE" = CMDQ_MAX_SIZE,
        "RNIC_CMD_MAX_LEN" = CMD_MAX_LEN,
        "RNIC_CMD_NOP" = Opcode::Nop as u16,
        "RNIC_CMD_QUERY_DEVICE" = Opcode::QueryDevice as u16,
        "RNIC_CMD_CREATE_ETH_QUEUE" = Opcode::CreateEthQueue as u16,
        "RNIC_CMD_DESTROY_ETH_QUEUE" = Opcode::DestroyEthQueue as u16,
        "RNIC_CMD_SET_ETH" = Opcode::SetEth as u16,
        "RNIC_CMD_QUERY_ETH" = Opcode::QueryEth as u16,
        "RNIC_CMD_QUERY_ETH_QUEUE" = Opcode::QueryEthQueue as u16,
        "RNIC_CMD_SET_GID" = Opcode::SetGid as u16,
        "RNIC_CMD_QUERY_GID" = Opcode::QueryGid as u16,
        "RNIC_ST_OK" = Status::Ok as u16,
        "RNIC_ST_BAD_OPCODE" = Status::BadOpcode as u16,
        "RNIC_ST_BAD_PARAM" = Status::BadParam as u16,
        "RNIC_ST_MALFORMED" = Status::Malformed as u16,
        "RNIC_ST_DMA_ERROR" = Status::DmaError as u16,
        "RNIC_ST_NO_RESOURCES" = Status::NoResources as u16,
        "RNIC_ST_NOT_PERMITTED" = Status::NotPermitted as u16,
        "RNIC_ST_INTERNAL" = Status::Internal as u16,
        "RNIC_ST_BUSY" = Status::Busy as u16,
        "RNIC_ST_NOT_FOUND" = Status::NotFound as u16,
        "RNIC_ST_BAD_STATE" = Status::BadState as u16,
        "RNIC_FUNCTION_KIND_PF" = FUNCTION_KIND_PF,
        "RNIC_FUNCTION_KIND_VF" = FUNCTION_KIND_VF,
        "RNIC_PAGE_SHIFT" = PAGE_SHIFT,
        "RNIC_MAX_PAGE_LIST" = MAX_PAGE_LIST,
        "RNIC_PAGE_TABLE_ENTRIES" = PAGE_TABLE_ENTRIES,
        "RNIC_MAX_PAGE_LEVELS" = MAX_PAGE_LEVELS,
        "RNIC_UVERBS_ABI_VERSION" = uverbs::UVERBS_ABI_VERSION,
        "RNIC_UVERBS_MMAP_LEN" = uverbs::MMAP_LEN,
        "RNIC_ETH_KIND_TX" = KIND_TX,
        "RNIC_ETH_KIND_RX" = KIND_RX,
        "RNIC_ETH_MAX_TX_QUEUES" = MAX_TX_QUEUES,
        "RNIC_ETH_MAX_RX_QUEUES" = MAX_RX_QUEUES,
        "RNIC_ETH_MIN_ENTRIES" = MIN_ENTRIES,
        "RNIC_ETH_MAX_ENTRIES" = MAX_ENTRIES,
        "RNIC_ETH_MAX_MODERATION_USECS" = MAX_MODERATION_USECS,
        "RNIC_ETH_MIN_MTU" = MIN_MTU,
        "RNIC_ETH_MAX_MTU" = MAX_MTU,
        "RNIC_ETH_DEFAULT_MTU" = DEFAULT_MTU,
        "RNIC_ETH_HLEN" = ETH_HLEN,
        "RNIC_ETH_VLAN_HLEN" = VLAN_HLEN,
        "RNIC_ETH_MIN_FRAME" = MIN_FRAME,
        "RNIC_ETH_TX_MAX_DESCS" = TX_MAX_DESCS,
        "RNIC_ETH_TX_MORE" = TX_MORE,
        "RNIC_ETH_DESC_DONE" = DESC_DONE,
        "RNIC_ETH_DESC_ERROR_SHIFT" = DESC_ERROR_SHIFT,
        "RNIC_ETH_RX_ENABLE" = RX_ENABLE,
        "RNIC_ETH_RX_PROMISC" = RX_PROMISC,
        "RNIC_ETH_RX_ALLMULTI" = RX_ALLMULTI,
        "RNIC_ETH_MAX_MULTICAST" = MAX_MULTICAST,
        "RNIC_ETH_LINK_UP" = ETH_LINK_UP,
        "RNIC_ETH_TRUSTED" = ETH_TRUSTED,
        "RNIC_ETH_SPOOF_CHECKED" = ETH_SPOOF_CHECKED,
        "RNIC_ETH_DESC_ERR_NONE" = eth::desc_error::NONE,
        "RNIC_ETH_DESC_ERR_MALFORMED" = eth::desc_error::MALFORMED,
        "RNIC_ETH_DESC_ERR_DMA" = eth::desc_error::DMA,
        "RNIC_ETH_DESC_ERR_SPOOFED" = eth::desc_error::SPOOFED,
        "RNIC_ETH_DESC_ERR_LINK_DOWN" = eth::desc_error::LINK_DOWN,
        "rnic_eth_max_frame(1500)" = max_frame(1500),
        "rnic_eth_max_frame(9000)" = max_frame(9000),
        "rnic_eth_arm_word(3, 0x10005)" = arm_word(3, 0x1_0005),
        "rnic_eth_arm_word(0xffff, 0xffffffff)" = arm_word(0xffff, 0xffff_ffff),
        "RNIC_CAP_RDMA_RC" = regs::CAP_RDMA_RC,
        "RNIC_CAP_SEND_VARIANTS" = regs::CAP_SEND_VARIANTS,
        "RNIC_CAP_SRQ" = regs::CAP_SRQ,
        "RNIC_CAP_UD" = regs::CAP_UD,
        "RNIC_CAP_FAST_REG" = regs::CAP_FAST_REG,
        "RNIC_CAP_GSI" = regs::CAP_GSI,
        "RNIC_CAP_USER_KICK" = regs::CAP_USER_KICK,
        "RNIC_CAP_GID_TABLE" = regs::CAP_GID_TABLE,
        "RNIC_CAP_RESIZE_CQ" = regs::CAP_RESIZE_CQ,
        "RNIC_CAP_RESIZE_SRQ" = regs::CAP_RESIZE_SRQ,
        "RNIC_CAP_MULTICAST" = regs::CAP_MULTICAST,
        "RNIC_CMD_ATTACH_MCAST" = Opcode::AttachMcast as u16,
        "RNIC_CMD_DETACH_MCAST" = Opcode::DetachMcast as u16,
        "RNIC_MCAST_MAX_GROUPS" = rnic_abi::mcast::MAX_GROUPS,
        "RNIC_MCAST_MAX_QPS_PER_GROUP" = rnic_abi::mcast::MAX_QPS_PER_GROUP,
        "RNIC_CAP_ATOMIC_WRITE" = regs::CAP_ATOMIC_WRITE,
        "RNIC_CAP_FLUSH" = regs::CAP_FLUSH,
        "RNIC_GID_TABLE_LEN" = rnic_abi::gid::GID_TABLE_LEN,
        "RNIC_GID_VALID" = rnic_abi::gid::GID_VALID,
        "RNIC_CAP_PAGE_TABLES" = regs::CAP_PAGE_TABLES,
        "RNIC_CAP_UC" = regs::CAP_UC,
        "RNIC_CMD_CREATE_EQ" = Opcode::CreateEq as u16,
        "RNIC_CMD_DESTROY_EQ" = Opcode::DestroyEq as u16,
        "RNIC_CMD_ALLOC_PD" = Opcode::AllocPd as u16,
        "RNIC_CMD_DEALLOC_PD" = Opcode::DeallocPd as u16,
        "RNIC_CMD_REG_MR" = Opcode::RegMr as u16,
        "RNIC_CMD_DEREG_MR" = Opcode::DeregMr as u16,
        "RNIC_CMD_REG_DMA_MR" = Opcode::RegDmaMr as u16,
        "RNIC_CMD_ALLOC_FAST_REG_MR" = Opcode::AllocFastRegMr as u16,
        "RNIC_CMD_CREATE_CQ" = Opcode::CreateCq as u16,
        "RNIC_CMD_DESTROY_CQ" = Opcode::DestroyCq as u16,
        "RNIC_CMD_RESIZE_CQ" = Opcode::ResizeCq as u16,
        "RNIC_CMD_CREATE_QP" = Opcode::CreateQp as u16,
        "RNIC_CMD_MODIFY_QP" = Opcode::ModifyQp as u16,
        "RNIC_CMD_QUERY_QP" = Opcode::QueryQp as u16,
        "RNIC_CMD_DESTROY_QP" = Opcode::DestroyQp as u16,
        "RNIC_CMD_CREATE_SRQ" = Opcode::CreateSrq as u16,
        "RNIC_CMD_MODIFY_SRQ" = Opcode::ModifySrq as u16,
        "RNIC_CMD_QUERY_SRQ" = Opcode::QuerySrq as u16,
        "RNIC_CMD_DESTROY_SRQ" = Opcode::DestroySrq as u16,
        "RNIC_CMD_RESIZE_SRQ" = Opcode::ResizeSrq as u16,
        "RNIC_ACCESS_LOCAL_WRITE" = verbs::ACCESS_LOCAL_WRITE,
        "RNIC_ACCESS_REMOTE_WRITE" = verbs::ACCESS_REMOTE_WRITE,
        "RNIC_ACCESS_REMOTE_READ" = verbs::ACCESS_REMOTE_READ,
        "RNIC_ACCESS_REMOTE_ATOMIC" = verbs::ACCESS_REMOTE_ATOMIC,
        "RNIC_ACCESS_MW_BIND" = verbs::ACCESS_MW_BIND,
        "RNIC_ACCESS_FLUSH_GLOBAL" = verbs::ACCESS_FLUSH_GLOBAL,
        "RNIC_ACCESS_FLUSH_PERSISTENT" = verbs::ACCESS_FLUSH_PERSISTENT,
        "RNIC_CAP_MW" = regs::CAP_MW,
        "RNIC_CMD_ALLOC_MW" = Opcode::AllocMw as u16,
        "RNIC_CMD_DEALLOC_MW" = Opcode::DeallocMw as u16,
        "RNIC_MW_KEY_BIT" = mw::MW_KEY_BIT,
        "RNIC_MAX_MW_INDEX" = mw::MAX_MW_INDEX,
        "RNIC_MW_TYPE_1" = mw::MW_TYPE_1,
        "RNIC_MW_TYPE_2" = mw::MW_TYPE_2,
        "RNIC_QPT_GSI" = ud::QPT_GSI,
        "RNIC_QPT_RC" = verbs::QPT_RC,
        "RNIC_QPT_UC" = verbs::QPT_UC,
        "RNIC_QPT_UD" = ud::QPT_UD,
        "RNIC_GSI_QPN" = ud::GSI_QPN,
        "RNIC_GSI_QKEY" = ud::GSI_QKEY,
        "RNIC_GRH_LEN" = ud::GRH_LEN,
        "RNIC_UD_MAX_PAYLOAD" = ud::UD_MAX_PAYLOAD,
        "RNIC_QKEY_USE_OWN" = ud::QKEY_USE_OWN,
        "RNIC_FIRST_QPN" = verbs::FIRST_QPN,
        "RNIC_QPS_RESET" = QpState::Reset as u8,
        "RNIC_QPS_INIT" = QpState::Init as u8,
        "RNIC_QPS_RTR" = QpState::Rtr as u8,
        "RNIC_QPS_RTS" = QpState::Rts as u8,
        "RNIC_QPS_SQD" = QpState::Sqd as u8,
        "RNIC_QPS_SQE" = QpState::Sqe as u8,
        "RNIC_QPS_ERR" = QpState::Err as u8,
        "RNIC_ATTR_STATE" = attr::STATE,
        "RNIC_ATTR_CUR_STATE" = attr::CUR_STATE,
        "RNIC_ATTR_EN_SQD_ASYNC_NOTIFY" = attr::EN_SQD_ASYNC_NOTIFY,
        "RNIC_ATTR_ACCESS_FLAGS" = attr::ACCESS_FLAGS,
        "RNIC_ATTR_PKEY_INDEX" = attr::PKEY_INDEX,
        "RNIC_ATTR_PORT" = attr::PORT,
        "RNIC_ATTR_QKEY" = attr::QKEY,
        "RNIC_ATTR_AV" = attr::AV,
        "RNIC_ATTR_PATH_MTU" = attr::PATH_MTU,
        "RNIC_ATTR_TIMEOUT" = attr::TIMEOUT,
        "RNIC_ATTR_RETRY_CNT" = attr::RETRY_CNT,
        "RNIC_ATTR_RNR_RETRY" = attr::RNR_RETRY,
        "RNIC_ATTR_RQ_PSN" = attr::RQ_PSN,
        "RNIC_ATTR_MAX_QP_RD_ATOMIC" = attr::MAX_QP_RD_ATOMIC,
        "RNIC_ATTR_MIN_RNR_TIMER" = attr::MIN_RNR_TIMER,
        "RNIC_ATTR_SQ_PSN" = attr::SQ_PSN,
        "RNIC_ATTR_MAX_DEST_RD_ATOMIC" = attr::MAX_DEST_RD_ATOMIC,
        "RNIC_ATTR_DEST_QPN" = attr::DEST_QPN,
        "RNIC_WR_RDMA_WRITE" = wr::RDMA_WRITE,
        "RNIC_WR_RDMA_WRITE_WITH_IMM" = wr::RDMA_WRITE_WITH_IMM,
        "RNIC_WR_SEND" = wr::SEND,
        "RNIC_WR_SEND_WITH_IMM" = wr::SEND_WITH_IMM,
        "RNIC_WR_RDMA_READ" = wr::RDMA_READ,
        "RNIC_WR_ATOMIC_CMP_AND_SWP" = wr::ATOMIC_CMP_AND_SWP,
        "RNIC_WR_ATOMIC_FETCH_AND_ADD" = wr::ATOMIC_FETCH_AND_ADD,
        "RNIC_WR_LOCAL_INV" = wr::LOCAL_INV,
        "RNIC_WR_BIND_MW" = wr::BIND_MW,
        "RNIC_WR_SEND_WITH_INV" = wr::SEND_WITH_INV,
        "RNIC_WR_REG_MR" = wr::REG_MR,
        "RNIC_SEND_FENCE" = send_flags::FENCE,
        "RNIC_SEND_SIGNALED" = send_flags::SIGNALED,
        "RNIC_SEND_SOLICITED" = send_flags::SOLICITED,
        "RNIC_SEND_INLINE" = send_flags::INLINE,
        "RNIC_WC_SEND" = wc::SEND,
        "RNIC_WC_RDMA_WRITE" = wc::RDMA_WRITE,
        "RNIC_WC_RDMA_READ" = wc::RDMA_READ,
        "RNIC_WC_COMP_SWAP" = wc::COMP_SWAP,
        "RNIC_WC_FETCH_ADD" = wc::FETCH_ADD,
        "RNIC_WC_BIND_MW" = wc::BIND_MW,
        "RNIC_WC_LOCAL_INV" = wc::LOCAL_INV,
        "RNIC_WC_REG_MR" = wc::REG_MR,
        "RNIC_WC_ATOMIC_WRITE" = wc::ATOMIC_WRITE,
        "RNIC_WC_FLUSH" = wc::FLUSH,
        "RNIC_WC_RECV" = wc::RECV,
        "RNIC_WC_RECV_RDMA_WITH_IMM" = wc::RECV_RDMA_WITH_IMM,
        "RNIC_WC_F_GRH" = wc_flags::GRH,
        "RNIC_WC_F_WITH_IMM" = wc_flags::WITH_IMM,
        "RNIC_WC_F_WITH_INV" = wc_flags::WITH_INV,
        "RNIC_WC_F_SOLICITED" = wc_flags::SOLICITED,
        "RNIC_WC_SUCCESS" = WcStatus::Success as u8,
        "RNIC_WC_WR_FLUSH_ERR" = WcStatus::WrFlushErr as u8,
        "RNIC_WC_GENERAL_ERR" = WcStatus::GeneralErr as u8,
        "RNIC_EV_CQ_ERR" = event::CQ_ERR,
        "RNIC_EV_QP_FATAL" = event::QP_FATAL,
        "RNIC_EV_QP_REQ_ERR" = event::QP_REQ_ERR,
        "RNIC_EV_QP_ACCESS_ERR" = event::QP_ACCESS_ERR,
        "RNIC_EV_COMM_EST" = event::COMM_EST,
        "RNIC_EV_SQ_DRAINED" = event::SQ_DRAINED,
        "RNIC_EV_SRQ_LIMIT_REACHED" = event::SRQ_LIMIT_REACHED,
        "RNIC_MAX_SRQN" = srq::MAX_SRQN,
        "RNIC_SRQ_ATTR_MAX_WR" = srq::srq_attr::MAX_WR,
        "RNIC_SRQ_ATTR_LIMIT" = srq::srq_attr::LIMIT,
        "RNIC_EV_COMPLETION" = event::EVENT_COMPLETION,
        "RNIC_MAX_FAST_REG_PAGES" = MAX_FAST_REG_PAGES,
        "rnic_sq_stride(0, 0)" = sq_stride(0, 0),
        "rnic_sq_stride(1, 0)" = sq_stride(1, 0),
        "rnic_sq_stride(4, 200)" = sq_stride(4, 200),
        "rnic_sq_stride(16, 256)" = sq_stride(16, 256),
        "rnic_sq_stride(2, 17)" = sq_stride(2, 17),
        "rnic_rq_stride(0)" = rq_stride(0),
        "rnic_rq_stride(1)" = rq_stride(1),
        "rnic_rq_stride(16)" = rq_stride(16),
        "rnic_owner_phase(0, 4)" = owner_phase(0, 4),
        "rnic_owner_phase(4, 4)" = owner_phase(4, 4),
        "rnic_owner_phase(0xffffffff, 1024)" = owner_phase(0xffff_ffff, 1024),
        // §7.5: the arm word is the 31-bit sequence above the solicited-only bit.
        "rnic_cq_arm_word(1, 0)" = 2u32,
        "rnic_cq_arm_word(0x7fffffff, 1)" = 0xffff_ffffu32,
    );
    v
}

#[test]
fn the_kernel_drivers_abi_header_agrees_with_the_abi_crate() {
    let items = items();
    let dir = tempfile::tempdir().expect("temp dir");
    let mut program =
        String::from("#include <stdio.h>\n#include \"rnic_abi.h\"\n\nint main(void)\n{\n");
    for it in &items {
        program.push_str(&format!(
            "\tprintf(\"%llu\\n\", (unsigned long long)({}));\n",
            it.c
        ));
    }
    program.push_str("\treturn 0;\n}\n");
    let source = dir.path().join("abi_dump.c");
    std::fs::write(&source, program).expect("write the C program");
    let binary = dir.path().join("abi_dump");
    let include = rnic_tests::vm::repo().join("kernel");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let out = Command::new(&cc)
        .args(["-std=gnu11", "-Wall", "-Werror", "-I"])
        .arg(&include)
        .arg(&source)
        .arg("-o")
        .arg(&binary)
        .output()
        .unwrap_or_else(|e| panic!("run the C compiler {cc} (install gcc, or set CC): {e}"));
    assert!(
        out.status.success(),
        "kernel/rnic_abi.h does not compile as userspace C:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = Command::new(&binary).output().expect("run abi_dump");
    assert!(out.status.success(), "abi_dump failed");
    let printed = String::from_utf8(out.stdout).expect("UTF-8");
    let values: Vec<u64> = printed
        .lines()
        .map(|l| l.parse().expect("a number"))
        .collect();
    assert_eq!(values.len(), items.len(), "abi_dump printed {printed}");
    let wrong: Vec<String> = items
        .iter()
        .zip(&values)
        .filter(|(it, c)| it.rust != **c)
        .map(|(it, c)| format!("{}: header {c:#x}, abi crate {:#x}", it.c, it.rust))
        .collect();
    assert!(
        wrong.is_empty(),
        "kernel/rnic_abi.h disagrees with abi/src:\n{}",
        wrong.join("\n")
    );
    eprintln!("{} sizes, offsets and constants agree", items.len());
}
