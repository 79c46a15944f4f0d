// SPDX-License-Identifier: GPL-2.0
/*
 * rnic: queue pairs (RC, UD and the GSI QP; for processes RC, UC and UD)
 * and the kernel's datapath. A process's QP has its rings in its memory and
 * posts through its own doorbell page (rnic_create_user_qp). A kernel QP's
 * send and receive rings are coherent memory named by page lists; a WQE
 * carries its queue index as wr_id, so a completion names the entry it
 * completes and the driver returns the consumer's wr_id from its own table.
 * Posting is the doorbell protocol of datasheet 7.5: WQEs, posted count,
 * RUNG_BITMAP bit, NOTIFY_REQUEST.
 */
#include <linux/log2.h>
#include <rdma/uverbs_ioctl.h>

#include "rnic_ib.h"

#define RNIC_QP_ATTR_MASK	(IB_QP_STATE | IB_QP_CUR_STATE |	\
				 IB_QP_EN_SQD_ASYNC_NOTIFY |		\
				 IB_QP_ACCESS_FLAGS | IB_QP_PKEY_INDEX |	\
				 IB_QP_PORT | IB_QP_QKEY | IB_QP_AV |	\
				 IB_QP_PATH_MTU | IB_QP_TIMEOUT |	\
				 IB_QP_RETRY_CNT | IB_QP_RNR_RETRY |	\
				 IB_QP_RQ_PSN | IB_QP_MAX_QP_RD_ATOMIC |	\
				 IB_QP_MIN_RNR_TIMER | IB_QP_SQ_PSN |	\
				 IB_QP_MAX_DEST_RD_ATOMIC | IB_QP_DEST_QPN)

/* The IB mask bits have rnic's values (both are ibverbs'). */
static_assert(IB_QP_STATE == RNIC_ATTR_STATE);
static_assert(IB_QP_QKEY == RNIC_ATTR_QKEY);
static_assert(IB_QP_AV == RNIC_ATTR_AV);
static_assert(IB_QP_MIN_RNR_TIMER == RNIC_ATTR_MIN_RNR_TIMER);
static_assert(IB_QP_MAX_DEST_RD_ATOMIC == RNIC_ATTR_MAX_DEST_RD_ATOMIC);
static_assert(IB_QP_DEST_QPN == RNIC_ATTR_DEST_QPN);

static int rnic_wq_alloc(struct rnic_ib *rib, struct rnic_wq *wq, u32 entries,
			 u32 stride, u32 max_sge)
{
	int ret;

	spin_lock_init(&wq->lock);
	wq->entries = entries;
	wq->stride = stride;
	wq->max_sge = max_sge;
	wq->wr_ids = kcalloc(entries, sizeof(u64), GFP_KERNEL);
	if (!wq->wr_ids)
		return -ENOMEM;
	ret = rnic_ib_buf_alloc(rib, &wq->buf, (size_t)entries * stride);
	if (ret) {
		kfree(wq->wr_ids);
		wq->wr_ids = NULL;
	}
	return ret;
}

static void rnic_wq_free(struct rnic_ib *rib, struct rnic_wq *wq)
{
	rnic_ib_buf_free(rib, &wq->buf);
	kfree(wq->wr_ids);
	wq->wr_ids = NULL;
}

static void rnic_wq_set_db(struct rnic_ib *rib, struct rnic_wq *wq,
			   const struct rnic_doorbell_slot *slot)
{
	wq->db_page = le32_to_cpu(slot->page);
	wq->db_slot = le32_to_cpu(slot->slot);
	wq->db = rib->rd->db + rnic_db_slot_offset(wq->db_page, wq->db_slot);
}

static void rnic_qp_fill_req(struct rnic_qp *qp, struct ib_qp_init_attr *init,
			     struct rnic_create_qp_req *req, u32 sq_entries,
			     u32 rq_entries, u32 send_sge, u32 recv_sge)
{
	req->pdn = cpu_to_le32(to_rpd(qp->ibqp.pd)->pdn);
	req->send_cqn = cpu_to_le32(to_rcq(init->send_cq)->cqn);
	req->recv_cqn = cpu_to_le32(to_rcq(init->recv_cq)->cqn);
	req->sq_entries = cpu_to_le32(sq_entries);
	req->rq_entries = cpu_to_le32(rq_entries);
	req->max_send_sge = cpu_to_le32(send_sge);
	req->max_recv_sge = cpu_to_le32(recv_sge);
	req->max_inline_data = cpu_to_le32(qp->max_inline);
	req->qp_type = qp->qp_type;
	req->sq_sig_all = qp->sig_all;
}

/* After CREATE_QP: the slots, and the QP in the xarray the EQ reads. */
static int rnic_qp_created(struct rnic_ib *rib, struct rnic_qp *qp,
			   const struct rnic_create_qp_resp *resp)
{
	qp->qpn = le32_to_cpu(resp->qpn);
	rnic_wq_set_db(rib, &qp->sq, &resp->sq_doorbell);
	rnic_wq_set_db(rib, &qp->rq, &resp->rq_doorbell);
	qp->state = RNIC_QPS_RESET;
	qp->ibqp.qp_num = qp->qpn;
	return xa_insert(&rib->qps, qp->qpn, qp, GFP_KERNEL);
}

