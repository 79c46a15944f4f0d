/* The data path as a C program uses it, through Debian's <infiniband/verbs.h>: devices
 * 0 and 1 (two functions of one rnicd) in one process, connected RC QPs built with
 * ibv_create_qp_ex and driven with the ibv_wr_* post-send API (WRITE with immediate,
 * inline SEND, SEND with immediate, READ, fetch-and-add, compare-and-swap, a batch of
 * unsignalled WRITEs, local invalidate), completions read with the extended poll API,
 * through a completion channel watched by epoll, and with ibv_poll_cq; UD QPs with
 * address handles, one made from a received completion's GRH; an SRQ whose limit raises
 * an asynchronous event; a remote access error that raises one on the responder; and
 * what must be refused: memory this process does not have, shared file mappings,
 * read-only memory for writes, dma-buf, raw packet QPs, TSO, addresses without a GRH,
 * destroying what is in use. And a blocking completion wait through two idle seconds,
 * with the CPU time it took.
 *
 * Every check exits with a message on stderr when it fails; each step that passes
 * prints `ok STEP` for ibverbs/tests/data_path.rs. Buffers come from malloc, unaligned. */
#define _GNU_SOURCE
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#include "verbs_test.h"

#define BUF 65536
#define ALL_ACCESS (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | \
		    IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC)

struct end {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_comp_channel *ch;
	struct ibv_cq_ex *cqx;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_qp_ex *qpx;
	char *raw; /* the allocation; buf is 5 bytes into it */
	char *buf;
	struct ibv_mr *mr;
	union ibv_gid gid;
};

/* One completion from `cq` by the extended poll API, as an ibv_wc. */
static struct ibv_wc poll_one_ex(struct ibv_cq_ex *cq)
{
	struct ibv_poll_cq_attr attr = { .comp_mask = 0 };
	struct ibv_wc wc = { 0 };
	double end = now() + 10;
	int rc;
	while ((rc = ibv_start_poll(cq, &attr)) == ENOENT)
		CHECK(now() < end, "no completion within 10 s");
	CHECK(rc == 0, "ibv_start_poll returned %d", rc);
	wc.wr_id = cq->wr_id;
	wc.status = cq->status;
	wc.opcode = ibv_wc_read_opcode(cq);
	wc.byte_len = ibv_wc_read_byte_len(cq);
	wc.imm_data = ibv_wc_read_imm_data(cq);
	wc.qp_num = ibv_wc_read_qp_num(cq);
	wc.src_qp = ibv_wc_read_src_qp(cq);
	wc.wc_flags = ibv_wc_read_wc_flags(cq);
	/* Nothing more is there: next_poll says so and the poll ends. */
	CHECK(ibv_next_poll(cq) == ENOENT, "a second completion: wr %lu %s opcode %d",
	      (unsigned long)cq->wr_id, ibv_wc_status_str(cq->status), ibv_wc_read_opcode(cq));
	ibv_end_poll(cq);
	return wc;
}

static void open_end(struct end *e, struct ibv_device *dev)
{
	e->ctx = open_with_pd(dev, &e->gid, &e->pd);
	e->ch = ibv_create_comp_channel(e->ctx);
	CHECK(e->ch, "create_comp_channel");
	struct ibv_cq_init_attr_ex ca = {
		.cqe = 64, .channel = e->ch, .wc_flags = IBV_WC_STANDARD_FLAGS,
	};
	e->cqx = ibv_create_cq_ex(e->ctx, &ca);
	CHECK(e->cqx, "create_cq_ex");
	e->cq = ibv_cq_ex_to_cq(e->cqx);
	e->raw = malloc(BUF + 5);
	CHECK(e->raw, "malloc");
	e->buf = e->raw + 5;
	memset(e->buf, 0, BUF);
	e->mr = ibv_reg_mr(e->pd, e->buf, BUF, ALL_ACCESS);
	CHECK(e->mr, "reg_mr of a malloc'd buffer");
	CHECK(e->mr->addr == e->buf && e->mr->length == BUF, "mr fields");
	struct ibv_qp_init_attr_ex qa = {
		.send_cq = e->cq, .recv_cq = e->cq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 32, .max_recv_wr = 32, .max_send_sge = 2,
			 .max_recv_sge = 2, .max_inline_data = 128 },
		.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
		.pd = e->pd,
		.send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM |
			IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM | IBV_QP_EX_WITH_RDMA_READ |
			IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP | IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD |
			IBV_QP_EX_WITH_LOCAL_INV,
	};
	e->qp = ibv_create_qp_ex(e->ctx, &qa);
	CHECK(e->qp, "create_qp_ex");
	CHECK(qa.cap.max_send_wr >= 32 && qa.cap.max_inline_data >= 128, "caps back");
	e->qpx = ibv_qp_to_qp_ex(e->qp);
	CHECK(e->qpx && &e->qpx->qp_base == e->qp, "qp_to_qp_ex");
}

