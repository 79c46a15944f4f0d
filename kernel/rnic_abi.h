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

/* abi/src/lib.rs */
#define RNIC_ABI_MAJOR			1
#define RNIC_ABI_MINOR			7
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

#define RNIC_MAGIC			0x43494e52	/* "RNIC" */
#define RNIC_FUNCTION_IS_VF		0x1

#define RNIC_CAP_CMDQ			0x1ULL
#define RNIC_CAP_DOORBELL_NOTIFY	0x2ULL
#define RNIC_CAP_MSIX			0x4ULL
#define RNIC_CAP_FUNCTION_RESET		0x8ULL
#define RNIC_CAP_ETH			0x100000ULL

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
#define RNIC_CMD_CREATE_ETH_QUEUE	0x0180
#define RNIC_CMD_DESTROY_ETH_QUEUE	0x0181
#define RNIC_CMD_SET_ETH		0x0182
#define RNIC_CMD_QUERY_ETH		0x0183
#define RNIC_CMD_QUERY_ETH_QUEUE	0x0184

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
static_assert(sizeof(struct rnic_eth_desc) == 16);
static_assert(sizeof(struct rnic_create_eth_queue_req) == 32);
static_assert(offsetof(struct rnic_create_eth_queue_req, ring) == 16);
static_assert(sizeof(struct rnic_create_eth_queue_resp) == 16);
static_assert(sizeof(struct rnic_eth_queue_req) == 8);
static_assert(sizeof(struct rnic_set_eth_req) == 16);
static_assert(sizeof(struct rnic_mac_entry) == 8);
static_assert(sizeof(struct rnic_eth_counters) == 128);
static_assert(sizeof(struct rnic_query_eth_resp) == 24 + 128);
static_assert(sizeof(struct rnic_eth_queue_stats) == 40);

#endif /* RNIC_ABI_H */
