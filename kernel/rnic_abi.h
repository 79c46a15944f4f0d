/* SPDX-License-Identifier: GPL-2.0 */
/*
 * rnic hardware interface: the registers, doorbells, commands and descriptors
 * the driver uses, as the ABI crate (abi/src) and docs/hardware-interface.md
 * define them. Every multi-byte field is little-endian. This header is also
 * compiled in userspace by the test that compares it with the ABI crate
 * (tests/tests/kernel_abi.rs), so it only includes what both sides have.
 */
#ifndef RNIC_ABI_H
#define RNIC_ABI_H

#include <linux/types.h>
#ifdef __KERNEL__
#include <linux/build_bug.h>
#include <linux/stddef.h>
#else
#include <assert.h>
#include <stddef.h>
#endif

#include "rnic-abi-user.h"	/* abi/src/uverbs.rs */

/* abi/src/lib.rs */
#define RNIC_ABI_MAJOR			1
#define RNIC_ABI_MINOR			11
#define RNIC_PAGE_SIZE			4096

/* abi/src/pci.rs */
#define RNIC_VENDOR_ID			0xf1c0
#define RNIC_PF_DEVICE_ID		0x0001
#define RNIC_VF_DEVICE_ID		0x0002
#define RNIC_REG_BAR			0
#define RNIC_DOORBELL_BAR		2
#define RNIC_MSIX_VECTORS		16

/* abi/src/regs.rs: BAR0, 32-bit registers */
#define RNIC_REG_MAGIC			0x000
#define RNIC_REG_ABI_VERSION		0x004
#define RNIC_REG_FUNCTION_INFO		0x008
#define RNIC_REG_CAPS_LO		0x010
#define RNIC_REG_CAPS_HI		0x014
#define RNIC_REG_DEVICE_STATUS		0x018
#define RNIC_REG_DEVICE_CONTROL		0x01c
#define RNIC_REG_CMDQ_DESC_LO		0x020
#define RNIC_REG_CMDQ_DESC_HI		0x024
#define RNIC_REG_CMDQ_AVAIL_LO		0x028
#define RNIC_REG_CMDQ_AVAIL_HI		0x02c
#define RNIC_REG_CMDQ_USED_LO		0x030
#define RNIC_REG_CMDQ_USED_HI		0x034
#define RNIC_REG_CMDQ_SIZE		0x038
#define RNIC_REG_CMDQ_MSIX_VECTOR	0x03c
#define RNIC_REG_CMDQ_CONTROL		0x040
#define RNIC_REG_CMDQ_MAX_SIZE		0x044
#define RNIC_REG_DOORBELL_KICK		0x048
#define RNIC_REG_DOORBELL_PAGES		0x04c
#define RNIC_REG_MSIX_VECTORS		0x050
#define RNIC_REG_ERROR_CODE		0x054
#define RNIC_REG_USER_KICK_PAGE		0x1000
#define RNIC_REG_USER_KICK		0x1000

#define RNIC_MAGIC			0x43494e52	/* "RNIC" */
#define RNIC_FUNCTION_IS_VF		0x1

#define RNIC_CAP_CMDQ			0x1ULL
#define RNIC_CAP_DOORBELL_NOTIFY	0x2ULL
#define RNIC_CAP_MSIX			0x4ULL
#define RNIC_CAP_FUNCTION_RESET		0x8ULL
#define RNIC_CAP_RDMA_RC		0x10ULL
#define RNIC_CAP_SEND_VARIANTS		0x100ULL
#define RNIC_CAP_SRQ			0x200ULL
#define RNIC_CAP_UD			0x400ULL
#define RNIC_CAP_PAGE_TABLES		0x20000ULL
#define RNIC_CAP_UC			0x40000ULL
#define RNIC_CAP_MW			0x80000ULL
#define RNIC_CAP_ETH			0x100000ULL
#define RNIC_CAP_FAST_REG		0x200000ULL
#define RNIC_CAP_GSI			0x400000ULL
#define RNIC_CAP_USER_KICK		0x800000ULL
#define RNIC_CAP_GID_TABLE		0x1000000ULL
#define RNIC_CAP_RESIZE_CQ		0x2000000ULL
#define RNIC_CAP_RESIZE_SRQ		0x4000000ULL
#define RNIC_CAP_ATOMIC_WRITE		0x8000000ULL
#define RNIC_CAP_FLUSH			0x10000000ULL
#define RNIC_CAP_MULTICAST		0x20000000ULL

