// SPDX-License-Identifier: GPL-2.0
/*
 * rnic: shared receive queues (CAP_SRQ, datasheet 14.4). A process's SRQ has
 * its ring in its memory (CreateSrqReq, pinned here) and its doorbell slot
 * on the context's page; the process posts to it itself (the core never
 * calls post_srq_recv for it). A kernel SRQ has a coherent ring on the
 * kernel's doorbell page, posted by rnic_post_srq_recv. RC QPs created with
 * an SRQ take their receives from it. A process's SRQ resizes (RESIZE_SRQ,
 * the new ring from its provider); the kernel's keeps its size.
 * SRQ_LIMIT_REACHED comes through the EQ
 * to the SRQ's event handler (for a process's SRQ the core's, behind
 * ibv_get_async_event).
 */
#include <linux/log2.h>
#include <rdma/uverbs_ioctl.h>

#include "rnic_ib.h"

static void rnic_srq_destroy_cmd(struct rnic_ib *rib, u32 srqn)
{
	struct rnic_object_req req = { .handle = cpu_to_le32(srqn) };

	/* A function reset under us has destroyed it already. */
	rnic_cmd(rib->rd, RNIC_CMD_DESTROY_SRQ, &req, sizeof(req), NULL, 0);
}

static void rnic_srq_unpin(struct rnic_ib *rib, struct rnic_srq *srq)
{
	rnic_ib_ring_unpin(rib, srq->umem, &srq->pbl);
	srq->umem = NULL;
}

/* The kernel's SRQ: a coherent ring, the slot on the kernel's page. */
static int rnic_create_kernel_srq(struct rnic_ib *rib, struct rnic_srq *srq,
				  struct ib_srq_init_attr *init)
{
	const struct rnic_limits *l = &rib->rd->info.limits;
	struct ib_srq_attr *a = &init->attr;
	struct rnic_create_srq_req req = {};
	struct rnic_create_srq_resp resp;
	struct rnic_wq *wq = &srq->wq;
	u32 entries, max_sge;
	int ret;

	entries = roundup_pow_of_two(max_t(u32, a->max_wr, 2));
	max_sge = max_t(u32, a->max_sge, 1);
	if (a->max_wr > le32_to_cpu(l->max_qp_wr) ||
	    entries > le32_to_cpu(l->max_qp_wr) ||
	    max_sge > le32_to_cpu(l->max_sge) || a->srq_limit >= entries)
		return -EINVAL;
	spin_lock_init(&wq->lock);
	wq->entries = entries;
	wq->stride = rnic_rq_stride(max_sge);
	wq->max_sge = max_sge;
	wq->posted = 0;
	atomic_set(&srq->completed, 0);
	ret = rnic_ib_buf_alloc(rib, &wq->buf, (size_t)entries * wq->stride);
	if (ret)
		return ret;
	rnic_ib_page_list(&wq->buf, &req.ring);
	req.pdn = cpu_to_le32(to_rpd(srq->ibsrq.pd)->pdn);
	req.entries = cpu_to_le32(entries);
	req.max_sge = cpu_to_le32(max_sge);
	req.srq_limit = cpu_to_le32(a->srq_limit);
	ret = rnic_ib_create_on_page(rib, RNIC_DB_PAGE_IB, RNIC_CMD_CREATE_SRQ,
				     &req, sizeof(req), &req.doorbell_page,
				     &resp, sizeof(resp));
	if (ret)
		goto err_buf;
	srq->srqn = le32_to_cpu(resp.srqn);
	srq->entries = entries;
	srq->max_sge = max_sge;
	wq->db_page = le32_to_cpu(resp.doorbell.page);
	wq->db_slot = le32_to_cpu(resp.doorbell.slot);
	wq->db = rib->rd->db + rnic_db_slot_offset(wq->db_page, wq->db_slot);
	ret = xa_insert(&rib->srqs, srq->srqn, srq, GFP_KERNEL);
	if (ret)
		goto err_destroy;
	a->max_wr = entries;
	a->max_sge = max_sge;
	return 0;

err_destroy:
	rnic_srq_destroy_cmd(rib, srq->srqn);
err_buf:
	rnic_ib_buf_free(rib, &wq->buf);
	return ret;
}

