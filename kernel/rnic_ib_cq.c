// SPDX-License-Identifier: GPL-2.0
/*
 * rnic: the event queue and the completion queues. The function's one EQ
 * (EQN 1) signals RNIC_VEC_EQ; its completion events call the CQs'
 * comp_handler, its async events the QPs', CQs' and SRQs' event handlers.
 * CQ and EQ rings are coherent memory named by page lists, their entries
 * owned by phase bits (datasheet 7.6, 7.7).
 */
#include <linux/dma-mapping.h>
#include <linux/log2.h>
#include <rdma/uverbs_ioctl.h>

#include "rnic_ib.h"

#define RNIC_ARM_SEQ_MASK	0x7fffffff

/*
 * Creates a CQ or a QP on doorbell page @page: RNIC_DB_PAGE_IB for the
 * kernel's objects, a user context's own page for its objects (a full page,
 * NO_RESOURCES, is -ENOSPC, not logged: a process filled its page).
 */
int rnic_ib_create_on_page(struct rnic_ib *rib, u32 page, u16 opcode,
			   void *req, u32 req_len, __le32 *page_field,
			   void *resp, u32 resp_len)
{
	*page_field = cpu_to_le32(page);
	return rnic_cmd_quiet(rib->rd, opcode, req, req_len, resp, resp_len,
			      page == RNIC_DB_PAGE_IB ? RNIC_ST_OK :
			      RNIC_ST_NO_RESOURCES);
}

int rnic_ib_eq_create(struct rnic_ib *rib)
{
	struct rnic_ib_eq *eq = &rib->eq;
	struct rnic_create_eq_req req = {};
	struct rnic_create_eq_resp resp;
	u32 entries;
	int ret;

	entries = min_t(u32, RNIC_IB_EQ_ENTRIES,
			rounddown_pow_of_two(le32_to_cpu(rib->rd->info.limits.max_cqe)));
	ret = rnic_ib_buf_alloc(rib, &eq->buf, entries * sizeof(struct rnic_eqe));
	if (ret)
		return ret;
	eq->entries = entries;
	eq->consumed = 0;
	rnic_ib_page_list(&eq->buf, &req.ring);
	req.entries = cpu_to_le32(entries);
	req.vector = cpu_to_le32(RNIC_VEC_EQ);
	req.doorbell_page = cpu_to_le32(RNIC_DB_PAGE_IB);
	ret = rnic_cmd(rib->rd, RNIC_CMD_CREATE_EQ, &req, sizeof(req), &resp,
		       sizeof(resp));
	if (ret) {
		rnic_ib_buf_free(rib, &eq->buf);
		return ret;
	}
	eq->eqn = le32_to_cpu(resp.eqn);
	eq->db = rib->rd->db +
		 rnic_db_slot_offset(le32_to_cpu(resp.doorbell.page),
				     le32_to_cpu(resp.doorbell.slot));
	eq->created = true;
	return 0;
}

/* After the vector is freed: nothing reads the ring any more. */
void rnic_ib_eq_destroy(struct rnic_ib *rib)
{
	struct rnic_ib_eq *eq = &rib->eq;
	struct rnic_object_req req = {};

	if (eq->created) {
		req.handle = cpu_to_le32(eq->eqn);
		rnic_cmd(rib->rd, RNIC_CMD_DESTROY_EQ, &req, sizeof(req), NULL,
			 0);
	}
	eq->created = false;
	rnic_ib_buf_free(rib, &eq->buf);
}