#define RNIC_STATUS_READY		0x01
#define RNIC_STATUS_CMDQ_RUNNING	0x02
#define RNIC_STATUS_FATAL		0x04
#define RNIC_STATUS_DISABLED		0x08
#define RNIC_STATUS_LINK_DOWN		0x40

#define RNIC_CONTROL_RESET		0x1
#define RNIC_CMDQ_ENABLE		0x1
#define RNIC_NO_VECTOR			0xffff

/* abi/src/doorbell.rs: BAR2, 16 pages of 4 KiB */
#define RNIC_DB_NOTIFY_REQUEST		0x000
#define RNIC_DB_CMDQ_DOORBELL		0x040
#define RNIC_DB_RESET_COUNT		0x048
#define RNIC_DB_RUNG_BITMAP		0x080
#define RNIC_DB_SLOTS_BASE		0x100
#define RNIC_DB_SLOT_SIZE		8
#define RNIC_DB_SLOTS			480
#define RNIC_DB_PAGES			16

static inline __u32 rnic_db_slot_offset(__u32 page, __u32 slot)
{
	return page * RNIC_PAGE_SIZE + RNIC_DB_SLOTS_BASE +
	       slot * RNIC_DB_SLOT_SIZE;
}

/* abi/src/cmd.rs: the command queue, a virtio split ring */
#define RNIC_CMDQ_MAX_SIZE		256
#define RNIC_CMD_MAX_LEN		65536
#define RNIC_VRING_DESC_F_NEXT		0x1
#define RNIC_VRING_DESC_F_WRITE		0x2
#define RNIC_VRING_AVAIL_F_NO_INTERRUPT	0x1

struct rnic_vring_desc {
	__le64 addr;
	__le32 len;
	__le16 flags;
	__le16 next;
};

/* Opcodes (abi/src/cmd.rs Opcode) */
#define RNIC_CMD_NOP			0x0000
#define RNIC_CMD_QUERY_DEVICE		0x0001
#define RNIC_CMD_CREATE_EQ		0x0100
#define RNIC_CMD_DESTROY_EQ		0x0101
#define RNIC_CMD_ALLOC_PD		0x0110
#define RNIC_CMD_DEALLOC_PD		0x0111
#define RNIC_CMD_REG_MR			0x0120
#define RNIC_CMD_DEREG_MR		0x0121
#define RNIC_CMD_ALLOC_MW		0x0124
#define RNIC_CMD_DEALLOC_MW		0x0125
#define RNIC_CMD_REG_DMA_MR		0x0126
#define RNIC_CMD_ALLOC_FAST_REG_MR	0x0127
#define RNIC_CMD_CREATE_CQ		0x0130
#define RNIC_CMD_DESTROY_CQ		0x0131
#define RNIC_CMD_RESIZE_CQ		0x0132
#define RNIC_CMD_CREATE_QP		0x0140
#define RNIC_CMD_MODIFY_QP		0x0141
#define RNIC_CMD_QUERY_QP		0x0142
#define RNIC_CMD_DESTROY_QP		0x0143
#define RNIC_CMD_ATTACH_MCAST		0x0146
#define RNIC_CMD_DETACH_MCAST		0x0147
#define RNIC_CMD_CREATE_SRQ		0x0150
#define RNIC_CMD_MODIFY_SRQ		0x0151
#define RNIC_CMD_QUERY_SRQ		0x0152
#define RNIC_CMD_DESTROY_SRQ		0x0153
#define RNIC_CMD_RESIZE_SRQ		0x0154
#define RNIC_CMD_CREATE_ETH_QUEUE	0x0180
#define RNIC_CMD_DESTROY_ETH_QUEUE	0x0181
#define RNIC_CMD_SET_ETH		0x0182
#define RNIC_CMD_QUERY_ETH		0x0183
#define RNIC_CMD_QUERY_ETH_QUEUE	0x0184
#define RNIC_CMD_SET_GID		0x0185
#define RNIC_CMD_QUERY_GID		0x0186