static void rnic_qp_destroy_cmd(struct rnic_ib *rib, u32 qpn)
{
	struct rnic_object_req req = { .handle = cpu_to_le32(qpn) };

	/* A function reset under us has destroyed it already. */
	rnic_cmd(rib->rd, RNIC_CMD_DESTROY_QP, &req, sizeof(req), NULL, 0);
}

static void rnic_user_wq_free(struct rnic_ib *rib, struct rnic_wq *wq)
{
	rnic_ib_ring_unpin(rib, wq->umem, &wq->pbl);
	wq->umem = NULL;
	/* The kernel's one-entry receive ring of a QP without one. */
	rnic_ib_buf_free(rib, &wq->buf);
}

/* Pins a user QP's ring of @entries WQEs of @stride bytes at @va. */
static int rnic_user_wq_alloc(struct rnic_ib *rib, struct rnic_wq *wq,
			      u64 va, u32 entries, u32 stride, u32 max_sge,
			      struct rnic_page_list *pl)
{
	int ret;

	spin_lock_init(&wq->lock);
	wq->entries = entries;
	wq->stride = stride;
	wq->max_sge = max_sge;
	if (!entries) {
		/*
		 * No receive queue: the device wants one, so the QP gets a
		 * one-entry ring of kernel memory the device only reads
		 * (zeroes: a receive of no SGEs, should the process ring it).
		 */
		ret = rnic_ib_buf_alloc(rib, &wq->buf, stride);
		if (!ret)
			rnic_ib_page_list(&wq->buf, pl);
		return ret;
	}
	return rnic_ib_ring_pin(rib, va, (size_t)entries * stride, &wq->umem,
				&wq->pbl, pl);
}

/*
 * A QP of a process: its rings are the process's memory (CreateQpReq), of
 * the strides the device computes from the capabilities as asked (no
 * rounding up of SGEs: the provider computes the same strides), created on
 * the context's doorbell page. The process posts through its own slots; the
 * core never calls post_send or post_recv for it.
 */
static int rnic_create_user_qp(struct rnic_ib *rib, struct rnic_qp *qp,
			       struct ib_qp_init_attr *init,
			       struct ib_udata *udata)
{
	struct rnic_ucontext *uc = rdma_udata_to_drv_context(udata,
							      struct rnic_ucontext,
							      ibuc);
	u32 max_wr = le32_to_cpu(rib->rd->info.limits.max_qp_wr);
	struct ib_qp_cap *cap = &init->cap;
	struct rnic_uverbs_create_qp_req ureq;
	struct rnic_uverbs_create_qp_resp uresp = {};
	struct rnic_create_qp_req req = {};
	struct rnic_create_qp_resp resp;
	u32 sq_stride, rq_stride;
	int ret;

	ret = rnic_udata_in(udata, &ureq, sizeof(ureq));
	if (ret)
		return ret;
	if (init->srq) {
		/* Receives come from the SRQ: no receive queue at all. */
		if (qp->qp_type != RNIC_QPT_RC || ureq.rq_entries ||
		    ureq.rq_va)
			return -EINVAL;
		cap->max_recv_wr = 0;
		cap->max_recv_sge = 0;
	}
	if (!ureq.sq_entries || !is_power_of_2(ureq.sq_entries) ||
	    ureq.sq_entries < cap->max_send_wr || ureq.sq_entries > max_wr ||
	    (ureq.rq_entries && !is_power_of_2(ureq.rq_entries)) ||
	    ureq.rq_entries < cap->max_recv_wr || ureq.rq_entries > max_wr ||
	    (!ureq.rq_entries && ureq.rq_va)) {
		ibdev_dbg(&rib->ibdev, "user QP of %u/%u entries (caps %u/%u) refused\n",
			  ureq.sq_entries, ureq.rq_entries, cap->max_send_wr,
			  cap->max_recv_wr);
		return -EINVAL;
	}
	qp->uctx = uc;
	sq_stride = rnic_sq_stride(cap->max_send_sge, cap->max_inline_data);
	rq_stride = rnic_rq_stride(cap->max_recv_sge);
	ret = rnic_user_wq_alloc(rib, &qp->sq, ureq.sq_va, ureq.sq_entries,
				 sq_stride, cap->max_send_sge, &req.sq);
	if (ret)
		return ret;
	if (init->srq) {
		/* The device wants rq_entries, max_recv_sge and rq 0. */
		spin_lock_init(&qp->rq.lock);
		rnic_qp_fill_req(qp, init, &req, ureq.sq_entries, 0,
				 cap->max_send_sge, 0);
		req.srqn = cpu_to_le16(to_rsrq(init->srq)->srqn);
	} else {
		ret = rnic_user_wq_alloc(rib, &qp->rq, ureq.rq_va,
					 ureq.rq_entries, rq_stride,
					 cap->max_recv_sge, &req.rq);
		if (ret)
			goto err_sq;
		rnic_qp_fill_req(qp, init, &req, ureq.sq_entries,
				 max_t(u32, ureq.rq_entries, 1),
				 cap->max_send_sge, cap->max_recv_sge);
	}
	ret = rnic_ib_create_on_page(rib, uc->db_page, RNIC_CMD_CREATE_QP, &req,
				     sizeof(req), &req.doorbell_page, &resp,
				     sizeof(resp));
	if (ret)
		goto err_rq;
	if (WARN_ON_ONCE(le32_to_cpu(resp.sq_doorbell.page) != uc->db_page ||
			 le32_to_cpu(resp.rq_doorbell.page) != uc->db_page)) {
		ret = -EIO;
		goto err_destroy;
	}
	uresp.qpn = le32_to_cpu(resp.qpn);
	uresp.sq_slot = le32_to_cpu(resp.sq_doorbell.slot);
	uresp.rq_slot = le32_to_cpu(resp.rq_doorbell.slot);
	uresp.sq_stride = sq_stride;
	uresp.rq_stride = rq_stride;
	uresp.max_inline_data = qp->max_inline;
	ret = rnic_udata_out(udata, &uresp, sizeof(uresp));
	if (ret)
		goto err_destroy;
	ret = rnic_qp_created(rib, qp, &resp);
	if (ret)
		goto err_destroy;
	atomic_inc(&uc->objects);
	cap->max_send_wr = ureq.sq_entries;
	cap->max_recv_wr = ureq.rq_entries;
	return 0;

err_destroy:
	rnic_qp_destroy_cmd(rib, le32_to_cpu(resp.qpn));
err_rq:
	rnic_user_wq_free(rib, &qp->rq);
err_sq:
	rnic_user_wq_free(rib, &qp->sq);
	return ret;
}

