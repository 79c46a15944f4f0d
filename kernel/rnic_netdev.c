// SPDX-License-Identifier: GPL-2.0
/*
 * rnic Ethernet function: one net_device per PCI function, with one send
 * and one receive queue (datasheet 15, abi/src/eth.rs) served by one NAPI
 * context on RNIC_VEC_QUEUES, and link and MAC changes on RNIC_VEC_EVENT.
 * The device does no checksum offload and no segmentation: frames go out
 * as the stack built them, in up to RNIC_ETH_TX_MAX_DESCS pieces.
 */
#include <linux/dma-mapping.h>
#include <linux/etherdevice.h>
#include <linux/netdevice.h>
#include <linux/rtnetlink.h>
#include <linux/skbuff.h>

#include "rnic.h"

#define RNIC_TX_ENTRIES		512
#define RNIC_RX_ENTRIES		512
/* Room for the largest frame, and one more: wake the queue then. */
#define RNIC_TX_WAKE		(RNIC_ETH_TX_MAX_DESCS + 1)

static u32 rnic_ring_used(const struct rnic_ring *r)
{
	return READ_ONCE(r->posted) - READ_ONCE(r->done);
}

static u32 rnic_ring_free(const struct rnic_ring *r)
{
	return r->entries - rnic_ring_used(r);
}

static size_t rnic_ring_bytes(u32 entries)
{
	return ALIGN(entries * sizeof(struct rnic_eth_desc), RNIC_PAGE_SIZE);
}

static u32 rnic_ring_pages(u32 entries)
{
	return rnic_ring_bytes(entries) / RNIC_PAGE_SIZE;
}

static int rnic_ring_alloc(struct rnic_priv *p, struct rnic_ring *r,
			   u32 entries)
{
	struct device *dev = &p->rd->pdev->dev;
	u32 i, pages = rnic_ring_pages(entries);

	memset(r, 0, sizeof(*r));
	r->entries = entries;
	r->desc = dma_alloc_coherent(dev, rnic_ring_bytes(entries),
				     &r->desc_dma, GFP_KERNEL);
	if (!r->desc)
		return -ENOMEM;
	r->pages = dma_alloc_coherent(dev, pages * sizeof(__le64),
				      &r->pages_dma, GFP_KERNEL);
	if (!r->pages) {
		dma_free_coherent(dev, rnic_ring_bytes(entries), r->desc,
				  r->desc_dma);
		r->desc = NULL;
		return -ENOMEM;
	}
	for (i = 0; i < pages; i++)
		r->pages[i] = cpu_to_le64(r->desc_dma + i * RNIC_PAGE_SIZE);
	return 0;
}

static void rnic_ring_free_mem(struct rnic_priv *p, struct rnic_ring *r)
{
	struct device *dev = &p->rd->pdev->dev;

	if (r->pages)
		dma_free_coherent(dev, rnic_ring_pages(r->entries) *
				  sizeof(__le64), r->pages, r->pages_dma);
	if (r->desc)
		dma_free_coherent(dev, rnic_ring_bytes(r->entries), r->desc,
				  r->desc_dma);
	r->pages = NULL;
	r->desc = NULL;
}

static int rnic_queue_create(struct rnic_priv *p, struct rnic_ring *r, u8 kind,
			     u32 db_page, u32 usecs)
{
	struct rnic_create_eth_queue_req req = {};
	struct rnic_create_eth_queue_resp resp;
	int ret;

	req.kind = kind;
	req.msix_vector = cpu_to_le16(RNIC_VEC_QUEUES);
	req.entries = cpu_to_le32(r->entries);
	req.doorbell_page = cpu_to_le32(db_page);
	req.moderation_usecs = cpu_to_le32(usecs);
	req.ring.addr = cpu_to_le64(r->pages_dma);
	req.ring.count = cpu_to_le32(rnic_ring_pages(r->entries));
	req.ring.page_shift = RNIC_PAGE_SHIFT;
	ret = rnic_cmd(p->rd, RNIC_CMD_CREATE_ETH_QUEUE, &req, sizeof(req),
		       &resp, sizeof(resp));
	if (ret)
		return ret;
	r->queue = le32_to_cpu(resp.queue);
	r->db_page = le32_to_cpu(resp.doorbell.page);
	r->db_slot = le32_to_cpu(resp.doorbell.slot);
	if (r->db_page >= RNIC_DB_PAGES || r->db_slot >= RNIC_DB_SLOTS) {
		netdev_err(p->netdev, "queue got doorbell slot %u of page %u\n",
			   r->db_slot, r->db_page);
		return -EIO;
	}
	r->created = true;
	return 0;
}