/* Statuses (abi/src/cmd.rs Status) */
#define RNIC_ST_OK			0
#define RNIC_ST_BAD_OPCODE		1
#define RNIC_ST_BAD_PARAM		2
#define RNIC_ST_MALFORMED		3
#define RNIC_ST_DMA_ERROR		4
#define RNIC_ST_NO_RESOURCES		5
#define RNIC_ST_NOT_PERMITTED		6
#define RNIC_ST_INTERNAL		7
#define RNIC_ST_BUSY			8
#define RNIC_ST_NOT_FOUND		9
#define RNIC_ST_BAD_STATE		10

struct rnic_cmd_header {
	__le16 opcode;
	__le16 reserved;
	__le32 token;
};

struct rnic_resp_header {
	__le16 status;
	__le16 opcode;
	__le32 token;
	__le32 syndrome;
	__le32 reserved;
};

#define RNIC_FUNCTION_KIND_PF		0
#define RNIC_FUNCTION_KIND_VF		1

struct rnic_limits {
	__le32 max_qp;
	__le32 max_qp_wr;
	__le32 max_sge;
	__le32 max_cq;
	__le32 max_cqe;
	__le32 max_mr;
	__le32 max_pd;
	__le32 max_qp_rd_atom;
	__le32 max_qp_init_rd_atom;
	__le32 max_inline_data;
	__le64 max_mr_size;
	__le32 max_mr_pages;
	__le32 doorbell_pages;
	__le32 msix_vectors;
	__le32 cmdq_max_size;
};

struct rnic_query_device_resp {
	__le16 vendor_id;
	__le16 device_id;
	__le16 abi_major;
	__le16 abi_minor;
	__le32 fw_version;
	__u8 function_kind;
	__u8 vf_index;
	__le16 total_vfs;
	__le64 caps;
	__u8 mac[6];
	__le16 reserved0;
	__u8 gid[16];
	struct rnic_limits limits;
};

/* abi/src/verbs.rs */
#define RNIC_PAGE_SHIFT			12
#define RNIC_MAX_PAGE_LIST		0x100000
#define RNIC_PAGE_TABLE_ENTRIES		512
#define RNIC_MAX_PAGE_LEVELS		3

struct rnic_page_list {
	__le64 addr;
	__le32 count;
	__u8 page_shift;
	__u8 levels;
	__le16 reserved;
};

struct rnic_doorbell_slot {
	__le32 page;
	__le32 slot;
};

/* Access flags */
#define RNIC_ACCESS_LOCAL_WRITE		0x1
#define RNIC_ACCESS_REMOTE_WRITE	0x2
#define RNIC_ACCESS_REMOTE_READ		0x4
#define RNIC_ACCESS_REMOTE_ATOMIC	0x8
#define RNIC_ACCESS_MW_BIND		0x10
#define RNIC_ACCESS_FLUSH_GLOBAL	0x100
#define RNIC_ACCESS_FLUSH_PERSISTENT	0x200

/* QP types (verbs.rs, ud.rs) */
#define RNIC_QPT_GSI			1
#define RNIC_QPT_RC			2
#define RNIC_QPT_UC			3
#define RNIC_QPT_UD			4
#define RNIC_GSI_QPN			1
#define RNIC_GSI_QKEY			0x80010000U
#define RNIC_GRH_LEN			40
#define RNIC_UD_MAX_PAYLOAD		4096
#define RNIC_QKEY_USE_OWN		0x80000000U
#define RNIC_FIRST_QPN			0x11

/* QP states, as ibverbs */
#define RNIC_QPS_RESET			0
#define RNIC_QPS_INIT			1
#define RNIC_QPS_RTR			2
#define RNIC_QPS_RTS			3
#define RNIC_QPS_SQD			4
#define RNIC_QPS_SQE			5
#define RNIC_QPS_ERR			6

/* ModifyQpReq.attr_mask (verbs.rs attr) */
#define RNIC_ATTR_STATE			0x1
#define RNIC_ATTR_CUR_STATE		0x2
#define RNIC_ATTR_EN_SQD_ASYNC_NOTIFY	0x4
#define RNIC_ATTR_ACCESS_FLAGS		0x8
#define RNIC_ATTR_PKEY_INDEX		0x10
#define RNIC_ATTR_PORT			0x20
#define RNIC_ATTR_QKEY			0x40
#define RNIC_ATTR_AV			0x80
#define RNIC_ATTR_PATH_MTU		0x100
#define RNIC_ATTR_TIMEOUT		0x200
#define RNIC_ATTR_RETRY_CNT		0x400
#define RNIC_ATTR_RNR_RETRY		0x800
#define RNIC_ATTR_RQ_PSN		0x1000
#define RNIC_ATTR_MAX_QP_RD_ATOMIC	0x2000
#define RNIC_ATTR_MIN_RNR_TIMER		0x8000
#define RNIC_ATTR_SQ_PSN		0x10000
#define RNIC_ATTR_MAX_DEST_RD_ATOMIC	0x20000
#define RNIC_ATTR_DEST_QPN		0x100000