int rnic_create_qp(struct ib_qp *ibqp, struct ib_qp_init_attr *init,
		   struct ib_udata *udata)
{
	struct rnic_ib *rib = to_rib(ibqp->device);
	struct rnic_qp *qp = to_rqp(ibqp);
	const struct rnic_limits *l = &rib->rd->info.limits;
	struct rnic_create_qp_req req = {};
	struct rnic_create_qp_resp resp;
	struct ib_qp_cap *cap = &init->cap;
	u32 sq_entries, rq_entries, send_sge, recv_sge;
	int ret;

	if (init->create_flags || init->rwq_ind_tbl)
		return -EOPNOTSUPP;
	/* Receives from an SRQ (rnic_ib_srq.c): RC QPs only. */
	if (init->srq && init->qp_type != IB_QPT_RC)
		return -EINVAL;
	switch (init->qp_type) {
	case IB_QPT_RC:
		qp->qp_type = RNIC_QPT_RC;
		break;
	case IB_QPT_UC:
		/* Processes only: the kernel's post_send knows RC and UD. */
		if (!udata || !(rib->rd->caps & RNIC_CAP_UC))
			return -EOPNOTSUPP;
		qp->qp_type = RNIC_QPT_UC;
		break;
	case IB_QPT_UD:
		if (!(rib->rd->caps & RNIC_CAP_UD))
			return -EOPNOTSUPP;
		qp->qp_type = RNIC_QPT_UD;
		break;
	case IB_QPT_GSI:
		if (udata || !(rib->rd->caps & RNIC_CAP_GSI))
			return -EOPNOTSUPP;
		qp->qp_type = RNIC_QPT_GSI;
		break;
	default:
		return -EOPNOTSUPP;
	}
	if (cap->max_send_wr > le32_to_cpu(l->max_qp_wr) ||
	    cap->max_recv_wr > le32_to_cpu(l->max_qp_wr) ||
	    cap->max_send_sge > le32_to_cpu(l->max_sge) ||
	    cap->max_recv_sge > le32_to_cpu(l->max_sge) ||
	    cap->max_inline_data > le32_to_cpu(l->max_inline_data))
		return -EINVAL;
	mutex_init(&qp->state_lock);
	qp->max_inline = cap->max_inline_data;
	qp->sig_all = init->sq_sig_type == IB_SIGNAL_ALL_WR;
	if (udata)
		return rnic_create_user_qp(rib, qp, init, udata);

	sq_entries = roundup_pow_of_two(max_t(u32, cap->max_send_wr, 1));
	rq_entries = roundup_pow_of_two(max_t(u32, cap->max_recv_wr, 1));
	send_sge = max_t(u32, cap->max_send_sge, 1);
	recv_sge = max_t(u32, cap->max_recv_sge, 1);
	if (init->srq) {
		/* No receive queue: the device wants its sizes 0. */
		qp->srq = to_rsrq(init->srq);
		rq_entries = 0;
		recv_sge = 0;
	}
	ret = rnic_wq_alloc(rib, &qp->sq, sq_entries,
			    rnic_sq_stride(send_sge, qp->max_inline), send_sge);
	if (ret)
		return ret;
	if (qp->srq) {
		spin_lock_init(&qp->rq.lock);
	} else {
		ret = rnic_wq_alloc(rib, &qp->rq, rq_entries,
				    rnic_rq_stride(recv_sge), recv_sge);
		if (ret)
			goto err_sq;
	}