static void rnic_queue_destroy(struct rnic_priv *p, struct rnic_ring *r,
			       u8 kind)
{
	struct rnic_eth_queue_req req = {};
	int ret;

	if (!r->created)
		return;
	req.kind = kind;
	req.queue = cpu_to_le32(r->queue);
	ret = rnic_cmd(p->rd, RNIC_CMD_DESTROY_ETH_QUEUE, &req, sizeof(req),
		       NULL, 0);
	if (ret && ret != -ENODEV)
		netdev_warn(p->netdev, "destroying %s queue %u failed: %d\n",
			    kind == RNIC_ETH_KIND_TX ? "send" : "receive",
			    r->queue, ret);
	r->created = false;
}

static void __iomem *rnic_slot(struct rnic_priv *p, struct rnic_ring *r)
{
	return p->rd->db + rnic_db_slot_offset(r->db_page, r->db_slot);
}

/*
 * Publishes r->posted: the count, then the notification protocol. The device
 * reads every Ethernet queue's count on each pass: no RUNG_BITMAP bit.
 */
static void rnic_ring_doorbell(struct rnic_priv *p, struct rnic_ring *r)
{
	wmb();	/* descriptors before the posted count */
	iowrite32(r->posted, rnic_slot(p, r));
	rnic_notify(p->rd, r->db_page);
}

/*
 * Asks for an interrupt once the device completes more than r->done, and
 * wakes the device if it sleeps, so that it sees the arm word (15.5).
 */
static void rnic_ring_arm(struct rnic_priv *p, struct rnic_ring *r)
{
	r->arm_seq++;
	iowrite32(rnic_eth_arm_word(r->arm_seq, r->done), rnic_slot(p, r) + 4);
	rnic_notify(p->rd, r->db_page);
}

/* Whether the next descriptor to complete is complete. */
static bool rnic_ring_pending(struct rnic_ring *r)
{
	struct rnic_eth_desc *d = &r->desc[r->done % r->entries];

	return r->done != READ_ONCE(r->posted) &&
	       (le16_to_cpu(READ_ONCE(d->status)) & RNIC_ETH_DESC_DONE);
}

/* SET_ETH from the interface's state; the caller holds cfg_lock. */
static int rnic_set_eth(struct rnic_priv *p)
{
	struct net_device *nd = p->netdev;
	struct rnic_set_eth_req *req;
	struct rnic_mac_entry *mc;
	struct netdev_hw_addr *ha;
	u32 rx_mode = 0, count = 0;
	int ret;

	req = kzalloc(sizeof(*req) + RNIC_ETH_MAX_MULTICAST * sizeof(*mc),
		      GFP_KERNEL);
	if (!req)
		return -ENOMEM;
	mc = (struct rnic_mac_entry *)(req + 1);
	if (p->up)
		rx_mode |= RNIC_ETH_RX_ENABLE;
	if (nd->flags & IFF_PROMISC)
		rx_mode |= RNIC_ETH_RX_PROMISC;
	netif_addr_lock_bh(nd);
	if (nd->flags & IFF_ALLMULTI ||
	    netdev_mc_count(nd) > RNIC_ETH_MAX_MULTICAST) {
		rx_mode |= RNIC_ETH_RX_ALLMULTI;
	} else {
		netdev_for_each_mc_addr(ha, nd)
			ether_addr_copy(mc[count++].mac, ha->addr);
	}
	netif_addr_unlock_bh(nd);
	req->mtu = cpu_to_le32(nd->mtu);
	req->rx_mode = cpu_to_le32(rx_mode);
	req->event_vector = cpu_to_le16(RNIC_VEC_EVENT);
	req->mc_count = cpu_to_le32(count);
	ret = rnic_cmd(p->rd, RNIC_CMD_SET_ETH, req,
		       sizeof(*req) + count * sizeof(*mc), NULL, 0);
	kfree(req);
	return ret;
}