/* Waits on the channel's fd with epoll for the armed CQ's event, takes and acks it. */
static void wait_cq_event(struct end *e)
{
	int ep = epoll_create1(0);
	struct epoll_event ev = { .events = EPOLLIN };
	CHECK(epoll_ctl(ep, EPOLL_CTL_ADD, e->ch->fd, &ev) == 0, "epoll_ctl");
	CHECK(epoll_wait(ep, &ev, 1, 10000) == 1, "no completion event within 10 s");
	close(ep);
	struct ibv_cq *cq;
	void *cq_ctx;
	CHECK(ibv_get_cq_event(e->ch, &cq, &cq_ctx) == 0, "get_cq_event");
	CHECK(cq == e->cq, "the event names the CQ");
	ibv_ack_cq_events(cq, 1);
}

/* The next asynchronous event of `ctx`, waited for with poll on async_fd. */
static struct ibv_async_event async_event(struct ibv_context *ctx)
{
	struct pollfd p = { .fd = ctx->async_fd, .events = POLLIN };
	CHECK(poll(&p, 1, 10000) == 1, "no asynchronous event within 10 s");
	struct ibv_async_event ev;
	CHECK(ibv_get_async_event(ctx, &ev) == 0, "get_async_event");
	ibv_ack_async_event(&ev);
	return ev;
}

static void fill(char *p, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (char)(i * 7 + seed);
}