	rnic_qp_fill_req(qp, init, &req, sq_entries, rq_entries, send_sge,
			 recv_sge);
	rnic_ib_page_list(&qp->sq.buf, &req.sq);
	if (qp->srq)
		req.srqn = cpu_to_le16(qp->srq->srqn);
	else
		rnic_ib_page_list(&qp->rq.buf, &req.rq);
	ret = rnic_ib_create_on_page(rib, RNIC_DB_PAGE_IB, RNIC_CMD_CREATE_QP,
				     &req, sizeof(req), &req.doorbell_page,
				     &resp, sizeof(resp));
	if (ret)
		goto err_rq;
	ret = rnic_qp_created(rib, qp, &resp);
	if (ret)
		goto err_destroy;

	cap->max_send_wr = sq_entries;
	cap->max_recv_wr = rq_entries;
	cap->max_send_sge = send_sge;
	cap->max_recv_sge = recv_sge;
	return 0;

err_destroy:
	rnic_qp_destroy_cmd(rib, qp->qpn);
err_rq:
	rnic_wq_free(rib, &qp->rq);
err_sq:
	rnic_wq_free(rib, &qp->sq);
	return ret;
}

int rnic_destroy_qp(struct ib_qp *ibqp, struct ib_udata *udata)
{
	struct rnic_ib *rib = to_rib(ibqp->device);
	struct rnic_qp *qp = to_rqp(ibqp);
	unsigned long flags;

	xa_erase(&rib->qps, qp->qpn);
	/* Wait out the event handler and pollers that may hold the QP. */
	synchronize_irq(pci_irq_vector(rib->rd->pdev, RNIC_VEC_EQ));
	spin_lock_irqsave(&to_rcq(ibqp->send_cq)->lock, flags);
	spin_unlock_irqrestore(&to_rcq(ibqp->send_cq)->lock, flags);
	spin_lock_irqsave(&to_rcq(ibqp->recv_cq)->lock, flags);
	spin_unlock_irqrestore(&to_rcq(ibqp->recv_cq)->lock, flags);
	rnic_qp_destroy_cmd(rib, qp->qpn);
	if (qp->uctx) {
		/* The device has let go of the rings: unpin them. */
		rnic_user_wq_free(rib, &qp->rq);
		rnic_user_wq_free(rib, &qp->sq);
		atomic_dec(&qp->uctx->objects);
		return 0;
	}
	rnic_wq_free(rib, &qp->rq);
	rnic_wq_free(rib, &qp->sq);
	return 0;
}

/*
 * UD multicast (datasheet 14.15): the device keeps each group's QPs and hands
 * a group's packets to all of them. The core checked that the QP is UD and
 * the GID a multicast one; RoCE has no LIDs. Leaving a group the QP is not in
 * is the caller's to expect: not logged.
 */
static int rnic_mcast(struct ib_qp *ibqp, const union ib_gid *gid, u16 opcode)
{
	struct rnic_ib *rib = to_rib(ibqp->device);
	struct rnic_mcast_req req = {
		.qpn = cpu_to_le32(to_rqp(ibqp)->qpn),
	};

	memcpy(req.gid, gid->raw, sizeof(req.gid));
	return rnic_cmd_quiet(rib->rd, opcode, &req, sizeof(req), NULL, 0,
			      RNIC_ST_BAD_PARAM);
}

int rnic_attach_mcast(struct ib_qp *ibqp, union ib_gid *gid, u16 lid)
{
	return rnic_mcast(ibqp, gid, RNIC_CMD_ATTACH_MCAST);
}

int rnic_detach_mcast(struct ib_qp *ibqp, union ib_gid *gid, u16 lid)
{
	return rnic_mcast(ibqp, gid, RNIC_CMD_DETACH_MCAST);
}

/* After a move to RESET the queues start over, slots included (7.8). */
static void rnic_qp_reset_queues(struct rnic_qp *qp)
{
	unsigned long flags;

	spin_lock_irqsave(&qp->sq.lock, flags);
	qp->sq.posted = 0;
	WRITE_ONCE(qp->sq.done, 0);
	iowrite32(0, qp->sq.db);
	spin_unlock_irqrestore(&qp->sq.lock, flags);
	spin_lock_irqsave(&qp->rq.lock, flags);
	qp->rq.posted = 0;
	WRITE_ONCE(qp->rq.done, 0);
	iowrite32(0, qp->rq.db);
	spin_unlock_irqrestore(&qp->rq.lock, flags);
}

int rnic_modify_qp(struct ib_qp *ibqp, struct ib_qp_attr *attr, int mask,
		   struct ib_udata *udata)
{
	struct rnic_ib *rib = to_rib(ibqp->device);
	struct rnic_qp *qp = to_rqp(ibqp);
	struct {
		struct rnic_modify_qp_req req;
		struct rnic_modify_qp_qkey qkey;
	} __packed cmd = {};
	struct rnic_qp_attr *a = &cmd.req.attr;
	bool add_port;
	u8 target;
	u32 len;
	int ret;