int rnic_create_srq(struct ib_srq *ibsrq, struct ib_srq_init_attr *init,
		    struct ib_udata *udata)
{
	struct rnic_ib *rib = to_rib(ibsrq->device);
	struct rnic_srq *srq = to_rsrq(ibsrq);
	const struct rnic_limits *l = &rib->rd->info.limits;
	struct rnic_uverbs_create_srq_req ureq;
	struct rnic_uverbs_create_srq_resp uresp = {};
	struct rnic_create_srq_req req = {};
	struct rnic_create_srq_resp resp;
	struct ib_srq_attr *a = &init->attr;
	struct rnic_ucontext *uc;
	u32 stride;
	int ret;

	if (init->srq_type != IB_SRQT_BASIC)
		return -EOPNOTSUPP;
	if (!udata)
		return rnic_create_kernel_srq(rib, srq, init);
	uc = rdma_udata_to_drv_context(udata, struct rnic_ucontext, ibuc);
	ret = rnic_udata_in(udata, &ureq, sizeof(ureq));
	if (ret)
		return ret;
	if (ureq.reserved || ureq.entries < 2 ||
	    !is_power_of_2(ureq.entries) || ureq.entries < a->max_wr ||
	    ureq.entries > le32_to_cpu(l->max_qp_wr) || !a->max_sge ||
	    a->max_sge > le32_to_cpu(l->max_sge) ||
	    a->srq_limit >= ureq.entries) {
		ibdev_dbg(&rib->ibdev, "user SRQ of %u entries (max_wr %u, max_sge %u, limit %u) refused\n",
			  ureq.entries, a->max_wr, a->max_sge, a->srq_limit);
		return -EINVAL;
	}
	stride = rnic_rq_stride(a->max_sge);
	mutex_init(&srq->resize_lock);
	srq->uctx = uc;
	srq->entries = ureq.entries;
	srq->max_sge = a->max_sge;
	ret = rnic_ib_ring_pin(rib, ureq.ring_va, (size_t)ureq.entries * stride,
			       &srq->umem, &srq->pbl, &req.ring);
	if (ret)
		return ret;
	req.pdn = cpu_to_le32(to_rpd(ibsrq->pd)->pdn);
	req.entries = cpu_to_le32(ureq.entries);
	req.max_sge = cpu_to_le32(a->max_sge);
	req.srq_limit = cpu_to_le32(a->srq_limit);
	ret = rnic_ib_create_on_page(rib, uc->db_page, RNIC_CMD_CREATE_SRQ,
				     &req, sizeof(req), &req.doorbell_page,
				     &resp, sizeof(resp));
	if (ret)
		goto err_unpin;
	srq->srqn = le32_to_cpu(resp.srqn);
	if (WARN_ON_ONCE(le32_to_cpu(resp.doorbell.page) != uc->db_page ||
			 !srq->srqn || srq->srqn > RNIC_MAX_SRQN)) {
		ret = -EIO;
		goto err_destroy;
	}
	uresp.srqn = srq->srqn;
	uresp.doorbell_slot = le32_to_cpu(resp.doorbell.slot);
	uresp.stride = stride;
	ret = rnic_udata_out(udata, &uresp, sizeof(uresp));
	if (ret)
		goto err_destroy;
	ret = xa_insert(&rib->srqs, srq->srqn, srq, GFP_KERNEL);
	if (ret)
		goto err_destroy;
	atomic_inc(&uc->objects);
	a->max_wr = ureq.entries;
	return 0;

err_destroy:
	rnic_srq_destroy_cmd(rib, srq->srqn);
err_unpin:
	rnic_srq_unpin(rib, srq);
	return ret;
}

/*
 * A process's SRQ moves to the new ring its provider gives (RESIZE_SRQ): the
 * device copies the receives posted and not taken yet to their indexes
 * there, and the old ring is unpinned. The provider does not post meanwhile
 * and keeps its producer index; the armed limit stays.
 */
