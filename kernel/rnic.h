/* SPDX-License-Identifier: GPL-2.0 */
/*
 * rnic: the contract between the driver's files. rnic_main.c owns the PCI
 * function (BARs, MSI-X, reset), rnic_cmdq.c the command queue,
 * rnic_netdev.c the Ethernet function, rnic_ethtool.c its ethtool view,
 * rnic_ib*.c the RDMA device (their own contract is rnic_ib.h).
 */
#ifndef RNIC_H
#define RNIC_H

#include <linux/completion.h>
#include <linux/interrupt.h>
#include <linux/io.h>
#include <linux/mutex.h>
#include <linux/netdevice.h>
#include <linux/pci.h>
#include <linux/u64_stats_sync.h>
#include <linux/workqueue.h>

#include "rnic_abi.h"

#define RNIC_DRV_NAME		"rnic"
/* The driver's version: the ABI level it implements. */
#define RNIC_DRV_VERSION	"1.11"

/* MSI-X vectors the driver uses. */
enum rnic_vector {
	RNIC_VEC_CMDQ,		/* command completions */
	RNIC_VEC_EVENT,		/* Ethernet link and MAC changes */
	RNIC_VEC_QUEUES,	/* Ethernet send and receive completions */
	RNIC_VEC_EQ,		/* the RDMA event queue */
	RNIC_NUM_VECS,
};

/* Doorbell pages of the driver's Ethernet queues. */
#define RNIC_DB_PAGE_TX		1
#define RNIC_DB_PAGE_RX		2
/* The doorbell page of the kernel's RDMA objects, and of nothing else. */
#define RNIC_DB_PAGE_IB		3
/* The first of the pages user contexts get, one each (datasheet 17). */
#define RNIC_DB_PAGE_USER	4

struct rnic_cmdq {
	struct mutex lock;	/* one command at a time */
	void *ring;		/* descriptors, available and used rings */
	dma_addr_t ring_dma;
	void *buf;		/* request, then response */
	dma_addr_t buf_dma;
	u16 next_avail;
	u16 last_used;
	u32 token;
	bool running;
	struct completion done;
};

struct rnic_ib;

struct rnic_dev {
	struct pci_dev *pdev;
	void __iomem *regs;	/* BAR0 */
	void __iomem *db;	/* BAR2 */
	struct rnic_cmdq cmdq;
	struct rnic_query_device_resp info;
	u64 caps;
	u32 reset_count;	/* RESET_COUNT after our own reset */
	bool lost;		/* reset by someone else: commands fail */
	struct net_device *netdev;
	struct rnic_ib *ib;	/* the RDMA device, if registered */
};

static inline u32 rnic_rd(struct rnic_dev *rd, u32 reg)
{
	return ioread32(rd->regs + reg);
}

static inline void rnic_wr(struct rnic_dev *rd, u32 reg, u32 val)
{
	iowrite32(val, rd->regs + reg);
}

/*
 * Rings a doorbell of page @page whose new value was just stored: full
 * fence, then a kick if the device asked for one (datasheet 4.4).
 */
static inline void rnic_notify(struct rnic_dev *rd, u32 page)
{
	mb();	/* the doorbell store before the NOTIFY_REQUEST load */
	if (ioread32(rd->db + page * RNIC_PAGE_SIZE + RNIC_DB_NOTIFY_REQUEST))
		rnic_wr(rd, RNIC_REG_DOORBELL_KICK, page);
}

/* rnic_cmdq.c */
int rnic_cmdq_alloc(struct rnic_dev *rd);
void rnic_cmdq_free(struct rnic_dev *rd);
int rnic_cmdq_start(struct rnic_dev *rd);
void rnic_cmdq_stop(struct rnic_dev *rd);
irqreturn_t rnic_cmdq_irq(int irq, void *data);
int rnic_cmd(struct rnic_dev *rd, u16 opcode, const void *req, u32 req_len,
	     void *resp, u32 resp_len);
int rnic_cmd_quiet(struct rnic_dev *rd, u16 opcode, const void *req,
		   u32 req_len, void *resp, u32 resp_len, u16 quiet);

/* rnic_netdev.c */
struct rnic_ring {
	struct rnic_eth_desc *desc;
	dma_addr_t desc_dma;
	__le64 *pages;		/* the ring's page list */
	dma_addr_t pages_dma;
	u32 entries;
	u32 posted;		/* descriptors posted, free-running */
	u32 done;		/* descriptors completed and seen */
	u32 queue;		/* the device's queue number */
	u32 db_page;
	u32 db_slot;
	u16 arm_seq;
	bool created;
};

struct rnic_tx_buf {
	struct sk_buff *skb;	/* on the frame's last descriptor */
	dma_addr_t dma;
	u32 len;
	bool page;		/* dma_map_page, not dma_map_single */
};

struct rnic_rx_buf {
	struct sk_buff *skb;
	dma_addr_t dma;
};

struct rnic_sw_stats {
	u64 packets;
	u64 bytes;
	u64 errors;
	u64 dropped;
	struct u64_stats_sync syncp;
};

struct rnic_priv {
	struct rnic_dev *rd;
	struct net_device *netdev;
	struct napi_struct napi;
	struct rnic_ring tx;
	struct rnic_ring rx;
	struct rnic_tx_buf *tx_bufs;
	struct rnic_rx_buf *rx_bufs;
	u32 rx_buf_len;
	u32 tx_usecs;		/* interrupt moderation of each queue */
	u32 rx_usecs;
	struct rnic_sw_stats tx_stats;
	struct rnic_sw_stats rx_stats;
	struct mutex cfg_lock;	/* SET_ETH and the datapath's state */
	bool up;		/* queues created and running */
	bool detached;		/* between reset_prepare and reset_done */
	struct work_struct rx_mode_work;
	struct work_struct event_work;
};

int rnic_netdev_create(struct rnic_dev *rd);
int rnic_netdev_set_moderation(struct rnic_priv *p, u32 tx_usecs,
			       u32 rx_usecs);
void rnic_netdev_destroy(struct rnic_dev *rd);
void rnic_netdev_reset_prepare(struct rnic_dev *rd);
void rnic_netdev_reset_done(struct rnic_dev *rd, bool ok);
irqreturn_t rnic_event_irq(int irq, void *data);
irqreturn_t rnic_queue_irq(int irq, void *data);

/* rnic_ib.c */
int rnic_ib_add(struct rnic_dev *rd);
void rnic_ib_remove(struct rnic_dev *rd);

/* rnic_ethtool.c */
void rnic_set_ethtool_ops(struct net_device *netdev);

#endif /* RNIC_H */