	/* A provider sends no driver data (zeroes are as good as none). */
	if (udata && udata->inlen &&
	    !ib_is_udata_cleared(udata, 0, udata->inlen))
		return -EOPNOTSUPP;
	if (mask & ~RNIC_QP_ATTR_MASK)
		return -EOPNOTSUPP;

	mutex_lock(&qp->state_lock);
	target = mask & IB_QP_STATE ? attr->qp_state : qp->state;
	/* The MAD layer leaves the port out of a UD QP's RESET to INIT. */
	add_port = qp->qp_type != RNIC_QPT_RC && qp->state == RNIC_QPS_RESET &&
		   target == RNIC_QPS_INIT && !(mask & IB_QP_PORT);
	if (add_port)
		mask |= IB_QP_PORT;
	if (mask & IB_QP_STATE)
		a->qp_state = attr->qp_state;
	if (mask & IB_QP_CUR_STATE)
		a->cur_qp_state = attr->cur_qp_state;
	if (mask & IB_QP_PATH_MTU)
		a->path_mtu = attr->path_mtu;
	if (mask & IB_QP_TIMEOUT)
		a->timeout = attr->timeout;
	if (mask & IB_QP_RETRY_CNT)
		a->retry_cnt = attr->retry_cnt;
	if (mask & IB_QP_RNR_RETRY)
		a->rnr_retry = attr->rnr_retry;
	if (mask & IB_QP_MIN_RNR_TIMER)
		a->min_rnr_timer = attr->min_rnr_timer;
	if (mask & IB_QP_MAX_QP_RD_ATOMIC)
		a->max_rd_atomic = attr->max_rd_atomic;
	if (mask & IB_QP_MAX_DEST_RD_ATOMIC)
		a->max_dest_rd_atomic = attr->max_dest_rd_atomic;
	if (mask & IB_QP_PORT)
		a->port_num = add_port ? 1 : attr->port_num;
	if (mask & IB_QP_PKEY_INDEX)
		a->pkey_index = cpu_to_le16(attr->pkey_index);
	if (mask & IB_QP_ACCESS_FLAGS)
		a->qp_access_flags =
			cpu_to_le32(rnic_ib_access(attr->qp_access_flags) &
				    ~RNIC_ACCESS_LOCAL_WRITE);
	if (mask & IB_QP_DEST_QPN)
		a->dest_qp_num = cpu_to_le32(attr->dest_qp_num);
	if (mask & IB_QP_RQ_PSN)
		a->rq_psn = cpu_to_le32(attr->rq_psn);
	if (mask & IB_QP_SQ_PSN)
		a->sq_psn = cpu_to_le32(attr->sq_psn);
	if (mask & IB_QP_AV) {
		struct rnic_ib_av av;

		ret = rnic_ib_av_from_ah_attr(rib, &attr->ah_attr, &av);
		if (ret)
			goto out;
		memcpy(a->dgid, av.dgid, sizeof(a->dgid));
		a->sgid_index = av.sgid_index;
		a->hop_limit = av.hop_limit;
		a->traffic_class = av.traffic_class;
		a->flow_label = cpu_to_le32(av.flow_label);
	}
	cmd.req.qpn = cpu_to_le32(qp->qpn);
	cmd.req.attr_mask = cpu_to_le32(mask);
	len = sizeof(cmd.req);
	if (mask & IB_QP_QKEY) {
		cmd.qkey.qkey = cpu_to_le32(attr->qkey);
		len += sizeof(cmd.qkey);
	}
	ret = rnic_cmd(rib->rd, RNIC_CMD_MODIFY_QP, &cmd, len, NULL, 0);
	if (ret)
		goto out;
	qp->state = target;
	if (mask & IB_QP_QKEY)
		qp->qkey = attr->qkey;
	if (target == RNIC_QPS_RESET)
		rnic_qp_reset_queues(qp);
out:
	mutex_unlock(&qp->state_lock);
	return ret;
}

int rnic_query_qp(struct ib_qp *ibqp, struct ib_qp_attr *attr, int mask,
		  struct ib_qp_init_attr *init)
{
	struct rnic_ib *rib = to_rib(ibqp->device);
	struct rnic_qp *qp = to_rqp(ibqp);
	struct rnic_object_req req = { .handle = cpu_to_le32(qp->qpn) };
	struct rnic_query_qp_resp resp;
	const struct rnic_qp_attr *a = &resp.attr;
	int ret;