static void rnic_update_carrier(struct rnic_priv *p)
{
	u32 status = rnic_rd(p->rd, RNIC_REG_DEVICE_STATUS);

	if (status & RNIC_STATUS_LINK_DOWN)
		netif_carrier_off(p->netdev);
	else
		netif_carrier_on(p->netdev);
}

/* --- send ------------------------------------------------------------- */

static void rnic_tx_unmap(struct rnic_priv *p, struct rnic_tx_buf *b)
{
	struct device *dev = &p->rd->pdev->dev;

	if (b->page)
		dma_unmap_page(dev, b->dma, b->len, DMA_TO_DEVICE);
	else
		dma_unmap_single(dev, b->dma, b->len, DMA_TO_DEVICE);
}

static void rnic_tx_fill(struct rnic_priv *p, u32 pos, dma_addr_t dma,
			 u32 len, bool page)
{
	u32 idx = pos % p->tx.entries;
	struct rnic_eth_desc *d = &p->tx.desc[idx];
	struct rnic_tx_buf *b = &p->tx_bufs[idx];

	d->addr = cpu_to_le64(dma);
	d->len = cpu_to_le32(len);
	d->flags = cpu_to_le16(RNIC_ETH_TX_MORE);
	d->status = 0;
	b->skb = NULL;
	b->dma = dma;
	b->len = len;
	b->page = page;
}

static netdev_tx_t rnic_start_xmit(struct sk_buff *skb, struct net_device *nd)
{
	struct rnic_priv *p = netdev_priv(nd);
	struct device *dev = &p->rd->pdev->dev;
	struct rnic_ring *r = &p->tx;
	u32 first = r->posted, n = 0, i, nfrags, headlen;
	dma_addr_t dma;

	if (skb->len < RNIC_ETH_MIN_FRAME)
		goto drop;
	if (skb_shinfo(skb)->nr_frags + 1 > RNIC_ETH_TX_MAX_DESCS &&
	    skb_linearize(skb))
		goto drop;
	nfrags = skb_shinfo(skb)->nr_frags;
	if (unlikely(rnic_ring_free(r) < nfrags + 1)) {
		netif_stop_queue(nd);
		return NETDEV_TX_BUSY;
	}

	headlen = skb_headlen(skb);
	if (headlen) {
		dma = dma_map_single(dev, skb->data, headlen, DMA_TO_DEVICE);
		if (dma_mapping_error(dev, dma))
			goto drop;
		rnic_tx_fill(p, first + n++, dma, headlen, false);
	}
	for (i = 0; i < nfrags; i++) {
		const skb_frag_t *frag = &skb_shinfo(skb)->frags[i];
		u32 len = skb_frag_size(frag);

		if (!len)
			continue;
		dma = skb_frag_dma_map(dev, frag, 0, len, DMA_TO_DEVICE);
		if (dma_mapping_error(dev, dma))
			goto unmap;
		rnic_tx_fill(p, first + n++, dma, len, true);
	}
	if (!n)
		goto drop;
	i = (first + n - 1) % r->entries;
	r->desc[i].flags = 0;
	p->tx_bufs[i].skb = skb;
	skb_tx_timestamp(skb);
	WRITE_ONCE(r->posted, first + n);

	if (unlikely(rnic_ring_free(r) < RNIC_TX_WAKE)) {
		netif_stop_queue(nd);
		/* The stop before the second look; pairs with rnic_tx_clean. */
		smp_mb();
		if (rnic_ring_free(r) >= RNIC_TX_WAKE)
			netif_start_queue(nd);
	}
	if (!netdev_xmit_more() || netif_queue_stopped(nd))
		rnic_ring_doorbell(p, r);
	return NETDEV_TX_OK;

unmap:
	while (n--)
		rnic_tx_unmap(p, &p->tx_bufs[(first + n) % r->entries]);
drop:
	dev_core_stats_tx_dropped_inc(nd);
	dev_kfree_skb_any(skb);
	return NETDEV_TX_OK;
}

