//! The `*_str` helpers: an enum value as the text rdma-core's libibverbs gives for it
//! (programs print these, and scripts look for them), "unknown" for any other value.

use std::ffi::{c_char, CStr};

use crate::abi::*;

/// The text of a node type.
pub fn node_type(t: ibv_node_type) -> &'static CStr {
    match t {
        IBV_NODE_CA => c"InfiniBand channel adapter",
        IBV_NODE_SWITCH => c"InfiniBand switch",
        IBV_NODE_ROUTER => c"InfiniBand router",
        IBV_NODE_RNIC => c"iWARP NIC",
        IBV_NODE_USNIC => c"usNIC",
        IBV_NODE_USNIC_UDP => c"usNIC UDP",
        IBV_NODE_UNSPECIFIED => c"unspecified",
        _ => c"unknown",
    }
}

/// The text of a port state.
pub fn port_state(s: ibv_port_state) -> &'static CStr {
    match s {
        IBV_PORT_NOP => c"no state change (NOP)",
        IBV_PORT_DOWN => c"down",
        IBV_PORT_INIT => c"init",
        IBV_PORT_ARMED => c"armed",
        IBV_PORT_ACTIVE => c"active",
        IBV_PORT_ACTIVE_DEFER => c"active defer",
        _ => c"unknown",
    }
}

/// The text of an asynchronous event type.
pub fn event_type(e: ibv_event_type) -> &'static CStr {
    match e {
        IBV_EVENT_CQ_ERR => c"CQ error",
        IBV_EVENT_QP_FATAL => c"local work queue catastrophic error",
        IBV_EVENT_QP_REQ_ERR => c"invalid request local work queue error",
        IBV_EVENT_QP_ACCESS_ERR => c"local access violation work queue error",
        IBV_EVENT_COMM_EST => c"communication established",
        IBV_EVENT_SQ_DRAINED => c"send queue drained",
        IBV_EVENT_PATH_MIG => c"path migrated",
        IBV_EVENT_PATH_MIG_ERR => c"path migration request error",
        IBV_EVENT_DEVICE_FATAL => c"local catastrophic error",
        IBV_EVENT_PORT_ACTIVE => c"port active",
        IBV_EVENT_PORT_ERR => c"port error",
        IBV_EVENT_LID_CHANGE => c"LID change",
        IBV_EVENT_PKEY_CHANGE => c"P_Key change",
        IBV_EVENT_SM_CHANGE => c"SM change",
        IBV_EVENT_SRQ_ERR => c"SRQ catastrophic error",
        IBV_EVENT_SRQ_LIMIT_REACHED => c"SRQ limit reached",
        IBV_EVENT_QP_LAST_WQE_REACHED => c"last WQE reached",
        IBV_EVENT_CLIENT_REREGISTER => c"client reregistration",
        IBV_EVENT_GID_CHANGE => c"GID table change",
        IBV_EVENT_WQ_FATAL => c"WQ fatal",
        _ => c"unknown",
    }
}

/// The text of a work-completion status.
pub fn wc_status(s: ibv_wc_status) -> &'static CStr {
    match s {
        IBV_WC_SUCCESS => c"success",
        IBV_WC_LOC_LEN_ERR => c"local length error",
        IBV_WC_LOC_QP_OP_ERR => c"local QP operation error",
        IBV_WC_LOC_EEC_OP_ERR => c"local EE context operation error",
        IBV_WC_LOC_PROT_ERR => c"local protection error",
        IBV_WC_WR_FLUSH_ERR => c"Work Request Flushed Error",
        IBV_WC_MW_BIND_ERR => c"memory management operation error",
        IBV_WC_BAD_RESP_ERR => c"bad response error",
        IBV_WC_LOC_ACCESS_ERR => c"local access error",
        IBV_WC_REM_INV_REQ_ERR => c"remote invalid request error",
        IBV_WC_REM_ACCESS_ERR => c"remote access error",
        IBV_WC_REM_OP_ERR => c"remote operation error",
        IBV_WC_RETRY_EXC_ERR => c"transport retry counter exceeded",
        IBV_WC_RNR_RETRY_EXC_ERR => c"RNR retry counter exceeded",
        IBV_WC_LOC_RDD_VIOL_ERR => c"local RDD violation error",
        IBV_WC_REM_INV_RD_REQ_ERR => c"remote invalid RD request",
        IBV_WC_REM_ABORT_ERR => c"aborted error",
        IBV_WC_INV_EECN_ERR => c"invalid EE context number",
        IBV_WC_INV_EEC_STATE_ERR => c"invalid EE context state",
        IBV_WC_FATAL_ERR => c"fatal error",
        IBV_WC_RESP_TIMEOUT_ERR => c"response timeout error",
        IBV_WC_GENERAL_ERR => c"general error",
        IBV_WC_TM_ERR => c"TM error",
        IBV_WC_TM_RNDV_INCOMPLETE => c"TM software rendezvous",
        _ => c"unknown",
    }
}