/* Send WQE opcodes (verbs.rs wr) */
#define RNIC_WR_RDMA_WRITE		0
#define RNIC_WR_RDMA_WRITE_WITH_IMM	1
#define RNIC_WR_SEND			2
#define RNIC_WR_SEND_WITH_IMM		3
#define RNIC_WR_RDMA_READ		4
#define RNIC_WR_ATOMIC_CMP_AND_SWP	5
#define RNIC_WR_ATOMIC_FETCH_AND_ADD	6
#define RNIC_WR_LOCAL_INV		7
#define RNIC_WR_BIND_MW			8
#define RNIC_WR_SEND_WITH_INV		9
#define RNIC_WR_REG_MR			10

/* Send WQE flags */
#define RNIC_SEND_FENCE			0x1
#define RNIC_SEND_SIGNALED		0x2
#define RNIC_SEND_SOLICITED		0x4
#define RNIC_SEND_INLINE		0x8

/* CQE opcodes (verbs.rs wc) */
#define RNIC_WC_SEND			0
#define RNIC_WC_RDMA_WRITE		1
#define RNIC_WC_RDMA_READ		2
#define RNIC_WC_COMP_SWAP		3
#define RNIC_WC_FETCH_ADD		4
#define RNIC_WC_BIND_MW			5
#define RNIC_WC_LOCAL_INV		6
#define RNIC_WC_REG_MR			8
#define RNIC_WC_ATOMIC_WRITE		9
#define RNIC_WC_FLUSH			14
#define RNIC_WC_RECV			128
#define RNIC_WC_RECV_RDMA_WITH_IMM	129

/* CQE flags */
#define RNIC_WC_F_GRH			0x1
#define RNIC_WC_F_WITH_IMM		0x2
#define RNIC_WC_F_WITH_INV		0x8
#define RNIC_WC_F_SOLICITED		0x80

/* Completion statuses: as ibverbs, 0 (success) to 21 (general error) */
#define RNIC_WC_SUCCESS			0
#define RNIC_WC_WR_FLUSH_ERR		5
#define RNIC_WC_GENERAL_ERR		21

/* EQE types (verbs.rs event) */
#define RNIC_EV_CQ_ERR			0
#define RNIC_EV_QP_FATAL		1
#define RNIC_EV_QP_REQ_ERR		2
#define RNIC_EV_QP_ACCESS_ERR		3
#define RNIC_EV_COMM_EST		4
#define RNIC_EV_SQ_DRAINED		5
#define RNIC_EV_SRQ_LIMIT_REACHED	15
#define RNIC_EV_COMPLETION		0x80

/* abi/src/fast_reg.rs (ABI 1.8) */
#define RNIC_MAX_FAST_REG_PAGES		512

struct rnic_create_eq_req {
	struct rnic_page_list ring;
	__le32 entries;
	__le32 vector;
	__le32 doorbell_page;
	__le32 reserved;
};

struct rnic_create_eq_resp {
	__le32 eqn;
	__le32 reserved;
	struct rnic_doorbell_slot doorbell;
};

struct rnic_eqe {
	__le32 object;
	__le32 data;
	__u8 event_type;
	__u8 reserved[6];
	__u8 owner;
};

struct rnic_object_req {
	__le32 handle;
	__le32 reserved;
};

struct rnic_object_resp {
	__le32 handle;
	__le32 reserved;
};

struct rnic_reg_mr_resp {
	__le32 lkey;
	__le32 rkey;
};

struct rnic_reg_mr_req {
	__le32 pdn;
	__le32 access;
	__le64 iova;
	__le64 length;
	struct rnic_page_list pages;
};

struct rnic_reg_dma_mr_req {
	__le32 pdn;
	__le32 access;
};

struct rnic_alloc_fast_reg_mr_req {
	__le32 pdn;
	__le32 max_pages;
};

