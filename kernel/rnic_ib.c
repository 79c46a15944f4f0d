// SPDX-License-Identifier: GPL-2.0
/*
 * rnic: the RDMA device of a function. Registers one ib_device (rnic%d) per
 * function over its network interface: one RoCEv2 port whose state follows
 * the interface's carrier, one P_Key, a GID table the core fills from the
 * interface's addresses. Kernel verbs, and with CAP_USER_KICK user verbs
 * (rnic_ib_user.c).
 */
#include <linux/dma-mapping.h>
#include <linux/etherdevice.h>
#include <linux/module.h>
#include <net/addrconf.h>
#include <net/ipv6.h>
#include <rdma/ib_addr.h>
#include <rdma/ib_cache.h>
#include <rdma/ib_mad.h>

#include "rnic_ib.h"

#define RNIC_KVERBS_CAPS	(RNIC_CAP_FAST_REG | RNIC_CAP_GSI)
#define RNIC_UVERBS_CAPS	(RNIC_KVERBS_CAPS | RNIC_CAP_USER_KICK)

/* A zeroed coherent buffer of @size bytes and the flat list of its pages. */
int rnic_ib_buf_alloc(struct rnic_ib *rib, struct rnic_ib_buf *buf,
		      size_t size)
{
	struct device *dev = &rib->rd->pdev->dev;
	u32 i;

	buf->size = ALIGN(size, RNIC_PAGE_SIZE);
	buf->npages = buf->size / RNIC_PAGE_SIZE;
	buf->va = dma_alloc_coherent(dev, buf->size, &buf->dma, GFP_KERNEL);
	if (!buf->va)
		return -ENOMEM;
	buf->pages = dma_alloc_coherent(dev, buf->npages * sizeof(__le64),
					&buf->pages_dma, GFP_KERNEL);
	if (!buf->pages) {
		dma_free_coherent(dev, buf->size, buf->va, buf->dma);
		buf->va = NULL;
		return -ENOMEM;
	}
	for (i = 0; i < buf->npages; i++)
		buf->pages[i] = cpu_to_le64(buf->dma + (u64)i * RNIC_PAGE_SIZE);
	return 0;
}

void rnic_ib_buf_free(struct rnic_ib *rib, struct rnic_ib_buf *buf)
{
	struct device *dev = &rib->rd->pdev->dev;

	if (buf->pages)
		dma_free_coherent(dev, buf->npages * sizeof(__le64), buf->pages,
				  buf->pages_dma);
	if (buf->va)
		dma_free_coherent(dev, buf->size, buf->va, buf->dma);
	buf->pages = NULL;
	buf->va = NULL;
}

void rnic_ib_page_list(const struct rnic_ib_buf *buf,
		       struct rnic_page_list *pl)
{
	pl->addr = cpu_to_le64(buf->pages_dma);
	pl->count = cpu_to_le32(buf->npages);
	pl->page_shift = RNIC_PAGE_SHIFT;
	pl->levels = 0;
	pl->reserved = 0;
}

/*
 * Announces a queue whose posted count was just stored in slot @slot of
 * doorbell page @page: its RUNG_BITMAP bit, then the notification protocol
 * (datasheet 7.5). The bitmap's read-modify-write is serialised.
 */
void rnic_ib_ring(struct rnic_ib *rib, u32 page, u32 slot)
{
	void __iomem *word = rib->rd->db + page * RNIC_PAGE_SIZE +
			     RNIC_DB_RUNG_BITMAP + 4 * (slot / 32);
	unsigned long flags;

	wmb();	/* the posted count before the bit */
	spin_lock_irqsave(&rib->db_lock, flags);
	iowrite32(ioread32(word) | BIT(slot % 32), word);
	spin_unlock_irqrestore(&rib->db_lock, flags);
	rnic_notify(rib->rd, page);
}

/*
 * The entry of the device's GID table a QP or an AH sends from: the core's
 * index, as add_gid keeps the two tables alike (datasheet section 6.13). The
 * device sends RoCEv2 over IPv4 only. A device without the table sends from
 * the function's own GID, its entry 0, and nothing else.
 */