static int rnic_resize_user_srq(struct rnic_ib *rib, struct rnic_srq *srq,
				u32 max_wr, struct ib_udata *udata)
{
	u32 max = le32_to_cpu(rib->rd->info.limits.max_qp_wr);
	struct rnic_uverbs_resize_srq_req ureq;
	struct rnic_resize_srq_req req = {};
	struct rnic_ib_pbl pbl = {};
	struct ib_umem *umem = NULL;
	int ret;

	ret = rnic_udata_in(udata, &ureq, sizeof(ureq));
	if (ret)
		return ret;
	if (!max_wr || ureq.reserved || ureq.entries < 2 ||
	    !is_power_of_2(ureq.entries) || ureq.entries < max_wr ||
	    ureq.entries > max) {
		ibdev_dbg(&rib->ibdev, "SRQ %u: %u entries (max_wr %u) refused\n",
			  srq->srqn, ureq.entries, max_wr);
		return -EINVAL;
	}
	ret = rnic_ib_ring_pin(rib, ureq.ring_va, (size_t)ureq.entries *
			       rnic_rq_stride(srq->max_sge), &umem, &pbl,
			       &req.ring);
	if (ret)
		return ret;
	req.entries = cpu_to_le32(ureq.entries);
	req.srqn = cpu_to_le32(srq->srqn);
	/* BAD_PARAM: not above the armed limit, or below the receives pending. */
	ret = rnic_cmd_quiet(rib->rd, RNIC_CMD_RESIZE_SRQ, &req, sizeof(req),
			     NULL, 0, RNIC_ST_BAD_PARAM);
	if (ret) {
		rnic_ib_ring_unpin(rib, umem, &pbl);
		return ret;
	}
	/* The device reads only the new ring now: unpin the old one. */
	rnic_srq_unpin(rib, srq);
	srq->pbl = pbl;
	srq->umem = umem;
	srq->entries = ureq.entries;
	return 0;
}

/*
 * The size (IB_SRQ_MAX_WR: a process's SRQ, its new ring in the request
 * data; the kernel's SRQs keep their size, -EOPNOTSUPP), then the limit
 * (re)armed.
 */
int rnic_modify_srq(struct ib_srq *ibsrq, struct ib_srq_attr *attr,
		    enum ib_srq_attr_mask mask, struct ib_udata *udata)
{
	struct rnic_ib *rib = to_rib(ibsrq->device);
	struct rnic_srq *srq = to_rsrq(ibsrq);
	struct rnic_modify_srq_req req = {};
	int ret = 0;

	if (mask & ~(IB_SRQ_MAX_WR | IB_SRQ_LIMIT))
		return -EINVAL;
	if (mask & IB_SRQ_MAX_WR) {
		if (!srq->uctx || !udata ||
		    !(rib->rd->caps & RNIC_CAP_RESIZE_SRQ))
			return -EOPNOTSUPP;
	} else if (udata && udata->inlen &&
		   !ib_is_udata_cleared(udata, 0, udata->inlen)) {
		return -EOPNOTSUPP;
	}
	if (srq->uctx)
		mutex_lock(&srq->resize_lock);
	if (mask & IB_SRQ_MAX_WR) {
		ret = rnic_resize_user_srq(rib, srq, attr->max_wr, udata);
		if (ret)
			goto out;
	}
	if (!(mask & IB_SRQ_LIMIT))
		goto out;
	if (attr->srq_limit >= srq->entries) {
		ret = -EINVAL;
		goto out;
	}
	req.srqn = cpu_to_le32(srq->srqn);
	req.attr_mask = cpu_to_le32(RNIC_SRQ_ATTR_LIMIT);
	req.srq_limit = cpu_to_le32(attr->srq_limit);
	ret = rnic_cmd(rib->rd, RNIC_CMD_MODIFY_SRQ, &req, sizeof(req), NULL,
		       0);
out:
	if (srq->uctx)
		mutex_unlock(&srq->resize_lock);
	return ret;
}