/* abi/src/mw.rs (ABI 1.6): memory windows */
#define RNIC_MW_KEY_BIT			0x40000000
#define RNIC_MAX_MW_INDEX		0x400000
#define RNIC_MW_TYPE_1			1
#define RNIC_MW_TYPE_2			2

struct rnic_alloc_mw_req {
	__le32 pdn;
	__u8 mw_type;
	__u8 reserved[3];
};

struct rnic_alloc_mw_resp {
	__le32 rkey;
	__le32 reserved;
};

struct rnic_create_cq_req {
	struct rnic_page_list ring;
	__le32 entries;
	__le32 doorbell_page;
};

struct rnic_resize_cq_req {
	struct rnic_page_list ring;
	__le32 entries;
	__le32 cqn;
};

struct rnic_create_cq_resp {
	__le32 cqn;
	__le32 reserved;
	struct rnic_doorbell_slot doorbell;
};

/* imm_or_inv: immediate data as on the wire (big-endian), or a key. */
struct rnic_cqe {
	__le64 wr_id;
	__le32 byte_len;
	__le32 imm_or_inv;
	__le32 qp_num;
	__le32 src_qp;
	__u8 opcode;
	__u8 status;
	__u8 wc_flags;
	__u8 owner;
	__le32 vendor_err;
};

struct rnic_create_qp_req {
	__le32 pdn;
	__le32 send_cqn;
	__le32 recv_cqn;
	__le32 sq_entries;
	__le32 rq_entries;
	__le32 max_send_sge;
	__le32 max_recv_sge;
	__le32 max_inline_data;
	__le32 doorbell_page;
	__u8 qp_type;
	__u8 sq_sig_all;
	__le16 srqn;
	struct rnic_page_list sq;
	struct rnic_page_list rq;
};

struct rnic_create_qp_resp {
	__le32 qpn;
	__le32 reserved;
	struct rnic_doorbell_slot sq_doorbell;
	struct rnic_doorbell_slot rq_doorbell;
};

struct rnic_qp_attr {
	__u8 qp_state;
	__u8 cur_qp_state;
	__u8 path_mtu;
	__u8 timeout;
	__u8 retry_cnt;
	__u8 rnr_retry;
	__u8 min_rnr_timer;
	__u8 max_rd_atomic;
	__u8 max_dest_rd_atomic;
	__u8 port_num;
	__u8 sgid_index;
	__u8 hop_limit;
	__u8 traffic_class;
	__u8 reserved0[1];
	__le16 pkey_index;
	__le32 qp_access_flags;
	__le32 dest_qp_num;
	__le32 rq_psn;
	__le32 sq_psn;
	__le32 flow_label;
	__u8 dgid[16];
};

struct rnic_modify_qp_req {
	__le32 qpn;
	__le32 attr_mask;
	struct rnic_qp_attr attr;
};

/* Follows a rnic_modify_qp_req whose mask has RNIC_ATTR_QKEY (ud.rs). */
struct rnic_modify_qp_qkey {
	__le32 qkey;
	__le32 reserved;
};

/* abi/src/srq.rs (ABI 1.3): shared receive queues */
#define RNIC_MAX_SRQN			0xffff
#define RNIC_SRQ_ATTR_MAX_WR		0x1
#define RNIC_SRQ_ATTR_LIMIT		0x2

struct rnic_create_srq_req {
	__le32 pdn;
	__le32 entries;
	__le32 max_sge;
	__le32 srq_limit;
	__le32 doorbell_page;
	__le32 reserved;
	struct rnic_page_list ring;
};

struct rnic_create_srq_resp {
	__le32 srqn;
	__le32 reserved;
	struct rnic_doorbell_slot doorbell;
};

struct rnic_modify_srq_req {
	__le32 srqn;
	__le32 attr_mask;
	__le32 max_wr;
	__le32 srq_limit;
};

/* RESIZE_SRQ (ABI 1.11, RNIC_CAP_RESIZE_SRQ): the new ring, same stride. */
struct rnic_resize_srq_req {
	struct rnic_page_list ring;
	__le32 entries;
	__le32 srqn;
};

struct rnic_query_srq_resp {
	__le32 max_wr;
	__le32 max_sge;
	__le32 srq_limit;
	__le32 consumed;
};