int rnic_ib_sgid_index(struct rnic_ib *rib, const struct ib_gid_attr *attr)
{
	const struct in6_addr *gid;

	if (!attr || attr->gid_type != IB_GID_TYPE_ROCE_UDP_ENCAP)
		goto refused;
	gid = (const struct in6_addr *)attr->gid.raw;
	if (rib->rd->caps & RNIC_CAP_GID_TABLE) {
		if (attr->index < RNIC_GID_TABLE_LEN && ipv6_addr_v4mapped(gid))
			return attr->index;
	} else if (!memcmp(gid, rib->rd->info.gid, sizeof(*gid))) {
		return 0;
	}
refused:
	ibdev_dbg(&rib->ibdev, "source GID %pI6c cannot be sent from\n",
		  attr ? attr->gid.raw : NULL);
	return -EINVAL;
}

static int rnic_query_device_attr(struct ib_device *ibdev,
				  struct ib_device_attr *a,
				  struct ib_udata *udata)
{
	struct rnic_ib *rib = to_rib(ibdev);
	struct rnic_dev *rd = rib->rd;
	const struct rnic_limits *l = &rd->info.limits;
	u32 fw = le32_to_cpu(rd->info.fw_version);

	/* ibv_query_device_ex: no driver data (zeroes are as good as none). */
	if (udata && udata->inlen &&
	    !ib_is_udata_cleared(udata, 0, udata->inlen))
		return -EINVAL;
	memset(a, 0, sizeof(*a));
	a->fw_ver = fw;
	a->sys_image_guid = ibdev->node_guid;
	a->max_mr_size = le64_to_cpu(l->max_mr_size);
	a->page_size_cap = RNIC_PAGE_SIZE;
	a->vendor_id = le16_to_cpu(rd->info.vendor_id);
	a->vendor_part_id = le16_to_cpu(rd->info.device_id);
	a->hw_ver = le16_to_cpu(rd->info.abi_minor);
	a->max_qp = le32_to_cpu(l->max_qp);
	a->max_qp_wr = le32_to_cpu(l->max_qp_wr);
	a->device_cap_flags = IB_DEVICE_SYS_IMAGE_GUID |
			      IB_DEVICE_RC_RNR_NAK_GEN |
			      IB_DEVICE_PORT_ACTIVE_EVENT;
	if (rd->caps & RNIC_CAP_FAST_REG)
		a->device_cap_flags |= IB_DEVICE_MEM_MGT_EXTENSIONS;
	/* RDMA FLUSH and ATOMIC WRITE (ABI 1.11, datasheet 14.14). */
	if (rd->caps & RNIC_CAP_FLUSH)
		a->device_cap_flags |= IB_DEVICE_FLUSH_GLOBAL |
				       IB_DEVICE_FLUSH_PERSISTENT;
	if (rd->caps & RNIC_CAP_ATOMIC_WRITE)
		a->device_cap_flags |= IB_DEVICE_ATOMIC_WRITE;
	a->max_send_sge = le32_to_cpu(l->max_sge);
	a->max_recv_sge = le32_to_cpu(l->max_sge);
	a->max_sge_rd = le32_to_cpu(l->max_sge);
	a->max_cq = le32_to_cpu(l->max_cq);
	a->max_cqe = le32_to_cpu(l->max_cqe);
	a->max_mr = le32_to_cpu(l->max_mr);
	a->max_pd = le32_to_cpu(l->max_pd);
	a->max_qp_rd_atom = le32_to_cpu(l->max_qp_rd_atom);
	a->max_qp_init_rd_atom = le32_to_cpu(l->max_qp_init_rd_atom);
	a->max_res_rd_atom = a->max_qp_rd_atom * a->max_qp;
	a->atomic_cap = IB_ATOMIC_HCA;
	a->max_ah = RNIC_IB_MAX_AH;
	if (rd->caps & RNIC_CAP_SRQ) {
		a->max_srq = RNIC_MAX_SRQN;
		a->max_srq_wr = le32_to_cpu(l->max_qp_wr);
		a->max_srq_sge = le32_to_cpu(l->max_sge);
		/* Only a process's SRQs resize (the provider gives the ring). */
		if (rd->caps & RNIC_CAP_RESIZE_SRQ && ibdev->ops.alloc_ucontext)
			a->device_cap_flags |= IB_DEVICE_SRQ_RESIZE;
	}
	/* Windows count against the MR quota (datasheet 14.12). */
	if (rd->caps & RNIC_CAP_MW && ibdev->ops.alloc_mw) {
		a->device_cap_flags |= IB_DEVICE_MEM_WINDOW |
				       IB_DEVICE_MEM_WINDOW_TYPE_2B;
		a->max_mw = min_t(u32, le32_to_cpu(l->max_mr),
				  RNIC_MAX_MW_INDEX);
	}
	if (rd->caps & RNIC_CAP_MULTICAST) {
		a->max_mcast_grp = RNIC_MCAST_MAX_GROUPS;
		a->max_mcast_qp_attach = RNIC_MCAST_MAX_QPS_PER_GROUP;
		a->max_total_mcast_qp_attach = RNIC_MCAST_MAX_GROUPS *
					       RNIC_MCAST_MAX_QPS_PER_GROUP;
	}
	a->max_pkeys = 1;
	a->local_ca_ack_delay = 15;
	if (rd->caps & RNIC_CAP_FAST_REG)
		a->max_fast_reg_page_list_len = RNIC_MAX_FAST_REG_PAGES;
	a->max_pi_fast_reg_page_list_len = 0;
	return 0;
}