static void rnic_ib_qp_event(struct rnic_ib *rib, u32 qpn, u8 type)
{
	struct ib_event ev = { .device = &rib->ibdev };
	struct rnic_qp *qp = xa_load(&rib->qps, qpn);

	if (!qp || !qp->ibqp.event_handler)
		return;
	switch (type) {
	case RNIC_EV_QP_FATAL:
		ev.event = IB_EVENT_QP_FATAL;
		break;
	case RNIC_EV_QP_REQ_ERR:
		ev.event = IB_EVENT_QP_REQ_ERR;
		break;
	case RNIC_EV_QP_ACCESS_ERR:
		ev.event = IB_EVENT_QP_ACCESS_ERR;
		break;
	case RNIC_EV_COMM_EST:
		ev.event = IB_EVENT_COMM_EST;
		break;
	case RNIC_EV_SQ_DRAINED:
		ev.event = IB_EVENT_SQ_DRAINED;
		break;
	default:
		return;
	}
	ev.element.qp = &qp->ibqp;
	qp->ibqp.event_handler(&ev, qp->ibqp.qp_context);
}

/* The device disarmed the limit as it fired (datasheet 14.4). */
static void rnic_ib_srq_event(struct rnic_ib *rib, u32 srqn)
{
	struct ib_event ev = {
		.device = &rib->ibdev,
		.event = IB_EVENT_SRQ_LIMIT_REACHED,
	};
	struct rnic_srq *srq = xa_load(&rib->srqs, srqn);

	if (!srq || !srq->ibsrq.event_handler)
		return;
	ev.element.srq = &srq->ibsrq;
	srq->ibsrq.event_handler(&ev, srq->ibsrq.srq_context);
}

static void rnic_ib_eqe(struct rnic_ib *rib, const struct rnic_eqe *eqe)
{
	u32 object = le32_to_cpu(eqe->object);
	struct ib_event ev = { .device = &rib->ibdev };
	struct rnic_cq *cq;

	rnic_ib_count(rib, eqe->event_type == RNIC_EV_COMPLETION ?
		      RNIC_STAT_COMPLETION_EVENTS : RNIC_STAT_ASYNC_EVENTS, 1);
	switch (eqe->event_type) {
	case RNIC_EV_COMPLETION:
		cq = xa_load(&rib->cqs, object);
		if (cq && cq->ibcq.comp_handler)
			cq->ibcq.comp_handler(&cq->ibcq, cq->ibcq.cq_context);
		break;
	case RNIC_EV_CQ_ERR:
		cq = xa_load(&rib->cqs, object);
		ibdev_err_ratelimited(&rib->ibdev, "CQ %u overran\n", object);
		if (cq && cq->ibcq.event_handler) {
			ev.event = IB_EVENT_CQ_ERR;
			ev.element.cq = &cq->ibcq;
			cq->ibcq.event_handler(&ev, cq->ibcq.cq_context);
		}
		break;
	case RNIC_EV_SRQ_LIMIT_REACHED:
		rnic_ib_srq_event(rib, object);
		break;
	default:
		rnic_ib_qp_event(rib, object, eqe->event_type);
		break;
	}
}

/*
 * The EQ's vector. CQs and QPs leave the xarrays before they are destroyed,
 * and their destroy waits for this handler (synchronize_irq).
 */
irqreturn_t rnic_ib_eq_irq(int irq, void *data)
{
	struct rnic_ib *rib = data;
	struct rnic_ib_eq *eq = &rib->eq;
	struct rnic_eqe *eqe;
	u32 start = eq->consumed;

	rnic_ib_count(rib, RNIC_STAT_EQ_INTERRUPTS, 1);
	for (;;) {
		eqe = eq->buf.va + (eq->consumed & (eq->entries - 1)) *
				   sizeof(*eqe);
		if ((READ_ONCE(eqe->owner) & 1) !=
		    rnic_owner_phase(eq->consumed, eq->entries))
			break;
		dma_rmb();	/* the owner before the rest of the entry */
		rnic_ib_eqe(rib, eqe);
		eq->consumed++;
	}
	if (eq->consumed == start)
		return IRQ_NONE;
	mb();	/* the entries read before the consumer index */
	iowrite32(eq->consumed, eq->db);
	return IRQ_HANDLED;
}