struct rnic_query_qp_resp {
	struct rnic_qp_attr attr;
	__le32 sq_consumed;
	__le32 rq_consumed;
};

struct rnic_send_wqe {
	__le64 wr_id;
	__u8 opcode;
	__u8 flags;
	__u8 num_sge;
	__u8 session_group;
	__le32 imm_or_inv;
	__le64 remote_addr;
	__le32 rkey;
	__le32 inline_len;
	__le64 compare_add;
	__le64 swap;
	__u8 reserved1[16];
};

struct rnic_ud_send_wqe {
	__le64 wr_id;
	__u8 opcode;
	__u8 flags;
	__u8 num_sge;
	__u8 reserved0;
	__le32 imm;
	__le32 remote_qkey;
	__le32 remote_qpn;
	__le32 reserved1;
	__le32 inline_len;
	__u8 dgid[16];
	__u8 hop_limit;
	__u8 traffic_class;
	__u8 sgid_index;
	__u8 reserved2[13];
};

struct rnic_fast_reg_wqe {
	__le64 wr_id;
	__u8 opcode;
	__u8 flags;
	__u8 num_sge;
	__u8 page_shift;
	__le32 key;
	__le64 iova;
	__le32 access;
	__le32 page_count;
	__le64 page_list;
	__le64 length;
	__u8 reserved[16];
};

struct rnic_recv_wqe {
	__le64 wr_id;
	__le32 num_sge;
	__le32 reserved;
};

struct rnic_sge {
	__le64 addr;
	__le32 length;
	__le32 lkey;
};

static inline __u32 rnic_pow2_roundup(__u32 v)
{
	__u32 p = 1;

	while (p < v && p)
		p <<= 1;
	return p;
}

/* Bytes between send WQEs (verbs.rs sq_stride). */
static inline __u32 rnic_sq_stride(__u32 max_send_sge, __u32 max_inline_data)
{
	__u32 sges = max_send_sge * 16;
	__u32 inl = (max_inline_data + 15) / 16 * 16;

	return rnic_pow2_roundup(64 + (sges > inl ? sges : inl));
}

/* Bytes between receive WQEs (verbs.rs rq_stride). */
static inline __u32 rnic_rq_stride(__u32 max_recv_sge)
{
	return rnic_pow2_roundup(16 + max_recv_sge * 16);
}

/* The owner bit the device writes into entry @index of a ring of @entries. */
static inline __u8 rnic_owner_phase(__u32 index, __u32 entries)
{
	return ((index / entries) & 1) ^ 1;
}

/* The arm word of a CQ for arm sequence @seq (31 bits). */
static inline __u32 rnic_cq_arm_word(__u32 seq, int solicited_only)
{
	return seq << 1 | (solicited_only ? 1 : 0);
}

/* abi/src/eth.rs: Ethernet queues (ABI 1.7) */
#define RNIC_ETH_KIND_TX		0
#define RNIC_ETH_KIND_RX		1
#define RNIC_ETH_MAX_TX_QUEUES		4
#define RNIC_ETH_MAX_RX_QUEUES		1
#define RNIC_ETH_MIN_ENTRIES		8
#define RNIC_ETH_MAX_ENTRIES		4096
#define RNIC_ETH_MAX_MODERATION_USECS	100000
#define RNIC_ETH_MIN_MTU		68
#define RNIC_ETH_MAX_MTU		9000
#define RNIC_ETH_DEFAULT_MTU		1500
#define RNIC_ETH_HLEN			14
#define RNIC_ETH_VLAN_HLEN		4
#define RNIC_ETH_MIN_FRAME		RNIC_ETH_HLEN
#define RNIC_ETH_TX_MAX_DESCS		18
#define RNIC_ETH_TX_MORE		0x1
#define RNIC_ETH_DESC_DONE		0x1
#define RNIC_ETH_DESC_ERROR_SHIFT	8
#define RNIC_ETH_RX_ENABLE		0x1
#define RNIC_ETH_RX_PROMISC		0x2
#define RNIC_ETH_RX_ALLMULTI		0x4
#define RNIC_ETH_MAX_MULTICAST		64
#define RNIC_ETH_LINK_UP		0x1
#define RNIC_ETH_TRUSTED		0x2
#define RNIC_ETH_SPOOF_CHECKED		0x4