static void rc_steps(struct end *a, struct end *b)
{
	struct ibv_wc wc;

	/* WRITE with immediate: the data lands, a receive completes with the immediate,
	 * and the responder learns it through its channel, watched by epoll. */
	fill(a->buf, 3000, 1);
	post_recv(b->qp, b->mr, b->buf + 60000, 64, 100);
	CHECK(ibv_req_notify_cq(b->cq, 0) == 0, "req_notify_cq");
	ibv_wr_start(a->qpx);
	a->qpx->wr_id = 1;
	a->qpx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_write_imm(a->qpx, b->mr->rkey, (uintptr_t)b->buf + 100, htobe32(0xabcd));
	ibv_wr_set_sge(a->qpx, a->mr->lkey, (uintptr_t)a->buf, 3000);
	CHECK(ibv_wr_complete(a->qpx) == 0, "wr_complete");
	expect(poll_one_ex(a->cqx), 1, IBV_WC_RDMA_WRITE);
	wait_cq_event(b);
	wc = poll_one(b->cq);
	expect(wc, 100, IBV_WC_RECV_RDMA_WITH_IMM);
	CHECK((wc.wc_flags & IBV_WC_WITH_IMM) && be32toh(wc.imm_data) == 0xabcd, "imm");
	CHECK(wc.qp_num == b->qp->qp_num, "qp_num");
	CHECK(memcmp(b->buf + 100, a->buf, 3000) == 0, "written bytes");
	CHECK(b->buf[99] == 0 && b->buf[3100] == 0, "bytes around untouched");
	printf("ok write_with_imm\n");

	/* Inline SEND: the bytes are taken when posted. */
	char msg[50];
	fill(msg, sizeof(msg), 9);
	post_recv(b->qp, b->mr, b->buf + 40000, 128, 101);
	ibv_wr_start(a->qpx);
	a->qpx->wr_id = 2;
	a->qpx->wr_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
	ibv_wr_send(a->qpx);
	ibv_wr_set_inline_data(a->qpx, msg, sizeof(msg));
	CHECK(ibv_wr_complete(a->qpx) == 0, "wr_complete");
	memset(msg, 0, sizeof(msg));
	expect(poll_one_ex(a->cqx), 2, IBV_WC_SEND);
	wc = poll_one(b->cq);
	expect(wc, 101, IBV_WC_RECV);
	CHECK(wc.byte_len == 50, "byte_len %u", wc.byte_len);
	fill(msg, sizeof(msg), 9);
	CHECK(memcmp(b->buf + 40000, msg, 50) == 0, "inline bytes");
	printf("ok inline_send\n");

	/* SEND with immediate from an SGE list of two pieces, received into two. */
	fill(a->buf + 5000, 300, 3);
	struct ibv_sge two[2] = {
		{ (uintptr_t)a->buf + 5000, 100, a->mr->lkey },
		{ (uintptr_t)a->buf + 5100, 200, a->mr->lkey },
	};
	struct ibv_sge rtwo[2] = {
		{ (uintptr_t)b->buf + 20000, 10, b->mr->lkey },
		{ (uintptr_t)b->buf + 21000, 1000, b->mr->lkey },
	};
	struct ibv_recv_wr rwr = { .wr_id = 102, .sg_list = rtwo, .num_sge = 2 }, *rbad;
	CHECK(ibv_post_recv(b->qp, &rwr, &rbad) == 0, "post_recv of two SGEs");
	ibv_wr_start(a->qpx);
	a->qpx->wr_id = 3;
	a->qpx->wr_flags = IBV_SEND_SIGNALED | IBV_SEND_SOLICITED;
	ibv_wr_send_imm(a->qpx, htobe32(77));
	ibv_wr_set_sge_list(a->qpx, 2, two);
	CHECK(ibv_wr_complete(a->qpx) == 0, "wr_complete");
	expect(poll_one_ex(a->cqx), 3, IBV_WC_SEND);
	wc = poll_one(b->cq);
	expect(wc, 102, IBV_WC_RECV);
	CHECK(wc.byte_len == 300 && be32toh(wc.imm_data) == 77, "send_imm");
	CHECK(memcmp(b->buf + 20000, a->buf + 5000, 10) == 0 &&
	      memcmp(b->buf + 21000, a->buf + 5010, 290) == 0, "scattered bytes");
	printf("ok send_with_imm\n");

	/* READ back what was written. */
	ibv_wr_start(a->qpx);
	a->qpx->wr_id = 4;
	a->qpx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_read(a->qpx, b->mr->rkey, (uintptr_t)b->buf + 100);
	ibv_wr_set_sge(a->qpx, a->mr->lkey, (uintptr_t)a->buf + 10000, 3000);
	CHECK(ibv_wr_complete(a->qpx) == 0, "wr_complete");
	wc = poll_one_ex(a->cqx);
	expect(wc, 4, IBV_WC_RDMA_READ);
	CHECK(wc.byte_len == 3000, "read byte_len %u", wc.byte_len);
	CHECK(memcmp(a->buf + 10000, a->buf, 3000) == 0, "read bytes");
	printf("ok read\n");

	/* Atomics on an 8-byte-aligned word of B's buffer. */
	uint64_t *word = (uint64_t *)(((uintptr_t)b->buf + 30007) & ~7ul);
	uint64_t *old = (uint64_t *)(((uintptr_t)a->buf + 30007) & ~7ul);
	*word = 100;
	ibv_wr_start(a->qpx);
	a->qpx->wr_id = 5;
	a->qpx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_atomic_fetch_add(a->qpx, b->mr->rkey, (uintptr_t)word, 5);
	ibv_wr_set_sge(a->qpx, a->mr->lkey, (uintptr_t)old, 8);
	CHECK(ibv_wr_complete(a->qpx) == 0, "wr_complete");
	expect(poll_one_ex(a->cqx), 5, IBV_WC_FETCH_ADD);
	CHECK(*old == 100 && *word == 105, "fetch_add: old %lu now %lu",
	      (unsigned long)*old, (unsigned long)*word);
	ibv_wr_start(a->qpx);
	a->qpx->wr_id = 6;
	a->qpx->wr_flags = 0;
	ibv_wr_atomic_cmp_swp(a->qpx, b->mr->rkey, (uintptr_t)word, 105, 7);
	ibv_wr_set_sge(a->qpx, a->mr->lkey, (uintptr_t)old, 8);
	a->qpx->wr_id = 7;
	a->qpx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_atomic_cmp_swp(a->qpx, b->mr->rkey, (uintptr_t)word, 105, 9);
	ibv_wr_set_sge(a->qpx, a->mr->lkey, (uintptr_t)old + 8, 8);
	CHECK(ibv_wr_complete(a->qpx) == 0, "wr_complete");
	/* One batch, one signalled WR: one completion, for the second. */
	expect(poll_one_ex(a->cqx), 7, IBV_WC_COMP_SWAP);
	CHECK(old[0] == 105 && old[1] == 7 && *word == 7, "cmp_swp: %lu %lu now %lu",
	      (unsigned long)old[0], (unsigned long)old[1], (unsigned long)*word);
	printf("ok atomics\n");

	/* A batch of 8 unsignalled WRITEs and a signalled one; then ibv_post_send with a
	 * chain. */
	fill(a->buf + 12000, 9 * 512, 5);
	ibv_wr_start(a->qpx);
	for (int i = 0; i < 9; i++) {
		a->qpx->wr_id = 10 + i;
		a->qpx->wr_flags = i == 8 ? IBV_SEND_SIGNALED : 0;
		ibv_wr_rdma_write(a->qpx, b->mr->rkey, (uintptr_t)b->buf + 45000 + i * 512);
		ibv_wr_set_sge(a->qpx, a->mr->lkey, (uintptr_t)a->buf + 12000 + i * 512, 512);
	}
	CHECK(ibv_wr_complete(a->qpx) == 0, "wr_complete");
	expect(poll_one_ex(a->cqx), 18, IBV_WC_RDMA_WRITE);
	CHECK(memcmp(b->buf + 45000, a->buf + 12000, 9 * 512) == 0, "batched bytes");
	struct ibv_sge s1 = { (uintptr_t)a->buf, 16, a->mr->lkey };
	struct ibv_send_wr w2 = { .wr_id = 21, .sg_list = &s1, .num_sge = 1,
				  .opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED };
	w2.wr.rdma.remote_addr = (uintptr_t)b->buf + 50000;
	w2.wr.rdma.rkey = b->mr->rkey;
	struct ibv_send_wr w1 = w2, *bad;
	w1.wr_id = 20;
	w1.next = &w2;
	w1.send_flags = 0;
	CHECK(ibv_post_send(a->qp, &w1, &bad) == 0, "post_send chain");
	expect(poll_one(a->cq), 21, IBV_WC_RDMA_WRITE);
	/* A bad WR in a chain: the ones before it are posted, bad_wr names it. */
	struct ibv_send_wr w4 = w2;
	w4.wr_id = 23;
	w4.opcode = IBV_WR_TSO;
	struct ibv_send_wr w3 = w2;
	w3.wr_id = 22;
	w3.next = &w4;
	CHECK(ibv_post_send(a->qp, &w3, &bad) == EOPNOTSUPP && bad == &w4, "bad_wr");
	expect(poll_one(a->cq), 22, IBV_WC_RDMA_WRITE);
	printf("ok batches\n");

	/* The QP as ibv_query_qp reports it. */
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr qi;
	CHECK(ibv_query_qp(a->qp, &qa, IBV_QP_STATE | IBV_QP_AV | IBV_QP_CAP, &qi) == 0,
	      "query_qp");
	CHECK(qa.qp_state == IBV_QPS_RTS && qa.path_mtu == IBV_MTU_1024 &&
	      qa.dest_qp_num == b->qp->qp_num && qa.ah_attr.is_global == 1 &&
	      qa.ah_attr.grh.sgid_index == 1 && qa.max_rd_atomic == 4 &&
	      !memcmp(&qa.ah_attr.grh.dgid, &b->gid, 16) && qi.qp_type == IBV_QPT_RC &&
	      qi.send_cq == a->cq && qi.cap.max_send_wr >= 32, "query_qp answers");
	printf("ok query_qp\n");

	/* A WRITE with a wrong rkey: REM_ACCESS_ERR here, and the responder hears of it
	 * on its async_fd; both QPs are in ERR after. */
	ibv_wr_start(a->qpx);
	a->qpx->wr_id = 30;
	a->qpx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_write(a->qpx, b->mr->rkey ^ 0x5a5a00, (uintptr_t)b->buf);
	ibv_wr_set_sge(a->qpx, a->mr->lkey, (uintptr_t)a->buf, 8);
	CHECK(ibv_wr_complete(a->qpx) == 0, "wr_complete");
	wc = poll_one_ex(a->cqx);
	CHECK(wc.wr_id == 30 && wc.status == IBV_WC_REM_ACCESS_ERR, "status %s",
	      ibv_wc_status_str(wc.status));
	struct ibv_async_event ev = async_event(b->ctx);
	CHECK(ev.event_type == IBV_EVENT_QP_ACCESS_ERR && ev.element.qp == b->qp,
	      "event %s", ibv_event_type_str(ev.event_type));
	ev = async_event(b->ctx);
	CHECK(ev.event_type == IBV_EVENT_QP_FATAL && ev.element.qp == b->qp, "event %s",
	      ibv_event_type_str(ev.event_type));
	printf("ok remote_access_error\n");
}