/*
 * A CQ of a process: its ring is the process's memory (CreateCqReq), pinned
 * here; the process polls and arms it through its own doorbell page. The
 * driver never touches the ring: the core calls neither poll_cq nor
 * req_notify_cq for it, and only user QPs, whose CQEs the kernel never
 * reads, complete into it. Its completion events call comp_handler (the
 * core's, behind ibv_get_cq_event) like a kernel CQ's.
 */
static int rnic_create_user_cq(struct rnic_ib *rib, struct rnic_cq *cq,
			       const struct ib_cq_init_attr *attr,
			       struct ib_udata *udata)
{
	struct rnic_ucontext *uc = rdma_udata_to_drv_context(udata,
							      struct rnic_ucontext,
							      ibuc);
	u32 max = le32_to_cpu(rib->rd->info.limits.max_cqe);
	struct rnic_uverbs_create_cq_req ureq;
	struct rnic_uverbs_create_cq_resp uresp = {};
	struct rnic_create_cq_req req = {};
	struct rnic_create_cq_resp resp;
	int ret;

	ret = rnic_udata_in(udata, &ureq, sizeof(ureq));
	if (ret)
		return ret;
	if (ureq.reserved || ureq.entries < 2 ||
	    !is_power_of_2(ureq.entries) || ureq.entries < attr->cqe ||
	    ureq.entries > max) {
		ibdev_dbg(&rib->ibdev, "user CQ of %u entries (cqe %u) refused\n",
			  ureq.entries, attr->cqe);
		return -EINVAL;
	}
	mutex_init(&cq->resize_lock);
	cq->uctx = uc;
	ret = rnic_ib_ring_pin(rib, ureq.ring_va,
			       (size_t)ureq.entries * sizeof(struct rnic_cqe),
			       &cq->umem, &cq->pbl, &req.ring);
	if (ret)
		return ret;
	req.entries = cpu_to_le32(ureq.entries);
	ret = rnic_ib_create_on_page(rib, uc->db_page, RNIC_CMD_CREATE_CQ, &req,
				     sizeof(req), &req.doorbell_page, &resp,
				     sizeof(resp));
	if (ret)
		goto err_unpin;
	cq->cqn = le32_to_cpu(resp.cqn);
	cq->entries = ureq.entries;
	cq->ibcq.cqe = ureq.entries;
	uresp.cqn = cq->cqn;
	uresp.entries = ureq.entries;
	uresp.doorbell_slot = le32_to_cpu(resp.doorbell.slot);
	if (WARN_ON_ONCE(le32_to_cpu(resp.doorbell.page) != uc->db_page)) {
		ret = -EIO;
		goto err_destroy;
	}
	ret = rnic_udata_out(udata, &uresp, sizeof(uresp));
	if (ret)
		goto err_destroy;
	ret = xa_insert(&rib->cqs, cq->cqn, cq, GFP_KERNEL);
	if (ret)
		goto err_destroy;
	atomic_inc(&uc->objects);
	return 0;

err_destroy:
	{
		struct rnic_object_req oreq = { .handle = cpu_to_le32(cq->cqn) };

		rnic_cmd(rib->rd, RNIC_CMD_DESTROY_CQ, &oreq, sizeof(oreq),
			 NULL, 0);
	}
err_unpin:
	rnic_ib_ring_unpin(rib, cq->umem, &cq->pbl);
	cq->umem = NULL;
	return ret;
}

int rnic_create_cq(struct ib_cq *ibcq, const struct ib_cq_init_attr *attr,
		   struct uverbs_attr_bundle *attrs)
{
	struct rnic_ib *rib = to_rib(ibcq->device);
	struct rnic_cq *cq = to_rcq(ibcq);
	struct rnic_create_cq_req req = {};
	struct rnic_create_cq_resp resp;
	u32 max = le32_to_cpu(rib->rd->info.limits.max_cqe);
	u32 entries;
	int ret;