/* Errors in bits 15:8 of a send descriptor's status (abi eth::desc_error) */
#define RNIC_ETH_DESC_ERR_NONE		0
#define RNIC_ETH_DESC_ERR_MALFORMED	1
#define RNIC_ETH_DESC_ERR_DMA		2
#define RNIC_ETH_DESC_ERR_SPOOFED	3
#define RNIC_ETH_DESC_ERR_LINK_DOWN	4

/* The longest frame a function with MTU @mtu sends or receives. */
static inline __u32 rnic_eth_max_frame(__u32 mtu)
{
	return mtu + RNIC_ETH_HLEN + RNIC_ETH_VLAN_HLEN;
}

/* The arm word, at +4 of an Ethernet queue's doorbell slot. */
static inline __u32 rnic_eth_arm_word(__u16 sequence, __u32 seen)
{
	return (__u32)sequence << 16 | (seen & 0xffff);
}

struct rnic_eth_desc {
	__le64 addr;
	__le32 len;
	__le16 flags;
	__le16 status;
};

struct rnic_create_eth_queue_req {
	__u8 kind;
	__u8 reserved0;
	__le16 msix_vector;
	__le32 entries;
	__le32 doorbell_page;
	__le32 moderation_usecs;
	struct rnic_page_list ring;
};

struct rnic_create_eth_queue_resp {
	__le32 queue;
	__le32 reserved;
	struct rnic_doorbell_slot doorbell;
};

struct rnic_eth_queue_req {
	__u8 kind;
	__u8 reserved0[3];
	__le32 queue;
};

struct rnic_set_eth_req {
	__le32 mtu;
	__le32 rx_mode;
	__le16 event_vector;
	__le16 reserved;
	__le32 mc_count;
};

/* The GID table (abi/src/gid.rs, ABI 1.10) */
#define RNIC_GID_TABLE_LEN		16
#define RNIC_GID_VALID			0x1

struct rnic_set_gid_req {
	__le32 index;
	__le32 flags;
	__le64 reserved;
	__u8 gid[16];
};

/* UD multicast (abi/src/mcast.rs, ABI 1.11, RNIC_CAP_MULTICAST) */
#define RNIC_MCAST_MAX_GROUPS		64
#define RNIC_MCAST_MAX_QPS_PER_GROUP	16

/* ATTACH_MCAST and DETACH_MCAST request. */
struct rnic_mcast_req {
	__le32 qpn;
	__le32 reserved;
	__u8 gid[16];
};

struct rnic_mac_entry {
	__u8 mac[6];
	__le16 reserved;
};

struct rnic_eth_counters {
	__le64 tx_frames;
	__le64 tx_bytes;
	__le64 tx_malformed;
	__le64 tx_dma_errors;
	__le64 tx_spoofed;
	__le64 tx_link_down;
	__le64 rx_frames;
	__le64 rx_bytes;
	__le64 rx_no_buffer;
	__le64 rx_too_long;
	__le64 rx_filtered;
	__le64 rx_disabled;
	__le64 rx_dma_errors;
	__le64 rx_link_down;
	__le64 ring_errors;
	__le64 interrupts;
};

#define RNIC_ETH_COUNTERS	(sizeof(struct rnic_eth_counters) / sizeof(__le64))

struct rnic_query_eth_resp {
	__u8 mac[6];
	__le16 reserved;
	__le32 flags;
	__le32 mtu;
	__le32 rx_mode;
	__le32 max_mtu;
	struct rnic_eth_counters counters;
};

struct rnic_eth_queue_stats {
	__le64 frames;
	__le64 bytes;
	__le64 errors;
	__le64 interrupts;
	__le32 completed;
	__le32 posted;
};