static void ud_steps(struct end *a, struct end *b)
{
	/* Plain ibv_create_qp for A (signalling every WR), create_qp_ex for B. */
	struct ibv_qp_init_attr ia = {
		.send_cq = a->cq, .recv_cq = a->cq, .qp_type = IBV_QPT_UD, .sq_sig_all = 1,
		.cap = { .max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1,
			 .max_recv_sge = 1 },
	};
	struct ibv_qp *qa = ibv_create_qp(a->pd, &ia);
	CHECK(qa, "create UD QP");
	struct ibv_qp_init_attr_ex ib = {
		.send_cq = b->cq, .recv_cq = b->cq, .qp_type = IBV_QPT_UD,
		.cap = { .max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1,
			 .max_recv_sge = 1 },
		.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
		.pd = b->pd, .send_ops_flags = IBV_QP_EX_WITH_SEND,
	};
	struct ibv_qp *qb = ibv_create_qp_ex(b->ctx, &ib);
	CHECK(qb, "create UD QP ex");
	struct ibv_qp *both[2] = { qa, qb };
	for (int i = 0; i < 2; i++) {
		struct ibv_qp_attr at = { .qp_state = IBV_QPS_INIT, .port_num = 1,
					  .qkey = 0x11111111 };
		CHECK(ibv_modify_qp(both[i], &at, IBV_QP_STATE | IBV_QP_PKEY_INDEX |
				    IBV_QP_PORT | IBV_QP_QKEY) == 0, "UD INIT");
		at.qp_state = IBV_QPS_RTR;
		CHECK(ibv_modify_qp(both[i], &at, IBV_QP_STATE) == 0, "UD RTR");
		at.qp_state = IBV_QPS_RTS;
		at.sq_psn = 1;
		CHECK(ibv_modify_qp(both[i], &at, IBV_QP_STATE | IBV_QP_SQ_PSN) == 0, "UD RTS");
	}
	/* A -> B with an AH made from B's GID. */
	struct ibv_ah_attr ah_attr = {
		.is_global = 1, .port_num = 1,
		.grh = { .dgid = b->gid, .sgid_index = 1, .hop_limit = 1 },
	};
	struct ibv_ah *ah = ibv_create_ah(a->pd, &ah_attr);
	CHECK(ah, "create_ah");
	post_recv(qb, b->mr, b->buf + 100, 40 + 512, 200);
	fill(a->buf + 1000, 512, 11);
	struct ibv_sge sge = { (uintptr_t)a->buf + 1000, 512, a->mr->lkey };
	struct ibv_send_wr wr = { .wr_id = 40, .sg_list = &sge, .num_sge = 1,
				  .opcode = IBV_WR_SEND_WITH_IMM, .imm_data = htobe32(5) }, *bad;
	wr.wr.ud.ah = ah;
	wr.wr.ud.remote_qpn = qb->qp_num;
	wr.wr.ud.remote_qkey = 0x11111111;
	CHECK(ibv_post_send(qa, &wr, &bad) == 0, "UD post_send");
	expect(poll_one(a->cq), 40, IBV_WC_SEND);
	struct ibv_wc wc = poll_one(b->cq);
	expect(wc, 200, IBV_WC_RECV);
	CHECK((wc.wc_flags & IBV_WC_GRH) && wc.byte_len == 40 + 512 && wc.src_qp == qa->qp_num &&
	      be32toh(wc.imm_data) == 5, "UD receive: flags %x len %u src %x", wc.wc_flags,
	      wc.byte_len, wc.src_qp);
	CHECK(memcmp(b->buf + 140, a->buf + 1000, 512) == 0, "UD bytes");
	/* B answers with an AH made from what it received, through ibv_wr_*. */
	struct ibv_ah *back = ibv_create_ah_from_wc(b->pd, &wc, (struct ibv_grh *)(b->buf + 100), 1);
	CHECK(back, "create_ah_from_wc");
	post_recv(qa, a->mr, a->buf + 20000, 40 + 64, 201);
	struct ibv_qp_ex *qbx = ibv_qp_to_qp_ex(qb);
	ibv_wr_start(qbx);
	qbx->wr_id = 41;
	qbx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send(qbx);
	ibv_wr_set_ud_addr(qbx, back, wc.src_qp, 0x11111111);
	ibv_wr_set_sge(qbx, b->mr->lkey, (uintptr_t)b->buf + 140, 64);
	CHECK(ibv_wr_complete(qbx) == 0, "UD wr_complete");
	expect(poll_one(b->cq), 41, IBV_WC_SEND);
	wc = poll_one(a->cq);
	expect(wc, 201, IBV_WC_RECV);
	CHECK(wc.src_qp == qb->qp_num && memcmp(a->buf + 20040, a->buf + 1000, 64) == 0,
	      "UD reply");
	/*
	 * Multicast (datasheet 14.15): B's QP joins 239.82.1.1 and takes what A sends to the
	 * group (remote QPN 0xFFFFFF); the GRH's IPv4 destination is the group's.
	 */
	union ibv_gid group = { .raw = { [10] = 0xff, [11] = 0xff, [12] = 239, [13] = 82,
					 [14] = 1, [15] = 1 } };
	struct ibv_device_attr da;
	CHECK(ibv_query_device(b->ctx, &da) == 0 && da.max_mcast_grp == 64 &&
	      da.max_mcast_qp_attach == 16, "multicast limits %d %d", da.max_mcast_grp,
	      da.max_mcast_qp_attach);
	CHECK(ibv_attach_mcast(qb, &b->gid, 0) == EINVAL, "attach to a unicast GID");
	CHECK(ibv_attach_mcast(qb, &group, 0) == 0, "attach_mcast");
	struct ibv_ah_attr mc_attr = {
		.is_global = 1, .port_num = 1,
		.grh = { .dgid = group, .sgid_index = 1, .hop_limit = 1 },
	};
	struct ibv_ah *mc = ibv_create_ah(a->pd, &mc_attr);
	CHECK(mc, "create_ah to the group");
	post_recv(qb, b->mr, b->buf + 100, 40 + 512, 202);
	wr.wr_id = 42;
	wr.opcode = IBV_WR_SEND;
	wr.wr.ud.ah = mc;
	wr.wr.ud.remote_qpn = 0xffffff;
	CHECK(ibv_post_send(qa, &wr, &bad) == 0, "UD post_send to the group");
	expect(poll_one(a->cq), 42, IBV_WC_SEND);
	wc = poll_one(b->cq);
	expect(wc, 202, IBV_WC_RECV);
	CHECK(wc.src_qp == qa->qp_num && memcmp(b->buf + 140, a->buf + 1000, 512) == 0 &&
	      memcmp(b->buf + 100 + 36, &group.raw[12], 4) == 0, "multicast receive");
	CHECK(ibv_detach_mcast(qb, &group, 0) == 0, "detach_mcast");
	CHECK(ibv_detach_mcast(qb, &group, 0) == EINVAL, "detach twice");
	CHECK(ibv_destroy_ah(mc) == 0, "destroy the group's AH");
	/* What UD QPs cannot do. */
	ibv_wr_start(qbx);
	ibv_wr_rdma_write(qbx, 1, 2);
	CHECK(ibv_wr_complete(qbx) == EINVAL, "WRITE on UD");
	CHECK(ibv_destroy_ah(back) == 0 && ibv_destroy_ah(ah) == 0, "destroy AHs");
	CHECK(ibv_destroy_qp(qa) == 0 && ibv_destroy_qp(qb) == 0, "destroy UD QPs");
	printf("ok ud\n");
}