int rnic_query_srq(struct ib_srq *ibsrq, struct ib_srq_attr *attr)
{
	struct rnic_ib *rib = to_rib(ibsrq->device);
	struct rnic_srq *srq = to_rsrq(ibsrq);
	struct rnic_object_req req = { .handle = cpu_to_le32(srq->srqn) };
	struct rnic_query_srq_resp resp;
	int ret;

	ret = rnic_cmd(rib->rd, RNIC_CMD_QUERY_SRQ, &req, sizeof(req), &resp,
		       sizeof(resp));
	if (ret)
		return ret;
	attr->max_wr = le32_to_cpu(resp.max_wr);
	attr->max_sge = le32_to_cpu(resp.max_sge);
	attr->srq_limit = le32_to_cpu(resp.srq_limit);
	return 0;
}

int rnic_destroy_srq(struct ib_srq *ibsrq, struct ib_udata *udata)
{
	struct rnic_ib *rib = to_rib(ibsrq->device);
	struct rnic_srq *srq = to_rsrq(ibsrq);

	xa_erase(&rib->srqs, srq->srqn);
	/* Wait out the event handler that may hold the SRQ. */
	synchronize_irq(pci_irq_vector(rib->rd->pdev, RNIC_VEC_EQ));
	rnic_srq_destroy_cmd(rib, srq->srqn);
	if (!srq->uctx) {
		rnic_ib_buf_free(rib, &srq->wq.buf);
		return 0;
	}
	/* The device has let go of the ring: unpin it. */
	rnic_srq_unpin(rib, srq);
	atomic_dec(&srq->uctx->objects);
	return 0;
}

/*
 * Posting to a kernel SRQ: the WQEs carry the consumer's wr_id, which the
 * device returns in the CQE, so completions need no table; they may come in
 * any order (on any QP), and each frees one entry (datasheet 14.4: the device
 * takes WQEs in order and has read a WQE when it completes, so an entry is
 * rewritten only after the device took it).
 */
int rnic_post_srq_recv(struct ib_srq *ibsrq, const struct ib_recv_wr *wr,
		       const struct ib_recv_wr **bad_wr)
{
	struct rnic_ib *rib = to_rib(ibsrq->device);
	struct rnic_srq *srq = to_rsrq(ibsrq);
	struct rnic_wq *wq = &srq->wq;
	struct rnic_recv_wqe *wqe;
	struct rnic_sge *sge;
	unsigned long flags;
	u32 start;
	int ret = 0;
	int i;

	spin_lock_irqsave(&wq->lock, flags);
	start = wq->posted;
	for (; wr; wr = wr->next) {
		if (wq->posted - (u32)atomic_read(&srq->completed) >=
		    wq->entries) {
			ret = -ENOMEM;
			break;
		}
		if (wr->num_sge > wq->max_sge) {
			ret = -EINVAL;
			break;
		}
		wqe = wq->buf.va + (wq->posted & (wq->entries - 1)) * wq->stride;
		wqe->wr_id = cpu_to_le64(wr->wr_id);
		wqe->num_sge = cpu_to_le32(wr->num_sge);
		wqe->reserved = 0;
		sge = (struct rnic_sge *)(wqe + 1);
		for (i = 0; i < wr->num_sge; i++) {
			sge[i].addr = cpu_to_le64(wr->sg_list[i].addr);
			sge[i].length = cpu_to_le32(wr->sg_list[i].length);
			sge[i].lkey = cpu_to_le32(wr->sg_list[i].lkey);
		}
		wq->posted++;
	}
	if (ret) {
		*bad_wr = wr;
		rnic_ib_count(rib, RNIC_STAT_POSTS_REFUSED, 1);
	}
	if (wq->posted != start) {
		rnic_ib_count(rib, RNIC_STAT_RECV_WRS, wq->posted - start);
		wmb();	/* the WQEs before the posted count */
		iowrite32(wq->posted, wq->db);
		rnic_ib_ring(rib, wq->db_page, wq->db_slot);
	}
	spin_unlock_irqrestore(&wq->lock, flags);
	return ret;
}