	if (attr->flags)
		return -EOPNOTSUPP;
	if (!attr->cqe || attr->cqe > max)
		return -EINVAL;
	spin_lock_init(&cq->lock);
	if (attrs)
		return rnic_create_user_cq(rib, cq, attr, &attrs->driver_udata);
	entries = max_t(u32, 2, roundup_pow_of_two(attr->cqe));
	if (entries > max)
		entries = rounddown_pow_of_two(max);
	ret = rnic_ib_buf_alloc(rib, &cq->buf, entries * sizeof(struct rnic_cqe));
	if (ret)
		return ret;
	cq->entries = entries;
	cq->consumed = 0;
	cq->arm_seq = 0;
	rnic_ib_page_list(&cq->buf, &req.ring);
	req.entries = cpu_to_le32(entries);
	ret = rnic_ib_create_on_page(rib, RNIC_DB_PAGE_IB, RNIC_CMD_CREATE_CQ,
				     &req, sizeof(req), &req.doorbell_page,
				     &resp, sizeof(resp));
	if (ret)
		goto err_buf;
	cq->cqn = le32_to_cpu(resp.cqn);
	cq->db = rib->rd->db +
		 rnic_db_slot_offset(le32_to_cpu(resp.doorbell.page),
				     le32_to_cpu(resp.doorbell.slot));
	ibcq->cqe = entries;
	ret = xa_insert(&rib->cqs, cq->cqn, cq, GFP_KERNEL);
	if (ret)
		goto err_destroy;
	return 0;

err_destroy:
	{
		struct rnic_object_req oreq = { .handle = cpu_to_le32(cq->cqn) };

		rnic_cmd(rib->rd, RNIC_CMD_DESTROY_CQ, &oreq, sizeof(oreq),
			 NULL, 0);
	}
err_buf:
	rnic_ib_buf_free(rib, &cq->buf);
	return ret;
}

/*
 * A process's CQ moves to the new ring its provider gives (RESIZE_CQ): the
 * device copies the completions not polled yet to their indexes there, and
 * the old ring is unpinned. The provider does not poll meanwhile and keeps
 * its consumer index. The kernel's own CQs keep their size: no kernel user
 * of 6.12 resizes one.
 */
int rnic_resize_cq(struct ib_cq *ibcq, int cqe, struct ib_udata *udata)
{
	struct rnic_ib *rib = to_rib(ibcq->device);
	struct rnic_cq *cq = to_rcq(ibcq);
	u32 max = le32_to_cpu(rib->rd->info.limits.max_cqe);
	struct rnic_uverbs_resize_cq_req ureq;
	struct rnic_resize_cq_req req = {};
	struct rnic_ib_pbl pbl = {};
	struct ib_umem *umem = NULL;
	int ret;

	if (!cq->uctx || !udata)
		return -EOPNOTSUPP;
	ret = rnic_udata_in(udata, &ureq, sizeof(ureq));
	if (ret)
		return ret;
	if (cqe < 1 || ureq.reserved || ureq.entries < 2 ||
	    !is_power_of_2(ureq.entries) || ureq.entries < cqe ||
	    ureq.entries > max) {
		ibdev_dbg(&rib->ibdev, "CQ %u: %u entries (cqe %d) refused\n",
			  cq->cqn, ureq.entries, cqe);
		return -EINVAL;
	}
	ret = rnic_ib_ring_pin(rib, ureq.ring_va,
			       (size_t)ureq.entries * sizeof(struct rnic_cqe),
			       &umem, &pbl, &req.ring);
	if (ret)
		return ret;
	req.entries = cpu_to_le32(ureq.entries);
	req.cqn = cpu_to_le32(cq->cqn);
	/* Two threads resizing at once must not unpin one ring twice. */
	mutex_lock(&cq->resize_lock);
	/* BAD_PARAM: fewer entries than completions not polled yet. */
	ret = rnic_cmd_quiet(rib->rd, RNIC_CMD_RESIZE_CQ, &req, sizeof(req),
			     NULL, 0, RNIC_ST_BAD_PARAM);
	if (ret) {
		mutex_unlock(&cq->resize_lock);
		rnic_ib_ring_unpin(rib, umem, &pbl);
		return ret;
	}
	/* The device writes only the new ring now: unpin the old one. */
	rnic_ib_ring_unpin(rib, cq->umem, &cq->pbl);
	cq->pbl = pbl;
	cq->umem = umem;
	cq->entries = ureq.entries;
	ibcq->cqe = ureq.entries;
	mutex_unlock(&cq->resize_lock);
	return 0;
}