static_assert(sizeof(struct rnic_vring_desc) == 16);
static_assert(sizeof(struct rnic_cmd_header) == 8);
static_assert(sizeof(struct rnic_resp_header) == 16);
static_assert(sizeof(struct rnic_limits) == 64);
static_assert(sizeof(struct rnic_query_device_resp) == 112);
static_assert(offsetof(struct rnic_query_device_resp, caps) == 16);
static_assert(offsetof(struct rnic_query_device_resp, mac) == 24);
static_assert(offsetof(struct rnic_query_device_resp, gid) == 32);
static_assert(sizeof(struct rnic_page_list) == 16);
static_assert(sizeof(struct rnic_doorbell_slot) == 8);
static_assert(sizeof(struct rnic_create_eq_req) == 32);
static_assert(sizeof(struct rnic_create_eq_resp) == 16);
static_assert(sizeof(struct rnic_eqe) == 16);
static_assert(sizeof(struct rnic_object_req) == 8);
static_assert(sizeof(struct rnic_reg_mr_resp) == 8);
static_assert(sizeof(struct rnic_reg_mr_req) == 40);
static_assert(sizeof(struct rnic_reg_dma_mr_req) == 8);
static_assert(sizeof(struct rnic_alloc_fast_reg_mr_req) == 8);
static_assert(sizeof(struct rnic_alloc_mw_req) == 8);
static_assert(sizeof(struct rnic_alloc_mw_resp) == 8);
static_assert(sizeof(struct rnic_create_cq_req) == 24);
static_assert(sizeof(struct rnic_create_cq_resp) == 16);
static_assert(sizeof(struct rnic_cqe) == 32);
static_assert(offsetof(struct rnic_cqe, owner) == 27);
static_assert(sizeof(struct rnic_create_qp_req) == 72);
static_assert(offsetof(struct rnic_create_qp_req, sq) == 40);
static_assert(sizeof(struct rnic_create_qp_resp) == 24);
static_assert(sizeof(struct rnic_qp_attr) == 52);
static_assert(offsetof(struct rnic_qp_attr, dgid) == 36);
static_assert(sizeof(struct rnic_modify_qp_req) == 60);
static_assert(sizeof(struct rnic_modify_qp_qkey) == 8);
static_assert(sizeof(struct rnic_query_qp_resp) == 60);
static_assert(sizeof(struct rnic_send_wqe) == 64);
static_assert(sizeof(struct rnic_ud_send_wqe) == 64);
static_assert(offsetof(struct rnic_ud_send_wqe, dgid) == 32);
static_assert(sizeof(struct rnic_fast_reg_wqe) == 64);
static_assert(offsetof(struct rnic_fast_reg_wqe, page_list) == 32);
static_assert(sizeof(struct rnic_recv_wqe) == 16);
static_assert(sizeof(struct rnic_sge) == 16);
static_assert(sizeof(struct rnic_eth_desc) == 16);
static_assert(sizeof(struct rnic_create_eth_queue_req) == 32);
static_assert(offsetof(struct rnic_create_eth_queue_req, ring) == 16);
static_assert(sizeof(struct rnic_create_eth_queue_resp) == 16);
static_assert(sizeof(struct rnic_eth_queue_req) == 8);
static_assert(sizeof(struct rnic_set_eth_req) == 16);
static_assert(sizeof(struct rnic_set_gid_req) == 32);
static_assert(sizeof(struct rnic_mcast_req) == 24);
static_assert(sizeof(struct rnic_resize_cq_req) == 24);
static_assert(sizeof(struct rnic_mac_entry) == 8);
static_assert(sizeof(struct rnic_eth_counters) == 128);
static_assert(sizeof(struct rnic_query_eth_resp) == 24 + 128);
static_assert(sizeof(struct rnic_eth_queue_stats) == 40);
static_assert(sizeof(struct rnic_uverbs_alloc_ucontext_resp) == 32);
static_assert(sizeof(struct rnic_uverbs_alloc_pd_resp) == 8);
static_assert(sizeof(struct rnic_uverbs_create_cq_req) == 16);
static_assert(sizeof(struct rnic_uverbs_create_cq_resp) == 16);
static_assert(sizeof(struct rnic_uverbs_create_qp_req) == 24);
static_assert(sizeof(struct rnic_uverbs_create_qp_resp) == 24);
static_assert(sizeof(struct rnic_uverbs_create_srq_req) == 16);
static_assert(sizeof(struct rnic_uverbs_create_srq_resp) == 16);
static_assert(sizeof(struct rnic_create_srq_req) == 40);
static_assert(offsetof(struct rnic_create_srq_req, ring) == 24);
static_assert(sizeof(struct rnic_create_srq_resp) == 16);
static_assert(sizeof(struct rnic_modify_srq_req) == 16);
static_assert(sizeof(struct rnic_resize_srq_req) == 24);
static_assert(sizeof(struct rnic_uverbs_resize_srq_req) == 16);
static_assert(sizeof(struct rnic_query_srq_resp) == 16);

#endif /* RNIC_ABI_H */