static void rnic_tx_clean(struct rnic_priv *p, int budget)
{
	struct rnic_ring *r = &p->tx;
	u32 done = r->done, posted = READ_ONCE(r->posted);
	u64 packets = 0, bytes = 0, errors = 0;
	bool frame_error = false;

	while (done != posted) {
		u32 idx = done % r->entries;
		struct rnic_tx_buf *b = &p->tx_bufs[idx];
		u16 status = le16_to_cpu(READ_ONCE(r->desc[idx].status));

		if (!(status & RNIC_ETH_DESC_DONE))
			break;
		dma_rmb();	/* the status before the rest */
		rnic_tx_unmap(p, b);
		if (status >> RNIC_ETH_DESC_ERROR_SHIFT)
			frame_error = true;
		if (b->skb) {
			if (frame_error) {
				errors++;
			} else {
				packets++;
				bytes += b->skb->len;
			}
			napi_consume_skb(b->skb, budget);
			b->skb = NULL;
			frame_error = false;
		}
		done++;
	}
	if (done == r->done)
		return;
	u64_stats_update_begin(&p->tx_stats.syncp);
	p->tx_stats.packets += packets;
	p->tx_stats.bytes += bytes;
	p->tx_stats.errors += errors;
	u64_stats_update_end(&p->tx_stats.syncp);
	WRITE_ONCE(r->done, done);
	/* The new r->done before the stopped check; pairs with xmit. */
	smp_mb();
	if (netif_queue_stopped(p->netdev) && p->up &&
	    rnic_ring_free(r) >= RNIC_TX_WAKE)
		netif_wake_queue(p->netdev);
}

static void rnic_tx_drain(struct rnic_priv *p)
{
	struct rnic_ring *r = &p->tx;

	for (; r->done != r->posted; r->done++) {
		struct rnic_tx_buf *b = &p->tx_bufs[r->done % r->entries];

		rnic_tx_unmap(p, b);
		if (b->skb)
			dev_kfree_skb_any(b->skb);
		b->skb = NULL;
	}
}

/* --- receive ---------------------------------------------------------- */

static int rnic_rx_post(struct rnic_priv *p, u32 pos)
{
	struct device *dev = &p->rd->pdev->dev;
	u32 idx = pos % p->rx.entries;
	struct rnic_eth_desc *d = &p->rx.desc[idx];
	struct rnic_rx_buf *b = &p->rx_bufs[idx];
	struct sk_buff *skb;
	dma_addr_t dma;

	skb = netdev_alloc_skb_ip_align(p->netdev, p->rx_buf_len);
	if (!skb)
		return -ENOMEM;
	dma = dma_map_single(dev, skb->data, p->rx_buf_len, DMA_FROM_DEVICE);
	if (dma_mapping_error(dev, dma)) {
		dev_kfree_skb_any(skb);
		return -ENOMEM;
	}
	b->skb = skb;
	b->dma = dma;
	d->addr = cpu_to_le64(dma);
	d->len = cpu_to_le32(p->rx_buf_len);
	d->flags = 0;
	d->status = 0;
	return 0;
}

/* Fills the receive ring; NAPI context, or process context before it. */
static void rnic_rx_refill(struct rnic_priv *p)
{
	struct rnic_ring *r = &p->rx;
	u32 before = r->posted;

	while (r->posted - r->done < r->entries) {
		if (rnic_rx_post(p, r->posted)) {
			u64_stats_update_begin(&p->rx_stats.syncp);
			p->rx_stats.dropped++;
			u64_stats_update_end(&p->rx_stats.syncp);
			break;
		}
		r->posted++;
	}
	if (r->posted != before)
		rnic_ring_doorbell(p, r);
}