int rnic_destroy_cq(struct ib_cq *ibcq, struct ib_udata *udata)
{
	struct rnic_ib *rib = to_rib(ibcq->device);
	struct rnic_cq *cq = to_rcq(ibcq);
	struct rnic_object_req req = { .handle = cpu_to_le32(cq->cqn) };

	xa_erase(&rib->cqs, cq->cqn);
	synchronize_irq(pci_irq_vector(rib->rd->pdev, RNIC_VEC_EQ));
	/* A function reset under us has destroyed it already. */
	rnic_cmd(rib->rd, RNIC_CMD_DESTROY_CQ, &req, sizeof(req), NULL, 0);
	if (cq->uctx) {
		/* The device has let go of the ring: unpin it. */
		rnic_ib_ring_unpin(rib, cq->umem, &cq->pbl);
		atomic_dec(&cq->uctx->objects);
		return 0;
	}
	rnic_ib_buf_free(rib, &cq->buf);
	return 0;
}

static enum ib_wc_opcode rnic_wc_opcode(u8 op)
{
	switch (op) {
	case RNIC_WC_SEND:
		return IB_WC_SEND;
	case RNIC_WC_RDMA_WRITE:
		return IB_WC_RDMA_WRITE;
	case RNIC_WC_RDMA_READ:
		return IB_WC_RDMA_READ;
	case RNIC_WC_COMP_SWAP:
		return IB_WC_COMP_SWAP;
	case RNIC_WC_FETCH_ADD:
		return IB_WC_FETCH_ADD;
	case RNIC_WC_BIND_MW:
		return IB_WC_BIND_MW;
	case RNIC_WC_LOCAL_INV:
		return IB_WC_LOCAL_INV;
	case RNIC_WC_REG_MR:
		return IB_WC_REG_MR;
	case RNIC_WC_ATOMIC_WRITE:
		return IB_WC_ATOMIC_WRITE;
	case RNIC_WC_FLUSH:
		return IB_WC_FLUSH;
	case RNIC_WC_RECV_RDMA_WITH_IMM:
		return IB_WC_RECV_RDMA_WITH_IMM;
	default:
		return IB_WC_RECV;
	}
}

/* Translates one CQE; false for one of a QP that is gone. */
static bool rnic_cqe_to_wc(struct rnic_ib *rib, const struct rnic_cqe *cqe,
			   struct ib_wc *wc)
{
	u32 qpn = le32_to_cpu(cqe->qp_num);
	u32 idx = (u32)le64_to_cpu(cqe->wr_id);
	bool recv = cqe->opcode & RNIC_WC_RECV;
	struct rnic_qp *qp;
	struct rnic_wq *wq;