static void srq_steps(struct end *a, struct end *b)
{
	struct ibv_srq_init_attr sa = { .attr = { .max_wr = 16, .max_sge = 1 } };
	struct ibv_srq *srq = ibv_create_srq(b->pd, &sa);
	CHECK(srq && sa.attr.max_wr >= 16, "create_srq");
	uint32_t srqn = 0;
	CHECK(ibv_get_srq_num(srq, &srqn) == 0 && srqn != 0, "get_srq_num");
	/* A fresh RC pair whose B side takes its receives from the SRQ. */
	struct ibv_qp_init_attr ia = {
		.send_cq = a->cq, .recv_cq = a->cq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1,
			 .max_recv_sge = 1 },
	};
	struct ibv_qp *qa = ibv_create_qp(a->pd, &ia);
	ia.send_cq = ia.recv_cq = b->cq;
	ia.srq = srq;
	struct ibv_qp *qb = ibv_create_qp(b->pd, &ia);
	CHECK(qa && qb && ia.cap.max_recv_wr == 0, "create QPs on an SRQ");
	connect_qp(qa, qb->qp_num, b->gid);
	connect_qp(qb, qa->qp_num, a->gid);
	for (int i = 0; i < 4; i++) {
		struct ibv_sge sge = { (uintptr_t)b->buf + 1000 * i, 1000, b->mr->lkey };
		struct ibv_recv_wr rw = { .wr_id = 300 + i, .sg_list = &sge, .num_sge = 1 }, *bad;
		CHECK(ibv_post_srq_recv(srq, &rw, &bad) == 0, "post_srq_recv");
	}
	struct ibv_recv_wr rw = { .wr_id = 1 }, *rbad;
	CHECK(ibv_post_recv(qb, &rw, &rbad) == EINVAL, "post_recv on an SRQ QP");
	/* The limit: below 3 posted, an event. */
	struct ibv_srq_attr lim = { .srq_limit = 3 };
	CHECK(ibv_modify_srq(srq, &lim, IBV_SRQ_LIMIT) == 0, "modify_srq limit");
	/* A resize not above the limit is refused; to twice the size the four
	 * receives move along (the SENDs below take them) and the limit stays. */
	struct ibv_srq_attr big = { .max_wr = 2 };
	CHECK(ibv_modify_srq(srq, &big, IBV_SRQ_MAX_WR) == EINVAL, "resize below the limit");
	big.max_wr = 2 * sa.attr.max_wr;
	CHECK(ibv_modify_srq(srq, &big, IBV_SRQ_MAX_WR) == 0, "resize");
	struct ibv_srq_attr q;
	CHECK(ibv_query_srq(srq, &q) == 0 && q.srq_limit == 3 && q.max_wr >= big.max_wr,
	      "query_srq");
	for (int i = 0; i < 2; i++) {
		struct ibv_sge sge = { (uintptr_t)a->buf + 100 * i, 100, a->mr->lkey };
		struct ibv_send_wr w = { .wr_id = 50 + i, .sg_list = &sge, .num_sge = 1,
					 .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED },
			*bad;
		CHECK(ibv_post_send(qa, &w, &bad) == 0, "post_send");
		expect(poll_one(a->cq), 50 + i, IBV_WC_SEND);
		struct ibv_wc wc = poll_one(b->cq);
		expect(wc, 300 + i, IBV_WC_RECV);
		CHECK(wc.qp_num == qb->qp_num && wc.byte_len == 100, "SRQ receive");
	}
	struct ibv_async_event ev = async_event(b->ctx);
	CHECK(ev.event_type == IBV_EVENT_SRQ_LIMIT_REACHED && ev.element.srq == srq,
	      "event %s", ibv_event_type_str(ev.event_type));
	CHECK(ibv_destroy_srq(srq) == EBUSY, "destroy an SRQ in use");
	CHECK(ibv_destroy_qp(qb) == 0 && ibv_destroy_qp(qa) == 0, "destroy QPs");
	CHECK(ibv_destroy_srq(srq) == 0, "destroy_srq");
	printf("ok srq\n");
}