static int rnic_query_port(struct ib_device *ibdev, u32 port,
			   struct ib_port_attr *a)
{
	struct rnic_ib *rib = to_rib(ibdev);
	struct net_device *ndev = rib->netdev;
	bool up;

	/* The core zeroed *a. */
	up = netif_running(ndev) && netif_carrier_ok(ndev);
	a->state = up ? IB_PORT_ACTIVE : IB_PORT_DOWN;
	a->phys_state = up ? IB_PORT_PHYS_STATE_LINK_UP :
			     IB_PORT_PHYS_STATE_DISABLED;
	a->max_mtu = IB_MTU_4096;
	a->active_mtu = iboe_get_mtu(READ_ONCE(ndev->mtu));
	if (!a->active_mtu)
		a->active_mtu = IB_MTU_256;
	a->gid_tbl_len = RNIC_GID_TABLE_LEN;
	a->port_cap_flags = IB_PORT_CM_SUP;
	a->max_msg_sz = 0x80000000;
	a->pkey_tbl_len = 1;
	a->max_vl_num = 1;
	/* A software device has no line rate; ib_get_eth_speed would warn. */
	a->active_speed = IB_SPEED_EDR;
	a->active_width = IB_WIDTH_1X;
	return 0;
}

static int rnic_query_pkey(struct ib_device *ibdev, u32 port, u16 index,
			   u16 *pkey)
{
	if (index)
		return -EINVAL;
	*pkey = IB_DEFAULT_PKEY_FULL;
	return 0;
}

static int rnic_get_port_immutable(struct ib_device *ibdev, u32 port,
				   struct ib_port_immutable *im)
{
	struct ib_port_attr attr;
	int ret;

	im->core_cap_flags = RDMA_CORE_PORT_IBA_ROCE_UDP_ENCAP;
	ret = ib_query_port(ibdev, port, &attr);
	if (ret)
		return ret;
	im->pkey_tbl_len = attr.pkey_tbl_len;
	im->gid_tbl_len = attr.gid_tbl_len;
	im->max_mad_size = IB_MGMT_MAD_SIZE;
	return 0;
}

static enum rdma_link_layer rnic_get_link_layer(struct ib_device *ibdev,
						u32 port)
{
	return IB_LINK_LAYER_ETHERNET;
}

/*
 * The device's GID table follows the core's, entry for entry, as the OS
 * adds and removes the netdev's addresses: QPs and AHs then send from the
 * addresses the OS owns, and the device takes packets for them. The device
 * refuses an IPv4 address another function has; the core then leaves the
 * entry out and says so.
 */
static int rnic_set_gid(const struct ib_gid_attr *attr, const union ib_gid *gid)
{
	struct rnic_ib *rib = to_rib(attr->device);
	struct rnic_set_gid_req req = {
		.index = cpu_to_le32(attr->index),
	};
	int ret;

	if (attr->index >= RNIC_GID_TABLE_LEN)
		return -EINVAL;
	if (!(rib->rd->caps & RNIC_CAP_GID_TABLE))
		return 0;
	if (gid) {
		req.flags = cpu_to_le32(RNIC_GID_VALID);
		memcpy(req.gid, gid->raw, sizeof(req.gid));
	}
	ret = rnic_cmd(rib->rd, RNIC_CMD_SET_GID, &req, sizeof(req), NULL, 0);
	/* A failed clear is a device that is gone, with its table. */
	if (ret && gid)
		ibdev_warn(&rib->ibdev, "GID %u %pI6c: the device refused it (%d)\n",
			   attr->index, req.gid, ret);
	else
		ibdev_dbg(&rib->ibdev, "GID %u: %pI6c (%d)\n", attr->index,
			  req.gid, ret);
	return ret;
}