static int rnic_rx_poll(struct rnic_priv *p, int budget)
{
	struct device *dev = &p->rd->pdev->dev;
	struct net_device *nd = p->netdev;
	struct rnic_ring *r = &p->rx;
	u64 packets = 0, bytes = 0, errors = 0;
	int work = 0;

	while (work < budget && r->done != r->posted) {
		u32 idx = r->done % r->entries;
		struct rnic_eth_desc *d = &r->desc[idx];
		struct rnic_rx_buf *b = &p->rx_bufs[idx];
		struct sk_buff *skb;
		u32 len;

		if (!(le16_to_cpu(READ_ONCE(d->status)) & RNIC_ETH_DESC_DONE))
			break;
		dma_rmb();	/* the status before the length and the data */
		len = le32_to_cpu(d->len);
		dma_unmap_single(dev, b->dma, p->rx_buf_len, DMA_FROM_DEVICE);
		skb = b->skb;
		b->skb = NULL;
		r->done++;
		work++;
		if (len < ETH_HLEN || len > p->rx_buf_len) {
			dev_kfree_skb_any(skb);
			errors++;
			continue;
		}
		skb_put(skb, len);
		skb->protocol = eth_type_trans(skb, nd);
		packets++;
		bytes += len;
		napi_gro_receive(&p->napi, skb);
	}
	if (work) {
		u64_stats_update_begin(&p->rx_stats.syncp);
		p->rx_stats.packets += packets;
		p->rx_stats.bytes += bytes;
		p->rx_stats.errors += errors;
		u64_stats_update_end(&p->rx_stats.syncp);
	}
	rnic_rx_refill(p);
	return work;
}

static void rnic_rx_drain(struct rnic_priv *p)
{
	struct device *dev = &p->rd->pdev->dev;
	struct rnic_ring *r = &p->rx;

	for (; r->done != r->posted; r->done++) {
		struct rnic_rx_buf *b = &p->rx_bufs[r->done % r->entries];

		dma_unmap_single(dev, b->dma, p->rx_buf_len, DMA_FROM_DEVICE);
		dev_kfree_skb_any(b->skb);
		b->skb = NULL;
	}
}

static int rnic_poll(struct napi_struct *napi, int budget)
{
	struct rnic_priv *p = container_of(napi, struct rnic_priv, napi);
	int work;

	rnic_tx_clean(p, budget);
	work = rnic_rx_poll(p, budget);
	/* No buffer could be posted: keep polling until memory comes back. */
	if (p->rx.posted == p->rx.done)
		return budget;
	if (work < budget && napi_complete_done(napi, work)) {
		rnic_ring_arm(p, &p->tx);
		rnic_ring_arm(p, &p->rx);
		/*
		 * rnic_notify fenced the arm words before this look at the
		 * rings: a completion the device wrote before it saw them is
		 * found here (the device fires at once for it too).
		 */
		if (rnic_ring_pending(&p->tx) || rnic_ring_pending(&p->rx))
			napi_schedule(napi);
	}
	return work;
}

irqreturn_t rnic_queue_irq(int irq, void *data)
{
	struct rnic_priv *p = data;

	napi_schedule_irqoff(&p->napi);
	return IRQ_HANDLED;
}

irqreturn_t rnic_event_irq(int irq, void *data)
{
	struct rnic_priv *p = data;

	schedule_work(&p->event_work);
	return IRQ_HANDLED;
}

/* --- up and down -------------------------------------------------------- */

static void rnic_free_datapath(struct rnic_priv *p)
{
	rnic_ring_free_mem(p, &p->tx);
	rnic_ring_free_mem(p, &p->rx);
	kfree(p->tx_bufs);
	kfree(p->rx_bufs);
	p->tx_bufs = NULL;
	p->rx_bufs = NULL;
}