/* A QP asked for more READs and atomics in flight than the function allows, as perftest
 * asks when its peer allows more (its max_rd_atomic is the peer's out_reads, 128 on
 * Soft-RoCE): RTS works, with the function's most; more responder resources than the
 * function has are refused. */
static void deep_initiator(struct end *a, struct end *b)
{
	struct ibv_device_attr da;
	CHECK(ibv_query_device(a->ctx, &da) == 0, "query_device");
	struct ibv_qp_init_attr ia = {
		.send_cq = a->cq, .recv_cq = a->cq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1 },
	};
	struct ibv_qp *qp = ibv_create_qp(a->pd, &ia);
	CHECK(qp, "create_qp");
	qp_to_init(qp);
	CHECK(qp_to_rtr(qp, b->qp->qp_num, b->gid, da.max_qp_rd_atom + 1) == EINVAL,
	      "max_dest_rd_atomic above max_qp_rd_atom");
	CHECK(qp_to_rtr(qp, b->qp->qp_num, b->gid, da.max_qp_rd_atom) == 0, "RTR");
	CHECK(qp_to_rts(qp, 128) == 0, "RTS with max_rd_atomic 128");
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr qi;
	CHECK(ibv_query_qp(qp, &qa, IBV_QP_MAX_QP_RD_ATOMIC, &qi) == 0, "query_qp");
	CHECK(da.max_qp_init_rd_atom < 128 && qa.max_rd_atomic == da.max_qp_init_rd_atom &&
	      qa.max_dest_rd_atomic == da.max_qp_rd_atom, "max_rd_atomic %d of %d",
	      qa.max_rd_atomic, da.max_qp_init_rd_atom);
	CHECK(ibv_destroy_qp(qp) == 0, "destroy_qp");
	printf("ok deep_initiator\n");
}