	qp = xa_load(&rib->qps, qpn);
	if (!qp)
		return false;
	memset(wc, 0, sizeof(*wc));
	if (recv && qp->srq) {
		/* The SRQ's WQE carried the consumer's wr_id itself. */
		wc->wr_id = le64_to_cpu(cqe->wr_id);
		atomic_inc(&qp->srq->completed);
		goto fill;
	}
	wq = recv ? &qp->rq : &qp->sq;
	wc->wr_id = wq->wr_ids[idx & (wq->entries - 1)];
	/*
	 * Completions come in queue order; an unsignaled WR before is done.
	 * (A flushed receive the device could not read says wr_id 0: never
	 * let that move the count back.)
	 */
	if ((s32)(idx + 1 - wq->done) > 0)
		WRITE_ONCE(wq->done, idx + 1);
fill:
	wc->status = cqe->status <= RNIC_WC_GENERAL_ERR ?
		     (enum ib_wc_status)cqe->status : IB_WC_GENERAL_ERR;
	if (wc->status != IB_WC_SUCCESS)
		rnic_ib_count(rib, RNIC_STAT_COMPLETION_ERRORS, 1);
	wc->opcode = rnic_wc_opcode(cqe->opcode);
	wc->vendor_err = le32_to_cpu(cqe->vendor_err);
	wc->byte_len = le32_to_cpu(cqe->byte_len);
	wc->qp = &qp->ibqp;
	wc->src_qp = le32_to_cpu(cqe->src_qp);
	wc->port_num = 1;
	if (cqe->wc_flags & RNIC_WC_F_WITH_IMM) {
		wc->wc_flags |= IB_WC_WITH_IMM;
		/* As it was on the wire. */
		wc->ex.imm_data = (__force __be32)cqe->imm_or_inv;
	} else if (cqe->wc_flags & RNIC_WC_F_WITH_INV) {
		wc->wc_flags |= IB_WC_WITH_INVALIDATE;
		wc->ex.invalidate_rkey = le32_to_cpu(cqe->imm_or_inv);
	}
	if (cqe->wc_flags & RNIC_WC_F_GRH) {
		/* 20 zero bytes, then the packet's IPv4 header. */
		wc->wc_flags |= IB_WC_GRH | IB_WC_WITH_NETWORK_HDR_TYPE;
		wc->network_hdr_type = RDMA_NETWORK_IPV4;
	}
	return true;
}

static struct rnic_cqe *rnic_cq_next(struct rnic_cq *cq)
{
	struct rnic_cqe *cqe = cq->buf.va +
			       (cq->consumed & (cq->entries - 1)) * sizeof(*cqe);

	if ((READ_ONCE(cqe->owner) & 1) !=
	    rnic_owner_phase(cq->consumed, cq->entries))
		return NULL;
	dma_rmb();	/* the owner before the rest of the entry */
	return cqe;
}

int rnic_poll_cq(struct ib_cq *ibcq, int num_entries, struct ib_wc *wc)
{
	struct rnic_ib *rib = to_rib(ibcq->device);
	struct rnic_cq *cq = to_rcq(ibcq);
	struct rnic_cqe *cqe;
	unsigned long flags;
	u32 start;
	int n = 0;

	spin_lock_irqsave(&cq->lock, flags);
	start = cq->consumed;
	while (n < num_entries) {
		cqe = rnic_cq_next(cq);
		if (!cqe)
			break;
		if (rnic_cqe_to_wc(rib, cqe, &wc[n]))
			n++;
		cq->consumed++;
	}
	if (cq->consumed != start) {
		rnic_ib_count(rib, RNIC_STAT_COMPLETIONS, cq->consumed - start);
		mb();	/* the entries read before the consumer index */
		iowrite32(cq->consumed, cq->db);
	}
	spin_unlock_irqrestore(&cq->lock, flags);
	return n;
}

int rnic_req_notify_cq(struct ib_cq *ibcq, enum ib_cq_notify_flags flags)
{
	struct rnic_cq *cq = to_rcq(ibcq);
	bool solicited = (flags & IB_CQ_SOLICITED_MASK) == IB_CQ_SOLICITED;
	unsigned long irqflags;
	int ret = 0;

	spin_lock_irqsave(&cq->lock, irqflags);
	cq->arm_seq = (cq->arm_seq + 1) & RNIC_ARM_SEQ_MASK;
	iowrite32(rnic_cq_arm_word(cq->arm_seq, solicited), cq->db + 4);
	if (flags & IB_CQ_REPORT_MISSED_EVENTS) {
		mb();	/* the arm word before looking at the ring again */
		if (rnic_cq_next(cq))
			ret = 1;
	}
	spin_unlock_irqrestore(&cq->lock, irqflags);
	return ret;
}