	ret = rnic_cmd(rib->rd, RNIC_CMD_QUERY_QP, &req, sizeof(req), &resp,
		       sizeof(resp));
	if (ret)
		return ret;
	memset(attr, 0, sizeof(*attr));
	attr->qp_state = a->qp_state;
	attr->cur_qp_state = a->qp_state;
	attr->path_mtu = a->path_mtu;
	attr->path_mig_state = IB_MIG_MIGRATED;
	attr->qp_access_flags = le32_to_cpu(a->qp_access_flags);
	attr->pkey_index = le16_to_cpu(a->pkey_index);
	attr->port_num = 1;
	attr->dest_qp_num = le32_to_cpu(a->dest_qp_num);
	attr->qkey = qp->qkey;
	attr->rq_psn = le32_to_cpu(a->rq_psn);
	attr->sq_psn = le32_to_cpu(a->sq_psn);
	attr->timeout = a->timeout;
	attr->retry_cnt = a->retry_cnt;
	attr->rnr_retry = a->rnr_retry;
	attr->min_rnr_timer = a->min_rnr_timer;
	attr->max_rd_atomic = a->max_rd_atomic;
	attr->max_dest_rd_atomic = a->max_dest_rd_atomic;
	if (qp->qp_type == RNIC_QPT_RC || qp->qp_type == RNIC_QPT_UC) {
		attr->ah_attr.type = RDMA_AH_ATTR_TYPE_ROCE;
		rdma_ah_set_port_num(&attr->ah_attr, 1);
		rdma_ah_set_grh(&attr->ah_attr, NULL,
				le32_to_cpu(a->flow_label), a->sgid_index,
				a->hop_limit, a->traffic_class);
		memcpy(attr->ah_attr.grh.dgid.raw, a->dgid, 16);
	}
	attr->cap.max_send_wr = qp->sq.entries;
	attr->cap.max_recv_wr = qp->rq.entries;
	attr->cap.max_send_sge = qp->sq.max_sge;
	attr->cap.max_recv_sge = qp->rq.max_sge;
	attr->cap.max_inline_data = qp->max_inline;

	memset(init, 0, sizeof(*init));
	init->send_cq = ibqp->send_cq;
	init->recv_cq = ibqp->recv_cq;
	init->qp_type = ibqp->qp_type;
	init->cap = attr->cap;
	init->sq_sig_type = qp->sig_all ? IB_SIGNAL_ALL_WR : IB_SIGNAL_REQ_WR;
	return 0;
}

/* Announces the entries posted since the last doorbell of @wq. */
static void rnic_wq_ring(struct rnic_ib *rib, struct rnic_wq *wq)
{
	wmb();	/* the WQEs before the posted count */
	iowrite32(wq->posted, wq->db);
	rnic_ib_ring(rib, wq->db_page, wq->db_slot);
}

static u8 rnic_send_flags(const struct ib_send_wr *wr)
{
	u8 flags = 0;

	if (wr->send_flags & IB_SEND_FENCE)
		flags |= RNIC_SEND_FENCE;
	if (wr->send_flags & IB_SEND_SIGNALED)
		flags |= RNIC_SEND_SIGNALED;
	if (wr->send_flags & IB_SEND_SOLICITED)
		flags |= RNIC_SEND_SOLICITED;
	if (wr->send_flags & IB_SEND_INLINE)
		flags |= RNIC_SEND_INLINE;
	return flags;
}

/*
 * The data of @wr after the WQE's fixed part: SGEs, or with IB_SEND_INLINE
 * the bytes they name (kernel virtual addresses, as for every kernel
 * driver). Returns the inline length, or a negative errno.
 */
static int rnic_wqe_data(struct rnic_qp *qp, const struct ib_send_wr *wr,
			 void *wqe)
{
	struct rnic_sge *sge = wqe + sizeof(struct rnic_send_wqe);
	u32 len = 0;
	int i;

	if (wr->num_sge > qp->sq.max_sge && !(wr->send_flags & IB_SEND_INLINE))
		return -EINVAL;
	if (wr->send_flags & IB_SEND_INLINE) {
		u8 *dst = (u8 *)sge;

		for (i = 0; i < wr->num_sge; i++) {
			if (len + wr->sg_list[i].length > qp->max_inline)
				return -EINVAL;
			memcpy(dst + len,
			       (void *)(uintptr_t)wr->sg_list[i].addr,
			       wr->sg_list[i].length);
			len += wr->sg_list[i].length;
		}
		return len;
	}
	for (i = 0; i < wr->num_sge; i++) {
		sge[i].addr = cpu_to_le64(wr->sg_list[i].addr);
		sge[i].length = cpu_to_le32(wr->sg_list[i].length);
		sge[i].lkey = cpu_to_le32(wr->sg_list[i].lkey);
	}
	return 0;
}

static int rnic_build_reg_wqe(const struct ib_reg_wr *reg, u64 wr_id, u8 flags,
			      struct rnic_fast_reg_wqe *wqe)
{
	struct rnic_mr *mr = to_rmr(reg->mr);