/* A connected pair of fresh RC QPs (the ends' own QPs are in error by now). */
struct pair {
	struct end *a, *b;
	struct ibv_qp *qa, *qb;
};

static struct ibv_qp *rc_qp(struct end *e)
{
	struct ibv_qp_init_attr ia = {
		.send_cq = e->cq, .recv_cq = e->cq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 },
	};
	struct ibv_qp *qp = ibv_create_qp(e->pd, &ia);
	CHECK(qp, "create_qp");
	return qp;
}

/* Sends 8 bytes on the pair after two seconds: what idle_wait waits for. */
static void *late_send(void *arg)
{
	struct pair *p = arg;
	sleep(2);
	struct ibv_sge sge = { .addr = (uintptr_t)p->a->buf, .length = 8, .lkey = p->a->mr->lkey };
	struct ibv_send_wr wr = { .wr_id = 301, .sg_list = &sge, .num_sge = 1,
				  .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED }, *bad;
	CHECK(ibv_post_send(p->qa, &wr, &bad) == 0, "post_send");
	return NULL;
}

/* ibv_get_cq_event blocking while nothing happens for two seconds. With interrupts
 * (vfio-user on the host, VFIO in a guest with an IOMMU) the process sleeps in it; the
 * line `idle_wait: wall W cpu C` gives the wait's wall time and the CPU time the whole
 * process used meanwhile, for the caller to judge (without interrupts the library polls). */
static void idle_wait(struct end *a, struct end *b)
{
	struct pair p = { .a = a, .b = b, .qa = rc_qp(a), .qb = rc_qp(b) };
	connect_qp(p.qa, p.qb->qp_num, b->gid);
	connect_qp(p.qb, p.qa->qp_num, a->gid);
	post_recv(p.qb, b->mr, b->buf, 64, 300);
	CHECK(ibv_req_notify_cq(b->cq, 0) == 0, "req_notify_cq");
	struct timespec c0, c1;
	double w0 = now();
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c0);
	pthread_t t;
	CHECK(pthread_create(&t, NULL, late_send, &p) == 0, "pthread_create");
	struct ibv_cq *cq;
	void *cq_ctx;
	CHECK(ibv_get_cq_event(b->ch, &cq, &cq_ctx) == 0, "get_cq_event");
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c1);
	double wall = now() - w0;
	double cpu = (c1.tv_sec - c0.tv_sec) + (c1.tv_nsec - c0.tv_nsec) / 1e9;
	CHECK(cq == b->cq, "the event names the CQ");
	ibv_ack_cq_events(cq, 1);
	CHECK(pthread_join(t, NULL) == 0, "pthread_join");
	CHECK(wall >= 1.9, "the event came after %.3f s, before the send", wall);
	expect(poll_one(b->cq), 300, IBV_WC_RECV);
	expect(poll_one(a->cq), 301, IBV_WC_SEND);
	CHECK(ibv_destroy_qp(p.qa) == 0 && ibv_destroy_qp(p.qb) == 0, "destroy_qp");
	printf("idle_wait: wall %.3f cpu %.3f\n", wall, cpu);
	printf("ok idle_wait\n");
}