static int rnic_add_gid(const struct ib_gid_attr *attr, void **context)
{
	return rnic_set_gid(attr, &attr->gid);
}

static int rnic_del_gid(const struct ib_gid_attr *attr, void **context)
{
	return rnic_set_gid(attr, NULL);
}

static void rnic_get_dev_fw_str(struct ib_device *ibdev, char *str)
{
	u32 fw = le32_to_cpu(to_rib(ibdev)->rd->info.fw_version);

	snprintf(str, IB_FW_VERSION_NAME_MAX, "%u.%u.%u", (fw >> 16) & 0xff,
		 (fw >> 8) & 0xff, fw & 0xff);
}

static const struct rdma_stat_desc rnic_ib_stat_descs[] = {
	[RNIC_STAT_SEND_WRS].name = "send_wrs",
	[RNIC_STAT_RECV_WRS].name = "recv_wrs",
	[RNIC_STAT_COMPLETIONS].name = "completions",
	[RNIC_STAT_COMPLETION_ERRORS].name = "completion_errors",
	[RNIC_STAT_COMPLETION_EVENTS].name = "completion_events",
	[RNIC_STAT_ASYNC_EVENTS].name = "async_events",
	[RNIC_STAT_EQ_INTERRUPTS].name = "eq_interrupts",
	[RNIC_STAT_POSTS_REFUSED].name = "posts_refused",
};

static_assert(ARRAY_SIZE(rnic_ib_stat_descs) == RNIC_NUM_STATS);

static struct rdma_hw_stats *rnic_alloc_hw_port_stats(struct ib_device *ibdev,
						      u32 port)
{
	return rdma_alloc_hw_stats_struct(rnic_ib_stat_descs, RNIC_NUM_STATS,
					  RDMA_HW_STATS_DEFAULT_LIFESPAN);
}

static int rnic_get_hw_stats(struct ib_device *ibdev,
			     struct rdma_hw_stats *stats, u32 port, int index)
{
	struct rnic_ib *rib = to_rib(ibdev);
	int i;

	for (i = 0; i < RNIC_NUM_STATS; i++)
		stats->value[i] = atomic64_read(&rib->stats[i]);
	return RNIC_NUM_STATS;
}

static const struct ib_device_ops rnic_ib_ops = {
	.owner = THIS_MODULE,
	.driver_id = RDMA_DRIVER_UNKNOWN,

	.add_gid = rnic_add_gid,
	.alloc_hw_port_stats = rnic_alloc_hw_port_stats,
	.alloc_mr = rnic_alloc_mr,
	.alloc_pd = rnic_alloc_pd,
	.create_ah = rnic_create_ah,
	.create_cq = rnic_create_cq,
	.create_qp = rnic_create_qp,
	.dealloc_pd = rnic_dealloc_pd,
	.del_gid = rnic_del_gid,
	.dereg_mr = rnic_dereg_mr,
	.destroy_ah = rnic_destroy_ah,
	.destroy_cq = rnic_destroy_cq,
	.destroy_qp = rnic_destroy_qp,
	.get_dev_fw_str = rnic_get_dev_fw_str,
	.get_dma_mr = rnic_get_dma_mr,
	.get_hw_stats = rnic_get_hw_stats,
	.get_link_layer = rnic_get_link_layer,
	.get_port_immutable = rnic_get_port_immutable,
	.map_mr_sg = rnic_map_mr_sg,
	.modify_qp = rnic_modify_qp,
	.poll_cq = rnic_poll_cq,
	.post_recv = rnic_post_recv,
	.post_send = rnic_post_send,
	.query_device = rnic_query_device_attr,
	.query_pkey = rnic_query_pkey,
	.query_port = rnic_query_port,
	.query_qp = rnic_query_qp,
	.req_notify_cq = rnic_req_notify_cq,

	INIT_RDMA_OBJ_SIZE(ib_ah, rnic_ah, ibah),
	INIT_RDMA_OBJ_SIZE(ib_cq, rnic_cq, ibcq),
	INIT_RDMA_OBJ_SIZE(ib_pd, rnic_pd, ibpd),
	INIT_RDMA_OBJ_SIZE(ib_qp, rnic_qp, ibqp),
};

/*
 * The core lets its kernel clients (MAD, CM, ULPs) onto a device only when it
 * has every op of a kernel verbs provider, reg_user_mr among them; rnic's
 * kernel users need the DMA key and the GSI QP besides.
 */