/* Creates the queues and starts the datapath; the caller holds cfg_lock. */
static int rnic_up(struct rnic_priv *p)
{
	struct net_device *nd = p->netdev;
	int ret;

	p->rx_buf_len = rnic_eth_max_frame(nd->mtu);
	p->tx_bufs = kcalloc(RNIC_TX_ENTRIES, sizeof(*p->tx_bufs), GFP_KERNEL);
	p->rx_bufs = kcalloc(RNIC_RX_ENTRIES, sizeof(*p->rx_bufs), GFP_KERNEL);
	if (!p->tx_bufs || !p->rx_bufs) {
		ret = -ENOMEM;
		goto err_free;
	}
	ret = rnic_ring_alloc(p, &p->tx, RNIC_TX_ENTRIES);
	if (ret)
		goto err_free;
	ret = rnic_ring_alloc(p, &p->rx, RNIC_RX_ENTRIES);
	if (ret)
		goto err_free;
	ret = rnic_queue_create(p, &p->tx, RNIC_ETH_KIND_TX, RNIC_DB_PAGE_TX,
				p->tx_usecs);
	if (ret)
		goto err_queues;
	ret = rnic_queue_create(p, &p->rx, RNIC_ETH_KIND_RX, RNIC_DB_PAGE_RX,
				p->rx_usecs);
	if (ret)
		goto err_queues;
	rnic_rx_refill(p);
	if (p->rx.posted == 0) {
		ret = -ENOMEM;
		goto err_queues;
	}
	p->up = true;
	ret = rnic_set_eth(p);
	if (ret)
		goto err_up;
	napi_enable(&p->napi);
	local_bh_disable();
	napi_schedule(&p->napi);	/* arms the queues */
	local_bh_enable();
	rnic_update_carrier(p);
	netif_start_queue(nd);
	return 0;

err_up:
	p->up = false;
err_queues:
	rnic_queue_destroy(p, &p->rx, RNIC_ETH_KIND_RX);
	rnic_queue_destroy(p, &p->tx, RNIC_ETH_KIND_TX);
	rnic_rx_drain(p);
err_free:
	rnic_free_datapath(p);
	return ret;
}

/* Stops the datapath and destroys the queues; the caller holds cfg_lock. */
static void rnic_down(struct rnic_priv *p)
{
	if (!p->up)
		return;
	p->up = false;
	netif_tx_disable(p->netdev);
	napi_disable(&p->napi);
	/* Reception off, then the queues: the device lets go of the buffers. */
	rnic_set_eth(p);
	rnic_queue_destroy(p, &p->rx, RNIC_ETH_KIND_RX);
	rnic_queue_destroy(p, &p->tx, RNIC_ETH_KIND_TX);
	rnic_tx_drain(p);
	rnic_rx_drain(p);
	rnic_free_datapath(p);
}

static int rnic_open(struct net_device *nd)
{
	struct rnic_priv *p = netdev_priv(nd);
	int ret;

	mutex_lock(&p->cfg_lock);
	ret = rnic_up(p);
	mutex_unlock(&p->cfg_lock);
	return ret;
}

static int rnic_stop(struct net_device *nd)
{
	struct rnic_priv *p = netdev_priv(nd);

	mutex_lock(&p->cfg_lock);
	rnic_down(p);
	mutex_unlock(&p->cfg_lock);
	return 0;
}

static int rnic_change_mtu(struct net_device *nd, int new_mtu)
{
	struct rnic_priv *p = netdev_priv(nd);
	unsigned int old_mtu = nd->mtu;
	bool was_up;
	int ret;

	mutex_lock(&p->cfg_lock);
	was_up = p->up;
	/* Receive buffers are sized for the MTU: take the queues down. */
	rnic_down(p);
	WRITE_ONCE(nd->mtu, new_mtu);
	ret = was_up ? rnic_up(p) : rnic_set_eth(p);
	if (ret) {
		netdev_err(nd, "cannot set MTU %d: %d\n", new_mtu, ret);
		WRITE_ONCE(nd->mtu, old_mtu);
		if (was_up && rnic_up(p))
			netdev_err(nd, "cannot restart after the failed MTU change\n");
		else if (!was_up)
			rnic_set_eth(p);
	}
	mutex_unlock(&p->cfg_lock);
	return ret;
}

/*
 * Interrupt moderation is fixed when a queue is created: a change on a running
 * interface creates the queues again. The caller holds the RTNL.
 */
int rnic_netdev_set_moderation(struct rnic_priv *p, u32 tx_usecs,
			       u32 rx_usecs)
{
	u32 old_tx = p->tx_usecs, old_rx = p->rx_usecs;
	int ret = 0;

	if (tx_usecs > RNIC_ETH_MAX_MODERATION_USECS ||
	    rx_usecs > RNIC_ETH_MAX_MODERATION_USECS)
		return -EINVAL;
	mutex_lock(&p->cfg_lock);
	if (tx_usecs == old_tx && rx_usecs == old_rx)
		goto out;
	p->tx_usecs = tx_usecs;
	p->rx_usecs = rx_usecs;
	if (!p->up)
		goto out;
	rnic_down(p);
	ret = rnic_up(p);
	if (ret) {
		netdev_err(p->netdev, "cannot restart with new moderation: %d\n",
			   ret);
		p->tx_usecs = old_tx;
		p->rx_usecs = old_rx;
		if (rnic_up(p))
			netdev_err(p->netdev, "cannot restart the queues\n");
	}
out:
	mutex_unlock(&p->cfg_lock);
	return ret;
}