	if (!mr->fast_reg || !mr->npages)
		return -EINVAL;
	wqe->wr_id = cpu_to_le64(wr_id);
	wqe->opcode = RNIC_WR_REG_MR;
	wqe->flags = flags & (RNIC_SEND_SIGNALED | RNIC_SEND_FENCE);
	wqe->page_shift = RNIC_PAGE_SHIFT;
	wqe->key = cpu_to_le32(reg->key);
	wqe->iova = cpu_to_le64(mr->ibmr.iova);
	wqe->access = cpu_to_le32(rnic_ib_access(reg->access));
	wqe->page_count = cpu_to_le32(mr->npages);
	wqe->page_list = cpu_to_le64(mr->pages_dma);
	wqe->length = cpu_to_le64(mr->ibmr.length);
	return 0;
}

static int rnic_build_rc_wqe(struct rnic_qp *qp, const struct ib_send_wr *wr,
			     u64 wr_id, void *buf)
{
	struct rnic_send_wqe *wqe = buf;
	u8 flags = rnic_send_flags(wr);
	int len;

	wqe->wr_id = cpu_to_le64(wr_id);
	switch (wr->opcode) {
	case IB_WR_RDMA_WRITE:
		wqe->opcode = RNIC_WR_RDMA_WRITE;
		break;
	case IB_WR_RDMA_WRITE_WITH_IMM:
		wqe->opcode = RNIC_WR_RDMA_WRITE_WITH_IMM;
		wqe->imm_or_inv = (__force __le32)wr->ex.imm_data;
		break;
	case IB_WR_SEND:
		wqe->opcode = RNIC_WR_SEND;
		break;
	case IB_WR_SEND_WITH_IMM:
		wqe->opcode = RNIC_WR_SEND_WITH_IMM;
		wqe->imm_or_inv = (__force __le32)wr->ex.imm_data;
		break;
	case IB_WR_SEND_WITH_INV:
		wqe->opcode = RNIC_WR_SEND_WITH_INV;
		wqe->imm_or_inv = cpu_to_le32(wr->ex.invalidate_rkey);
		break;
	case IB_WR_RDMA_READ:
		wqe->opcode = RNIC_WR_RDMA_READ;
		flags &= ~RNIC_SEND_INLINE;
		break;
	case IB_WR_ATOMIC_CMP_AND_SWP:
		wqe->opcode = RNIC_WR_ATOMIC_CMP_AND_SWP;
		flags &= ~RNIC_SEND_INLINE;
		break;
	case IB_WR_ATOMIC_FETCH_AND_ADD:
		wqe->opcode = RNIC_WR_ATOMIC_FETCH_AND_ADD;
		flags &= ~RNIC_SEND_INLINE;
		break;
	case IB_WR_LOCAL_INV:
		wqe->opcode = RNIC_WR_LOCAL_INV;
		wqe->flags = flags & (RNIC_SEND_SIGNALED | RNIC_SEND_FENCE);
		wqe->imm_or_inv = cpu_to_le32(wr->ex.invalidate_rkey);
		return 0;
	case IB_WR_REG_MR:
		if (!(to_rib(qp->ibqp.device)->rd->caps & RNIC_CAP_FAST_REG))
			return -EOPNOTSUPP;
		return rnic_build_reg_wqe(reg_wr(wr), wr_id, flags, buf);
	default:
		return -EOPNOTSUPP;
	}
	switch (wr->opcode) {
	case IB_WR_RDMA_WRITE:
	case IB_WR_RDMA_WRITE_WITH_IMM:
	case IB_WR_RDMA_READ:
		wqe->remote_addr = cpu_to_le64(rdma_wr(wr)->remote_addr);
		wqe->rkey = cpu_to_le32(rdma_wr(wr)->rkey);
		break;
	case IB_WR_ATOMIC_CMP_AND_SWP:
	case IB_WR_ATOMIC_FETCH_AND_ADD:
		wqe->remote_addr = cpu_to_le64(atomic_wr(wr)->remote_addr);
		wqe->rkey = cpu_to_le32(atomic_wr(wr)->rkey);
		wqe->compare_add = cpu_to_le64(atomic_wr(wr)->compare_add);
		wqe->swap = cpu_to_le64(atomic_wr(wr)->swap);
		break;
	default:
		break;
	}
	wqe->flags = flags;
	if (flags & RNIC_SEND_INLINE && wr->opcode != IB_WR_RDMA_READ) {
		len = rnic_wqe_data(qp, wr, buf);
		if (len < 0)
			return len;
		wqe->inline_len = cpu_to_le32(len);
		return 0;
	}
	len = rnic_wqe_data(qp, wr, buf);
	if (len < 0)
		return len;
	wqe->num_sge = wr->num_sge;
	return 0;
}