/// The text of a send opcode.
pub fn wr_opcode(op: ibv_wr_opcode) -> &'static CStr {
    match op {
        IBV_WR_RDMA_WRITE => c"rdma-write",
        IBV_WR_RDMA_WRITE_WITH_IMM => c"rdma-write-with-imm",
        IBV_WR_SEND => c"send",
        IBV_WR_SEND_WITH_IMM => c"send-with-imm",
        IBV_WR_RDMA_READ => c"rdma-read",
        IBV_WR_ATOMIC_CMP_AND_SWP => c"atomic-cmp-and-swp",
        IBV_WR_ATOMIC_FETCH_AND_ADD => c"atomic-fetch-and-add",
        IBV_WR_LOCAL_INV => c"local-inv",
        IBV_WR_BIND_MW => c"bind-mw",
        IBV_WR_SEND_WITH_INV => c"send-with-inv",
        IBV_WR_TSO => c"tso",
        IBV_WR_DRIVER1 => c"driver1",
        IBV_WR_FLUSH => c"flush",
        IBV_WR_ATOMIC_WRITE => c"atomic-write",
        _ => c"unknown",
    }
}

/// `ibv_node_type_str`.
pub(crate) extern "C" fn ibv_node_type_str(t: ibv_node_type) -> *const c_char {
    node_type(t).as_ptr()
}

/// `ibv_port_state_str`.
pub(crate) extern "C" fn ibv_port_state_str(s: ibv_port_state) -> *const c_char {
    port_state(s).as_ptr()
}

/// `ibv_event_type_str`.
pub(crate) extern "C" fn ibv_event_type_str(e: ibv_event_type) -> *const c_char {
    event_type(e).as_ptr()
}

/// `ibv_wc_status_str`.
pub(crate) extern "C" fn ibv_wc_status_str(s: ibv_wc_status) -> *const c_char {
    wc_status(s).as_ptr()
}

/// `ibv_wr_opcode_str`.
pub(crate) extern "C" fn ibv_wr_opcode_str(op: ibv_wr_opcode) -> *const c_char {
    wr_opcode(op).as_ptr()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_values_have_their_text_and_others_are_unknown() {
        assert_eq!(node_type(IBV_NODE_CA), c"InfiniBand channel adapter");
        assert_eq!(node_type(-1), c"unknown");
        assert_eq!(port_state(IBV_PORT_ACTIVE), c"active");
        assert_eq!(port_state(6), c"unknown");
        assert_eq!(event_type(IBV_EVENT_WQ_FATAL), c"WQ fatal");
        assert_eq!(event_type(20), c"unknown");
        assert_eq!(
            wc_status(IBV_WC_WR_FLUSH_ERR),
            c"Work Request Flushed Error"
        );
        assert_eq!(
            wc_status(IBV_WC_RETRY_EXC_ERR),
            c"transport retry counter exceeded"
        );
        assert_eq!(wc_status(24), c"unknown");
        assert_eq!(wr_opcode(IBV_WR_ATOMIC_WRITE), c"atomic-write");
        assert_eq!(wr_opcode(12), c"unknown");
    }

    #[test]
    fn every_status_below_the_last_has_a_text() {
        for s in IBV_WC_SUCCESS..=IBV_WC_TM_RNDV_INCOMPLETE {
            assert_ne!(wc_status(s), c"unknown", "status {s}");
        }
        for e in IBV_EVENT_CQ_ERR..=IBV_EVENT_WQ_FATAL {
            assert_ne!(event_type(e), c"unknown", "event {e}");
        }
    }
}