static void refusals(struct end *a)
{
	long page = sysconf(_SC_PAGESIZE);
	/* Memory the process no longer has. */
	char *gone = mmap(NULL, page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	munmap(gone, page);
	errno = 0;
	CHECK(!ibv_reg_mr(a->pd, gone, 100, IBV_ACCESS_LOCAL_WRITE) && errno == EFAULT,
	      "unmapped memory");
	/* A shared file mapping: on the host (RNIC_VFIO_USER) the library cannot move it onto
	 * memory rnicd reaches; in a VM its pages are locked and translated like any. */
	FILE *f = tmpfile();
	CHECK(f && ftruncate(fileno(f), page) == 0, "tmpfile");
	char *shared = mmap(NULL, page, PROT_READ | PROT_WRITE, MAP_SHARED, fileno(f), 0);
	errno = 0;
	struct ibv_mr *smr = ibv_reg_mr(a->pd, shared, 100, 0);
	if (getenv("RNIC_VFIO_USER"))
		CHECK(!smr && errno == EOPNOTSUPP, "shared mapping on the host");
	else
		CHECK(smr && ibv_dereg_mr(smr) == 0, "shared mapping in a VM");
	munmap(shared, page);
	fclose(f);
	/* Read-only memory registered for writes; fine for reads. */
	char *ro = mmap(NULL, page, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	errno = 0;
	CHECK(!ibv_reg_mr(a->pd, ro, 100, IBV_ACCESS_LOCAL_WRITE) && errno == EFAULT,
	      "read-only for writes");
	struct ibv_mr *rmr = ibv_reg_mr(a->pd, ro, 100, IBV_ACCESS_REMOTE_READ);
	CHECK(rmr && ibv_dereg_mr(rmr) == 0, "read-only for reads");
	errno = 0;
	CHECK(!ibv_reg_mr(a->pd, a->buf, 100, IBV_ACCESS_REMOTE_WRITE) && errno == EINVAL,
	      "remote write without local write");
	errno = 0;
	CHECK(!ibv_reg_mr(a->pd, a->buf, 100, IBV_ACCESS_ON_DEMAND) && errno == EOPNOTSUPP,
	      "ODP");
	errno = 0;
	CHECK(!ibv_reg_dmabuf_mr(a->pd, 0, 100, 0, 3, 0) && errno == EOPNOTSUPP, "dmabuf");
	/* An iova at another offset within its page than the address. */
	errno = 0;
	CHECK(!ibv_reg_mr_iova2(a->pd, a->buf, 100, 0x10000, 0) && errno == EINVAL, "iova");
	struct ibv_mr *imr = ibv_reg_mr_iova2(a->pd, a->buf, 100,
					      0x7000000 + ((uintptr_t)a->buf & 4095), 0);
	CHECK(imr && ibv_dereg_mr(imr) == 0, "iova with the same page offset");
	/* QPs rnic lacks, and addresses without a GRH. */
	struct ibv_qp_init_attr raw = {
		.send_cq = a->cq, .recv_cq = a->cq, .qp_type = IBV_QPT_RAW_PACKET,
		.cap = { .max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1 },
	};
	errno = 0;
	CHECK(!ibv_create_qp(a->pd, &raw) && errno == EOPNOTSUPP, "raw packet QP");
	struct ibv_ah_attr no_grh = { .port_num = 1 };
	errno = 0;
	CHECK(!ibv_create_ah(a->pd, &no_grh) && errno == EINVAL, "AH without GRH");
	/* Destroying what is in use. */
	CHECK(ibv_dealloc_pd(a->pd) == EBUSY, "PD in use");
	CHECK(ibv_destroy_cq(a->cq) == EBUSY, "CQ in use");
	CHECK(ibv_destroy_comp_channel(a->ch) == EBUSY, "channel in use");
	/* The channel's fd honours O_NONBLOCK: nothing is there. */
	struct ibv_cq *cq;
	void *cq_ctx;
	fcntl(a->ch->fd, F_SETFL, O_NONBLOCK);
	errno = 0;
	CHECK(ibv_get_cq_event(a->ch, &cq, &cq_ctx) == -1 && errno == EAGAIN, "non-blocking");
	printf("ok refusals\n");
}

static void teardown(struct end *e)
{
	CHECK(ibv_destroy_qp(e->qp) == 0, "destroy_qp");
	CHECK(ibv_dereg_mr(e->mr) == 0, "dereg_mr");
	CHECK(ibv_destroy_cq(e->cq) == 0, "destroy_cq");
	CHECK(ibv_destroy_comp_channel(e->ch) == 0, "destroy_comp_channel");
	CHECK(ibv_dealloc_pd(e->pd) == 0, "dealloc_pd");
	CHECK(ibv_close_device(e->ctx) == 0, "close_device");
	/* The memory is the application's again. */
	e->buf[0] = 1;
	free(e->raw);
}

int main(void)
{
	struct ibv_device **list = two_devices();
	struct end a, b;
	open_end(&a, list[0]);
	open_end(&b, list[1]);
	CONNECT_ENDS(a, b);
	rc_steps(&a, &b);
	ud_steps(&a, &b);
	srq_steps(&a, &b);
	deep_initiator(&a, &b);
	idle_wait(&a, &b);
	refusals(&a);
	teardown(&a);
	teardown(&b);
	ibv_free_device_list(list);
	printf("ok done\n");
	return 0;
}