static int rnic_build_ud_wqe(struct rnic_qp *qp, const struct ib_send_wr *wr,
			     u64 wr_id, void *buf)
{
	struct rnic_ud_send_wqe *wqe = buf;
	const struct ib_ud_wr *ud = ud_wr(wr);
	struct rnic_ah *ah;
	int len;

	switch (wr->opcode) {
	case IB_WR_SEND:
		wqe->opcode = RNIC_WR_SEND;
		break;
	case IB_WR_SEND_WITH_IMM:
		wqe->opcode = RNIC_WR_SEND_WITH_IMM;
		wqe->imm = (__force __le32)wr->ex.imm_data;
		break;
	default:
		return -EOPNOTSUPP;
	}
	if (!ud->ah)
		return -EINVAL;
	ah = to_rah(ud->ah);
	wqe->wr_id = cpu_to_le64(wr_id);
	wqe->flags = rnic_send_flags(wr) & ~RNIC_SEND_FENCE;
	wqe->remote_qkey = cpu_to_le32(ud->remote_qkey);
	wqe->remote_qpn = cpu_to_le32(ud->remote_qpn);
	memcpy(wqe->dgid, ah->av.dgid, sizeof(wqe->dgid));
	wqe->sgid_index = ah->av.sgid_index;
	wqe->hop_limit = ah->av.hop_limit;
	wqe->traffic_class = ah->av.traffic_class;
	len = rnic_wqe_data(qp, wr, buf);
	if (len < 0)
		return len;
	if (wr->send_flags & IB_SEND_INLINE)
		wqe->inline_len = cpu_to_le32(len);
	else
		wqe->num_sge = wr->num_sge;
	return 0;
}

int rnic_post_send(struct ib_qp *ibqp, const struct ib_send_wr *wr,
		   const struct ib_send_wr **bad_wr)
{
	struct rnic_ib *rib = to_rib(ibqp->device);
	struct rnic_qp *qp = to_rqp(ibqp);
	struct rnic_wq *sq = &qp->sq;
	unsigned long flags;
	u32 start, idx;
	void *wqe;
	int ret = 0;

	spin_lock_irqsave(&sq->lock, flags);
	start = sq->posted;
	/* ibverbs' rule: sends from RTS on (the device skips earlier ones). */
	if (qp->state < RNIC_QPS_RTS) {
		ret = -EINVAL;
		goto out;
	}
	for (; wr; wr = wr->next) {
		if (sq->posted - READ_ONCE(sq->done) >= sq->entries) {
			ret = -ENOMEM;
			break;
		}
		idx = sq->posted & (sq->entries - 1);
		wqe = sq->buf.va + idx * sq->stride;
		memset(wqe, 0, sizeof(struct rnic_send_wqe));
		if (qp->qp_type == RNIC_QPT_RC)
			ret = rnic_build_rc_wqe(qp, wr, sq->posted, wqe);
		else
			ret = rnic_build_ud_wqe(qp, wr, sq->posted, wqe);
		if (ret)
			break;
		sq->wr_ids[idx] = wr->wr_id;
		sq->posted++;
	}
out:
	if (ret) {
		*bad_wr = wr;
		rnic_ib_count(rib, RNIC_STAT_POSTS_REFUSED, 1);
	}
	if (sq->posted != start) {
		rnic_ib_count(rib, RNIC_STAT_SEND_WRS, sq->posted - start);
		rnic_wq_ring(rib, sq);
	}
	spin_unlock_irqrestore(&sq->lock, flags);
	return ret;
}

int rnic_post_recv(struct ib_qp *ibqp, const struct ib_recv_wr *wr,
		   const struct ib_recv_wr **bad_wr)
{
	struct rnic_ib *rib = to_rib(ibqp->device);
	struct rnic_qp *qp = to_rqp(ibqp);
	struct rnic_wq *rq = &qp->rq;
	struct rnic_recv_wqe *wqe;
	struct rnic_sge *sge;
	unsigned long flags;
	u32 start, idx;
	int ret = 0;
	int i;

	/* A QP on an SRQ has no receive queue of its own. */
	if (qp->srq) {
		*bad_wr = wr;
		return -EINVAL;
	}
	spin_lock_irqsave(&rq->lock, flags);
	start = rq->posted;
	for (; wr; wr = wr->next) {
		if (rq->posted - READ_ONCE(rq->done) >= rq->entries) {
			ret = -ENOMEM;
			break;
		}
		if (wr->num_sge > rq->max_sge) {
			ret = -EINVAL;
			break;
		}
		idx = rq->posted & (rq->entries - 1);
		wqe = rq->buf.va + idx * rq->stride;
		wqe->wr_id = cpu_to_le64(rq->posted);
		wqe->num_sge = cpu_to_le32(wr->num_sge);
		wqe->reserved = 0;
		sge = (struct rnic_sge *)(wqe + 1);
		for (i = 0; i < wr->num_sge; i++) {
			sge[i].addr = cpu_to_le64(wr->sg_list[i].addr);
			sge[i].length = cpu_to_le32(wr->sg_list[i].length);
			sge[i].lkey = cpu_to_le32(wr->sg_list[i].lkey);
		}
		rq->wr_ids[idx] = wr->wr_id;
		rq->posted++;
	}
	if (ret) {
		*bad_wr = wr;
		rnic_ib_count(rib, RNIC_STAT_POSTS_REFUSED, 1);
	}
	if (rq->posted != start) {
		rnic_ib_count(rib, RNIC_STAT_RECV_WRS, rq->posted - start);
		rnic_wq_ring(rib, rq);
	}
	spin_unlock_irqrestore(&rq->lock, flags);
	return ret;
}