static void rnic_set_rx_mode(struct net_device *nd)
{
	struct rnic_priv *p = netdev_priv(nd);

	/* Atomic context: SET_ETH sleeps. */
	schedule_work(&p->rx_mode_work);
}

static void rnic_rx_mode_work(struct work_struct *work)
{
	struct rnic_priv *p = container_of(work, struct rnic_priv, rx_mode_work);

	mutex_lock(&p->cfg_lock);
	if (!p->detached)
		rnic_set_eth(p);
	mutex_unlock(&p->cfg_lock);
}

/* The event vector fired: the link or the MAC changed. */
static void rnic_event_work(struct work_struct *work)
{
	struct rnic_priv *p = container_of(work, struct rnic_priv, event_work);
	struct net_device *nd = p->netdev;
	struct rnic_query_eth_resp *q;

	q = kmalloc(sizeof(*q), GFP_KERNEL);
	if (!q)
		return;
	rtnl_lock();
	mutex_lock(&p->cfg_lock);
	if (p->detached)
		goto out;
	rnic_update_carrier(p);
	if (!rnic_cmd(p->rd, RNIC_CMD_QUERY_ETH, NULL, 0, q, sizeof(*q)) &&
	    is_valid_ether_addr(q->mac) &&
	    !ether_addr_equal(q->mac, nd->dev_addr)) {
		netdev_info(nd, "the device changed the MAC to %pM\n", q->mac);
		eth_hw_addr_set(nd, q->mac);
		call_netdevice_notifiers(NETDEV_CHANGEADDR, nd);
	}
out:
	mutex_unlock(&p->cfg_lock);
	rtnl_unlock();
	kfree(q);
}

static void rnic_get_stats64(struct net_device *nd,
			     struct rtnl_link_stats64 *s)
{
	struct rnic_priv *p = netdev_priv(nd);
	unsigned int start;

	do {
		start = u64_stats_fetch_begin(&p->tx_stats.syncp);
		s->tx_packets = p->tx_stats.packets;
		s->tx_bytes = p->tx_stats.bytes;
		s->tx_errors = p->tx_stats.errors;
	} while (u64_stats_fetch_retry(&p->tx_stats.syncp, start));
	do {
		start = u64_stats_fetch_begin(&p->rx_stats.syncp);
		s->rx_packets = p->rx_stats.packets;
		s->rx_bytes = p->rx_stats.bytes;
		s->rx_errors = p->rx_stats.errors;
		s->rx_dropped = p->rx_stats.dropped;
	} while (u64_stats_fetch_retry(&p->rx_stats.syncp, start));
}

static const struct net_device_ops rnic_netdev_ops = {
	.ndo_open = rnic_open,
	.ndo_stop = rnic_stop,
	.ndo_start_xmit = rnic_start_xmit,
	.ndo_change_mtu = rnic_change_mtu,
	.ndo_set_rx_mode = rnic_set_rx_mode,
	.ndo_get_stats64 = rnic_get_stats64,
	.ndo_validate_addr = eth_validate_addr,
};