static const struct ib_device_ops rnic_ib_kverbs_ops = {
	.reg_user_mr = rnic_reg_user_mr,
};

/* User verbs: contexts with a doorbell page of their own (ABI 1.9). */
static const struct ib_device_ops rnic_ib_uverbs_ops = {
	.uverbs_abi_ver = RNIC_UVERBS_ABI_VERSION,

	.alloc_ucontext = rnic_alloc_ucontext,
	.dealloc_ucontext = rnic_dealloc_ucontext,
	.disassociate_ucontext = rnic_disassociate_ucontext,
	.mmap = rnic_mmap,
	.mmap_free = rnic_mmap_free,

	INIT_RDMA_OBJ_SIZE(ib_ucontext, rnic_ucontext, ibuc),
};

/*
 * Memory windows (CAP_MW), for processes: their binds are WQEs the provider
 * writes; kernel ULPs do not bind windows.
 */
static const struct ib_device_ops rnic_ib_mw_ops = {
	.alloc_mw = rnic_alloc_mw,
	.dealloc_mw = rnic_dealloc_mw,

	INIT_RDMA_OBJ_SIZE(ib_mw, rnic_mw, ibmw),
};

/* Resizing a process's CQ (CAP_RESIZE_CQ): the provider gives the new ring. */
static const struct ib_device_ops rnic_ib_resize_cq_ops = {
	.resize_cq = rnic_resize_cq,
};

/* UD multicast (CAP_MULTICAST), for the kernel's QPs and processes'. */
static const struct ib_device_ops rnic_ib_mcast_ops = {
	.attach_mcast = rnic_attach_mcast,
	.detach_mcast = rnic_detach_mcast,
};

/* Shared receive queues (CAP_SRQ), the kernel's and processes'. */
static const struct ib_device_ops rnic_ib_srq_ops = {
	.create_srq = rnic_create_srq,
	.destroy_srq = rnic_destroy_srq,
	.modify_srq = rnic_modify_srq,
	.post_srq_recv = rnic_post_srq_recv,
	.query_srq = rnic_query_srq,

	INIT_RDMA_OBJ_SIZE(ib_srq, rnic_srq, ibsrq),
};

static void rnic_ib_port_event(struct rnic_ib *rib, enum ib_event_type type)
{
	struct ib_event ev = {
		.device = &rib->ibdev,
		.element.port_num = 1,
		.event = type,
	};

	ib_dispatch_event(&ev);
}

/* The port follows the interface: up with a carrier is ACTIVE. */
static int rnic_ib_netdev_event(struct notifier_block *nb, unsigned long event,
				void *ptr)
{
	struct net_device *ndev = netdev_notifier_info_to_dev(ptr);
	struct rnic_ib *rib = container_of(nb, struct rnic_ib, nb);

	if (ndev != rib->netdev)
		return NOTIFY_DONE;
	switch (event) {
	case NETDEV_UP:
	case NETDEV_DOWN:
	case NETDEV_CHANGE:
		if (netif_running(ndev) && netif_carrier_ok(ndev))
			rnic_ib_port_event(rib, IB_EVENT_PORT_ACTIVE);
		else
			rnic_ib_port_event(rib, IB_EVENT_PORT_ERR);
		break;
	default:
		break;
	}
	return NOTIFY_DONE;
}

/**
 * rnic_ib_add - register the function's RDMA device
 * @rd: the function, its command queue running and its netdev created
 *
 * Without CAP_RDMA_RC or a network interface there is no RDMA device (and
 * that is no error). Without CAP_FAST_REG (the core's ib_alloc_pd needs the
 * DMA key) or CAP_GSI (the MAD layer and so the CMs need QP 1) the device is
 * registered without reg_user_mr, which keeps the core's kernel clients off
 * it: `rdma link` shows it, nothing uses it, nothing fails.
 */
