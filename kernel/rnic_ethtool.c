// SPDX-License-Identifier: GPL-2.0
/*
 * rnic ethtool: driver information, and the device's own counters
 * (QUERY_ETH for the function, QUERY_ETH_QUEUE for each queue) as
 * `ethtool -S`.
 */
#include <linux/ethtool.h>
#include <linux/netdevice.h>
#include <linux/slab.h>

#include "rnic.h"

/* In the order of struct rnic_eth_counters. */
static const char rnic_eth_counter_names[][ETH_GSTRING_LEN] = {
	"tx_frames", "tx_bytes", "tx_malformed", "tx_dma_errors",
	"tx_spoofed", "tx_link_down", "rx_frames", "rx_bytes",
	"rx_no_buffer", "rx_too_long", "rx_filtered", "rx_disabled",
	"rx_dma_errors", "rx_link_down", "ring_errors", "interrupts",
};

static_assert(ARRAY_SIZE(rnic_eth_counter_names) == RNIC_ETH_COUNTERS);

/* In the order of struct rnic_eth_queue_stats. */
static const char rnic_queue_counter_names[][ETH_GSTRING_LEN] = {
	"frames", "bytes", "errors", "interrupts", "completed", "posted",
};

#define RNIC_QUEUE_COUNTERS	ARRAY_SIZE(rnic_queue_counter_names)
#define RNIC_STATS		(RNIC_ETH_COUNTERS + 2 * RNIC_QUEUE_COUNTERS)

static void rnic_get_drvinfo(struct net_device *nd,
			     struct ethtool_drvinfo *info)
{
	struct rnic_priv *p = netdev_priv(nd);
	u32 fw = le32_to_cpu(p->rd->info.fw_version);

	strscpy(info->driver, RNIC_DRV_NAME, sizeof(info->driver));
	strscpy(info->version, RNIC_DRV_VERSION, sizeof(info->version));
	snprintf(info->fw_version, sizeof(info->fw_version),
		 "rnicd %u.%u.%u abi %u.%u", (fw >> 16) & 0xff,
		 (fw >> 8) & 0xff, fw & 0xff,
		 (u8)le16_to_cpu(p->rd->info.abi_major),
		 (u8)le16_to_cpu(p->rd->info.abi_minor));
	strscpy(info->bus_info, pci_name(p->rd->pdev), sizeof(info->bus_info));
}

static int rnic_get_sset_count(struct net_device *nd, int sset)
{
	return sset == ETH_SS_STATS ? RNIC_STATS : -EOPNOTSUPP;
}

static void rnic_get_strings(struct net_device *nd, u32 sset, u8 *data)
{
	unsigned int i;

	if (sset != ETH_SS_STATS)
		return;
	for (i = 0; i < RNIC_ETH_COUNTERS; i++)
		ethtool_puts(&data, rnic_eth_counter_names[i]);
	for (i = 0; i < RNIC_QUEUE_COUNTERS; i++)
		ethtool_sprintf(&data, "txq0_%s", rnic_queue_counter_names[i]);
	for (i = 0; i < RNIC_QUEUE_COUNTERS; i++)
		ethtool_sprintf(&data, "rxq0_%s", rnic_queue_counter_names[i]);
}

/* One queue's counters, or zeros while the queue does not exist. */
static void rnic_queue_stats(struct rnic_priv *p, struct rnic_ring *r, u8 kind,
			     u64 *data)
{
	struct rnic_eth_queue_req req = {};
	struct rnic_eth_queue_stats s;

	memset(data, 0, RNIC_QUEUE_COUNTERS * sizeof(*data));
	if (!p->up || !r->created)
		return;
	req.kind = kind;
	req.queue = cpu_to_le32(r->queue);
	if (rnic_cmd(p->rd, RNIC_CMD_QUERY_ETH_QUEUE, &req, sizeof(req), &s,
		     sizeof(s)))
		return;
	data[0] = le64_to_cpu(s.frames);
	data[1] = le64_to_cpu(s.bytes);
	data[2] = le64_to_cpu(s.errors);
	data[3] = le64_to_cpu(s.interrupts);
	data[4] = le32_to_cpu(s.completed);
	data[5] = le32_to_cpu(s.posted);
}

static void rnic_get_ethtool_stats(struct net_device *nd,
				   struct ethtool_stats *stats, u64 *data)
{
	struct rnic_priv *p = netdev_priv(nd);
	struct rnic_query_eth_resp *q;
	const __le64 *c;
	unsigned int i;

	memset(data, 0, RNIC_STATS * sizeof(*data));
	q = kmalloc(sizeof(*q), GFP_KERNEL);
	if (!q)
		return;
	mutex_lock(&p->cfg_lock);
	if (!p->detached &&
	    !rnic_cmd(p->rd, RNIC_CMD_QUERY_ETH, NULL, 0, q, sizeof(*q))) {
		c = (const __le64 *)&q->counters;
		for (i = 0; i < RNIC_ETH_COUNTERS; i++)
			data[i] = le64_to_cpu(c[i]);
	}
	data += RNIC_ETH_COUNTERS;
	rnic_queue_stats(p, &p->tx, RNIC_ETH_KIND_TX, data);
	data += RNIC_QUEUE_COUNTERS;
	rnic_queue_stats(p, &p->rx, RNIC_ETH_KIND_RX, data);
	mutex_unlock(&p->cfg_lock);
	kfree(q);
}

static int rnic_get_coalesce(struct net_device *nd, struct ethtool_coalesce *ec,
			     struct kernel_ethtool_coalesce *kec,
			     struct netlink_ext_ack *extack)
{
	struct rnic_priv *p = netdev_priv(nd);

	ec->tx_coalesce_usecs = p->tx_usecs;
	ec->rx_coalesce_usecs = p->rx_usecs;
	return 0;
}

static int rnic_set_coalesce(struct net_device *nd, struct ethtool_coalesce *ec,
			     struct kernel_ethtool_coalesce *kec,
			     struct netlink_ext_ack *extack)
{
	struct rnic_priv *p = netdev_priv(nd);

	if (ec->tx_coalesce_usecs > RNIC_ETH_MAX_MODERATION_USECS ||
	    ec->rx_coalesce_usecs > RNIC_ETH_MAX_MODERATION_USECS) {
		NL_SET_ERR_MSG_MOD(extack, "at most 100000 usecs");
		return -EINVAL;
	}
	return rnic_netdev_set_moderation(p, ec->tx_coalesce_usecs,
					  ec->rx_coalesce_usecs);
}

static const struct ethtool_ops rnic_ethtool_ops = {
	.supported_coalesce_params = ETHTOOL_COALESCE_USECS,
	.get_drvinfo = rnic_get_drvinfo,
	.get_link = ethtool_op_get_link,
	.get_sset_count = rnic_get_sset_count,
	.get_strings = rnic_get_strings,
	.get_ethtool_stats = rnic_get_ethtool_stats,
	.get_coalesce = rnic_get_coalesce,
	.set_coalesce = rnic_set_coalesce,
};

void rnic_set_ethtool_ops(struct net_device *netdev)
{
	netdev->ethtool_ops = &rnic_ethtool_ops;
}