int rnic_netdev_create(struct rnic_dev *rd)
{
	struct pci_dev *pdev = rd->pdev;
	struct net_device *nd;
	struct rnic_priv *p;
	int ret;

	nd = alloc_etherdev(sizeof(*p));
	if (!nd)
		return -ENOMEM;
	SET_NETDEV_DEV(nd, &pdev->dev);
	p = netdev_priv(nd);
	p->rd = rd;
	p->netdev = nd;
	mutex_init(&p->cfg_lock);
	INIT_WORK(&p->rx_mode_work, rnic_rx_mode_work);
	INIT_WORK(&p->event_work, rnic_event_work);
	u64_stats_init(&p->tx_stats.syncp);
	u64_stats_init(&p->rx_stats.syncp);
	nd->netdev_ops = &rnic_netdev_ops;
	rnic_set_ethtool_ops(nd);
	nd->min_mtu = RNIC_ETH_MIN_MTU;
	nd->max_mtu = RNIC_ETH_MAX_MTU;
	nd->hw_features = NETIF_F_SG;
	nd->features = NETIF_F_SG;
	if (is_valid_ether_addr(rd->info.mac)) {
		eth_hw_addr_set(nd, rd->info.mac);
	} else {
		dev_warn(&pdev->dev, "the device has no valid MAC (%pM)\n",
			 rd->info.mac);
		eth_hw_addr_random(nd);
	}
	netif_napi_add(nd, &p->napi, rnic_poll);

	ret = request_irq(pci_irq_vector(pdev, RNIC_VEC_EVENT), rnic_event_irq,
			  0, "rnic-event", p);
	if (ret)
		goto err_napi;
	ret = request_irq(pci_irq_vector(pdev, RNIC_VEC_QUEUES),
			  rnic_queue_irq, 0, "rnic-queues", p);
	if (ret)
		goto err_event_irq;
	/* The MTU and the event vector, reception off until open. */
	mutex_lock(&p->cfg_lock);
	ret = rnic_set_eth(p);
	mutex_unlock(&p->cfg_lock);
	if (ret) {
		dev_err(&pdev->dev, "SET_ETH failed: %d\n", ret);
		goto err_queue_irq;
	}
	netif_carrier_off(nd);
	rd->netdev = nd;
	ret = register_netdev(nd);
	if (ret)
		goto err_registered;
	netdev_info(nd, "rnic Ethernet at %s, MAC %pM\n", pci_name(pdev),
		    nd->dev_addr);
	return 0;

err_registered:
	rd->netdev = NULL;
err_queue_irq:
	free_irq(pci_irq_vector(pdev, RNIC_VEC_QUEUES), p);
err_event_irq:
	free_irq(pci_irq_vector(pdev, RNIC_VEC_EVENT), p);
	cancel_work_sync(&p->event_work);
err_napi:
	netif_napi_del(&p->napi);
	free_netdev(nd);
	return ret;
}

void rnic_netdev_destroy(struct rnic_dev *rd)
{
	struct net_device *nd = rd->netdev;
	struct pci_dev *pdev = rd->pdev;
	struct rnic_priv *p;

	if (!nd)
		return;
	p = netdev_priv(nd);
	unregister_netdev(nd);
	free_irq(pci_irq_vector(pdev, RNIC_VEC_QUEUES), p);
	free_irq(pci_irq_vector(pdev, RNIC_VEC_EVENT), p);
	cancel_work_sync(&p->rx_mode_work);
	cancel_work_sync(&p->event_work);
	netif_napi_del(&p->napi);
	rd->netdev = NULL;
	free_netdev(nd);
}

/* Before a function reset: detach, and take the datapath down. */
void rnic_netdev_reset_prepare(struct rnic_dev *rd)
{
	struct rnic_priv *p;

	if (!rd->netdev)
		return;
	p = netdev_priv(rd->netdev);
	rtnl_lock();
	mutex_lock(&p->cfg_lock);
	p->detached = true;
	netif_device_detach(rd->netdev);
	rnic_down(p);
	mutex_unlock(&p->cfg_lock);
	rtnl_unlock();
}

/* After the reset: the device state is new; set it up as the OS has it. */
void rnic_netdev_reset_done(struct rnic_dev *rd, bool ok)
{
	struct net_device *nd = rd->netdev;
	struct rnic_priv *p;
	int ret = -EIO;

	if (!nd)
		return;
	p = netdev_priv(nd);
	rtnl_lock();
	mutex_lock(&p->cfg_lock);
	if (ok) {
		ret = rnic_set_eth(p);
		if (!ret && netif_running(nd))
			ret = rnic_up(p);
	}
	if (!ret) {
		p->detached = false;
		netif_device_attach(nd);
	} else {
		netdev_err(nd, "stays detached: set-up after reset failed (%d)\n",
			   ret);
	}
	mutex_unlock(&p->cfg_lock);
	rtnl_unlock();
}