int rnic_ib_add(struct rnic_dev *rd)
{
	struct device *dev = &rd->pdev->dev;
	struct rnic_ib *rib;
	struct ib_device *ibdev;
	int ret;

	if (!(rd->caps & RNIC_CAP_RDMA_RC) || !rd->netdev)
		return 0;

	rib = ib_alloc_device(rnic_ib, ibdev);
	if (!rib)
		return -ENOMEM;
	rib->rd = rd;
	rib->netdev = rd->netdev;
	xa_init(&rib->cqs);
	xa_init(&rib->qps);
	xa_init(&rib->srqs);
	spin_lock_init(&rib->db_lock);
	spin_lock_init(&rib->upages_lock);
	bitmap_zero(rib->upages, RNIC_DB_PAGES);
	atomic_set(&rib->ahs, 0);
	rib->db_pages = min_t(u32, le32_to_cpu(rd->info.limits.doorbell_pages),
			      RNIC_DB_PAGES);

	ibdev = &rib->ibdev;
	/* The PCI device is the parent: libibverbs matches providers by its IDs. */
	ibdev->dev.parent = dev;
	ibdev->node_type = RDMA_NODE_IB_CA;
	ibdev->phys_port_cnt = 1;
	ibdev->num_comp_vectors = 1;
	addrconf_addr_eui48((u8 *)&ibdev->node_guid, rd->info.mac);
	strscpy(ibdev->node_desc, "rnic", sizeof(ibdev->node_desc));
	ib_set_device_ops(ibdev, &rnic_ib_ops);
	if ((rd->caps & RNIC_KVERBS_CAPS) == RNIC_KVERBS_CAPS)
		ib_set_device_ops(ibdev, &rnic_ib_kverbs_ops);
	else
		dev_info(dev, "the device lacks caps %#llx (kernel memory keys, GSI QP): kernel RDMA users do not see the RDMA device\n",
			 RNIC_KVERBS_CAPS & ~rd->caps);
	/*
	 * ib_uverbs serves a device with alloc_ucontext; reg_user_mr, which
	 * processes need, comes with the kernel verbs' caps above.
	 */
	if ((rd->caps & RNIC_UVERBS_CAPS) == RNIC_UVERBS_CAPS &&
	    rib->db_pages > RNIC_DB_PAGE_USER) {
		ib_set_device_ops(ibdev, &rnic_ib_uverbs_ops);
		if (rd->caps & RNIC_CAP_MW)
			ib_set_device_ops(ibdev, &rnic_ib_mw_ops);
		if (rd->caps & RNIC_CAP_RESIZE_CQ)
			ib_set_device_ops(ibdev, &rnic_ib_resize_cq_ops);
	}
	if (rd->caps & RNIC_CAP_SRQ)
		ib_set_device_ops(ibdev, &rnic_ib_srq_ops);
	if (rd->caps & RNIC_CAP_MULTICAST)
		ib_set_device_ops(ibdev, &rnic_ib_mcast_ops);

	ret = rnic_ib_eq_create(rib);
	if (ret)
		goto err_dealloc;
	ret = request_irq(pci_irq_vector(rd->pdev, RNIC_VEC_EQ),
			  rnic_ib_eq_irq, 0, "rnic-eq", rib);
	if (ret)
		goto err_eq;
	ret = ib_device_set_netdev(ibdev, rd->netdev, 1);
	if (ret)
		goto err_irq;
	ret = ib_register_device(ibdev, "rnic%d", dev);
	if (ret) {
		dev_err(dev, "cannot register the RDMA device: %d\n", ret);
		goto err_irq;
	}
	rib->nb.notifier_call = rnic_ib_netdev_event;
	ret = register_netdevice_notifier(&rib->nb);
	if (ret)
		goto err_unregister;
	rd->ib = rib;
	dev_info(dev, "RDMA device %s on %s\n", dev_name(&ibdev->dev),
		 netdev_name(rd->netdev));
	return 0;

err_unregister:
	ib_unregister_device(ibdev);
err_irq:
	free_irq(pci_irq_vector(rd->pdev, RNIC_VEC_EQ), rib);
err_eq:
	rnic_ib_eq_destroy(rib);
err_dealloc:
	ib_dealloc_device(ibdev);
	return ret;
}

/*
 * Unregisters the RDMA device: the core has every client (kernel ULPs) let
 * go and destroys what is left through the driver's destroy calls, which
 * still reach the device. Then the event queue goes.
 */
void rnic_ib_remove(struct rnic_dev *rd)
{
	struct rnic_ib *rib = rd->ib;

	if (!rib)
		return;
	unregister_netdevice_notifier(&rib->nb);
	ib_unregister_device(&rib->ibdev);
	free_irq(pci_irq_vector(rd->pdev, RNIC_VEC_EQ), rib);
	rnic_ib_eq_destroy(rib);
	WARN_ON(!xa_empty(&rib->cqs) || !xa_empty(&rib->qps));
	xa_destroy(&rib->cqs);
	xa_destroy(&rib->qps);
	rd->ib = NULL;
	ib_dealloc_device(&rib->ibdev);
}
