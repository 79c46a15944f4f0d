/* Memory windows through Debian's <infiniband/verbs.h>, on devices 0 (a, the peer that
 * reads and writes) and 1 (b, which owns the memory and binds the windows) of one rnicd,
 * in one process, over RC QPs: what ibv_query_device says of them; a type 1 window bound
 * with ibv_bind_mw, written and read through its rkey from two QPs, bound again and its
 * old key refused; rights and ranges enforced; ibv_dereg_mr EBUSY while a window is
 * bound; a bind to a region without IBV_ACCESS_MW_BIND failing with IBV_WC_MW_BIND_ERR;
 * a type 2 window bound with IBV_WR_BIND_MW, usable only through the QP that bound it,
 * invalidated with IBV_WR_LOCAL_INV, bound again, and refused a second bind; a peer's
 * SEND with invalidate of a type 2 window; a zero-based type 2 window bound with
 * ibv_wr_bind_mw; a window's key refused as an lkey.
 *
 * Every access that must fail fails with its exact status on a fresh pair of QPs (a
 * failed WR takes both QPs to the error state); every WR is signaled and has exactly one
 * completion, checked as it comes, and the CQs are empty at the end. Every check exits
 * with a message on stderr when it fails; each step that passes prints `ok STEP` for
 * ibverbs/tests/memory_windows.rs. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <infiniband/verbs.h>

#include "verbs_test.h"

#define LEN (64 * 1024)
#define RW (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ)

struct end {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	union ibv_gid gid;
	char *buf;
	struct ibv_mr *mr;
};

/* A connected pair of RC QPs: `qa` on a, `qb` on b. */
struct link {
	struct ibv_qp *qa, *qb;
};

static struct ibv_qp *new_qp(struct end *e)
{
	struct ibv_qp_init_attr qa = {
		.send_cq = e->cq, .recv_cq = e->cq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 1,
			 .max_recv_sge = 1 },
	};
	struct ibv_qp *qp = ibv_create_qp(e->pd, &qa);
	CHECK(qp, "create_qp");
	return qp;
}

static struct link connect_link(struct end *a, struct end *b, struct ibv_qp *qb)
{
	struct link l = { .qa = new_qp(a), .qb = qb };
	connect_qp(l.qa, l.qb->qp_num, b->gid);
	connect_qp(l.qb, l.qa->qp_num, a->gid);
	return l;
}

static struct link new_link(struct end *a, struct end *b)
{
	return connect_link(a, b, new_qp(b));
}

static void open_end(struct end *e, struct ibv_device *dev, int access)
{
	e->ctx = open_with_pd(dev, &e->gid, &e->pd);
	e->cq = ibv_create_cq(e->ctx, 256, NULL, NULL, 0);
	CHECK(e->cq, "create_cq");
	e->buf = calloc(1, LEN);
	CHECK(e->buf, "calloc");
	e->mr = ibv_reg_mr(e->pd, e->buf, LEN, access);
	CHECK(e->mr, "reg_mr");
}

static uint64_t next_id;

/* Posts `wr` (signaled, with a fresh wr_id) on `qp` and returns its completion from
 * `cq`, which must be for it. */
static struct ibv_wc post_one(struct ibv_qp *qp, struct ibv_cq *cq, struct ibv_send_wr *wr)
{
	struct ibv_send_wr *bad;
	wr->wr_id = ++next_id;
	wr->send_flags |= IBV_SEND_SIGNALED;
	CHECK(ibv_post_send(qp, wr, &bad) == 0, "post_send opcode %d", wr->opcode);
	struct ibv_wc wc = poll_one(cq);
	CHECK(wc.wr_id == wr->wr_id, "completion of wr %lu, want %lu", (unsigned long)wc.wr_id,
	      (unsigned long)wr->wr_id);
	return wc;
}

/* `wc` ended with `status`, and (on success) as `op`. */
static void expect_wc(struct ibv_wc wc, enum ibv_wc_status status, enum ibv_wc_opcode op,
		      const char *what)
{
	CHECK(wc.status == status, "%s: %s, want %s", what, ibv_wc_status_str(wc.status),
	      ibv_wc_status_str(status));
	CHECK(status != IBV_WC_SUCCESS || wc.opcode == op, "%s: opcode %d, want %d", what,
	      wc.opcode, op);
}

/* `len` bytes between `local` (of a's region) and `remote` through `rkey`, by `op` (RDMA
 * WRITE or READ) on `qa`: the completion's status. */
static enum ibv_wc_status rdma(struct end *a, struct ibv_qp *qa, enum ibv_wr_opcode op,
			       char *local, uint64_t remote, uint32_t rkey, uint32_t len)
{
	struct ibv_sge sge = { .addr = (uintptr_t)local, .length = len, .lkey = a->mr->lkey };
	struct ibv_send_wr wr = { .sg_list = &sge, .num_sge = 1, .opcode = op };
	wr.wr.rdma.remote_addr = remote;
	wr.wr.rdma.rkey = rkey;
	struct ibv_wc wc = post_one(qa, a->cq, &wr);
	if (wc.status == IBV_WC_SUCCESS)
		CHECK(wc.opcode == (op == IBV_WR_RDMA_READ ? IBV_WC_RDMA_READ : IBV_WC_RDMA_WRITE),
		      "opcode %d", wc.opcode);
	return wc.status;
}

/* An access that must fail with REM_ACCESS_ERR, on a fresh link (it takes the QPs to
 * the error state). */
static void refused(struct end *a, struct end *b, enum ibv_wr_opcode op, uint64_t remote,
		    uint32_t rkey, uint32_t len, const char *what)
{
	struct link l = new_link(a, b);
	enum ibv_wc_status s = rdma(a, l.qa, op, a->buf + LEN - 8192, remote, rkey, len);
	CHECK(s == IBV_WC_REM_ACCESS_ERR, "%s: %s", what, ibv_wc_status_str(s));
}

/* Binds type 2 window `mw` to `len` bytes at `addr` of `mr` under `rkey` with an
 * IBV_WR_BIND_MW work request on `qb`: the completion. */
static struct ibv_wc bind_by_wr(struct end *b, struct ibv_qp *qb, struct ibv_mw *mw,
				uint32_t rkey, struct ibv_mr *mr, void *addr, uint64_t len,
				unsigned access)
{
	struct ibv_send_wr wr = { .opcode = IBV_WR_BIND_MW };
	wr.bind_mw.mw = mw;
	wr.bind_mw.rkey = rkey;
	wr.bind_mw.bind_info = (struct ibv_mw_bind_info){
		.mr = mr, .addr = (uintptr_t)addr, .length = len, .mw_access_flags = access };
	return post_one(qb, b->cq, &wr);
}

/* Binds type 1 window `mw` with ibv_bind_mw on `qb`: the completion (the call itself
 * must succeed, and set mw->rkey to the next key). */
static struct ibv_wc bind_type1(struct end *b, struct ibv_qp *qb, struct ibv_mw *mw,
				struct ibv_mr *mr, void *addr, uint64_t len, unsigned access)
{
	uint32_t before = mw->rkey;
	struct ibv_mw_bind bind = {
		.wr_id = ++next_id, .send_flags = IBV_SEND_SIGNALED,
		.bind_info = { .mr = mr, .addr = (uintptr_t)addr, .length = len,
			       .mw_access_flags = access },
	};
	CHECK(ibv_bind_mw(qb, mw, &bind) == 0, "ibv_bind_mw");
	CHECK(mw->rkey == ibv_inc_rkey(before), "mw->rkey %#x after %#x", mw->rkey, before);
	struct ibv_wc wc = poll_one(b->cq);
	CHECK(wc.wr_id == bind.wr_id, "bind completion");
	return wc;
}

/* Nothing more on `cq` for 100 ms. */
static void quiet(struct ibv_cq *cq, const char *who)
{
	struct ibv_wc wc;
	double end = now() + 0.1;
	while (now() < end)
		CHECK(ibv_poll_cq(cq, 1, &wc) == 0, "%s: a completion too many (wr %lu, %s)", who,
		      (unsigned long)wc.wr_id, ibv_wc_status_str(wc.status));
}

static void fill(char *p, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (char)(i * 7 + seed);
}

static void query(struct end *b)
{
	struct ibv_device_attr attr;
	CHECK(ibv_query_device(b->ctx, &attr) == 0, "query_device");
	CHECK(attr.max_mw > 0 && attr.max_mw == attr.max_mr, "max_mw %d, max_mr %d", attr.max_mw,
	      attr.max_mr);
	CHECK(attr.device_cap_flags & IBV_DEVICE_MEM_WINDOW, "IBV_DEVICE_MEM_WINDOW");
	CHECK(attr.device_cap_flags & IBV_DEVICE_MEM_WINDOW_TYPE_2B, "TYPE_2B");
	CHECK(!(attr.device_cap_flags & IBV_DEVICE_MEM_WINDOW_TYPE_2A), "not TYPE_2A");
	struct ibv_device_attr_ex ex;
	CHECK(ibv_query_device_ex(b->ctx, NULL, &ex) == 0, "query_device_ex");
	CHECK(ex.orig_attr.max_mw == attr.max_mw &&
	      (ex.device_cap_flags_ex & IBV_DEVICE_MEM_WINDOW), "extended query");
	printf("ok query\n");
}

/* A type 1 window: bound, written and read through from two QPs of the PD, bound again
 * elsewhere with fewer rights; the old key, the missing right and the range refused; a
 * LOCAL_INV of it fails. Returns it. */
static struct ibv_mw *type1(struct end *a, struct end *b)
{
	struct link l1 = new_link(a, b), l2 = new_link(a, b);
	struct ibv_mw *mw = ibv_alloc_mw(b->pd, IBV_MW_TYPE_1);
	CHECK(mw, "alloc_mw type 1");
	CHECK(mw->type == IBV_MW_TYPE_1 && mw->pd == b->pd && mw->context == b->ctx,
	      "mw fields");
	char *win = b->buf + 4096;
	expect_wc(bind_type1(b, l1.qb, mw, b->mr, win, 8192, RW), IBV_WC_SUCCESS,
		  IBV_WC_BIND_MW, "bind");
	fill(a->buf, 1000, 1);
	CHECK(rdma(a, l1.qa, IBV_WR_RDMA_WRITE, a->buf, (uintptr_t)win + 100, mw->rkey, 1000) ==
	      IBV_WC_SUCCESS, "WRITE through the window");
	CHECK(memcmp(win + 100, a->buf, 1000) == 0, "bytes written");
	/* Any QP of the PD: the READ goes through the other link. */
	CHECK(rdma(a, l2.qa, IBV_WR_RDMA_READ, a->buf + 4096, (uintptr_t)win + 100, mw->rkey,
		   1000) == IBV_WC_SUCCESS, "READ through the window");
	CHECK(memcmp(a->buf + 4096, a->buf, 1000) == 0, "bytes read");
	printf("ok type1\n");

	/* Bound again, read-only, elsewhere: the new key reads, the old one is refused. */
	uint32_t old = mw->rkey;
	char *win2 = b->buf + 16384;
	fill(win2, 4096, 2);
	expect_wc(bind_type1(b, l2.qb, mw, b->mr, win2, 4096, IBV_ACCESS_REMOTE_READ),
		  IBV_WC_SUCCESS, IBV_WC_BIND_MW, "rebind");
	CHECK(rdma(a, l2.qa, IBV_WR_RDMA_READ, a->buf + 8192, (uintptr_t)win2, mw->rkey, 4096) ==
	      IBV_WC_SUCCESS, "READ through the new key");
	CHECK(memcmp(a->buf + 8192, win2, 4096) == 0, "bytes read");
	CHECK(rdma(a, l1.qa, IBV_WR_RDMA_WRITE, a->buf, (uintptr_t)win + 100, old, 8) ==
	      IBV_WC_REM_ACCESS_ERR, "the old key");
	printf("ok rebind\n");

	refused(a, b, IBV_WR_RDMA_WRITE, (uintptr_t)win2, mw->rkey, 8, "WRITE without the right");
	refused(a, b, IBV_WR_RDMA_READ, (uintptr_t)win2 + 4090, mw->rkey, 16, "past the end");
	refused(a, b, IBV_WR_RDMA_READ, (uintptr_t)win2 - 8, mw->rkey, 8, "before the start");
	CHECK(memcmp(a->buf + 8192, win2, 4096) == 0 && memcmp(win + 100, a->buf, 8) == 0,
	      "nothing moved");
	/* A type 1 window cannot be invalidated. */
	struct link l3 = new_link(a, b);
	struct ibv_send_wr inv = { .opcode = IBV_WR_LOCAL_INV, .invalidate_rkey = mw->rkey };
	expect_wc(post_one(l3.qb, b->cq, &inv), IBV_WC_LOC_QP_OP_ERR, 0, "LOCAL_INV of type 1");
	CHECK(rdma(a, l2.qa, IBV_WR_RDMA_READ, a->buf + 8192, (uintptr_t)win2, mw->rkey, 64) ==
	      IBV_WC_SUCCESS, "still bound");
	printf("ok rights_and_range\n");
	return mw;
}

/* A region with a bound window cannot be deregistered until the window is unbound; a
 * region without IBV_ACCESS_MW_BIND cannot be bound to. */
static void dereg_busy(struct end *a, struct end *b)
{
	struct link l = new_link(a, b);
	char *mem = calloc(1, 8192);
	CHECK(mem, "calloc");
	struct ibv_mr *mr = ibv_reg_mr(b->pd, mem, 8192,
				       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND);
	CHECK(mr, "reg_mr MW_BIND");
	struct ibv_mw *mw = ibv_alloc_mw(b->pd, IBV_MW_TYPE_1);
	CHECK(mw, "alloc_mw");
	expect_wc(bind_type1(b, l.qb, mw, mr, mem, 8192, RW), IBV_WC_SUCCESS, IBV_WC_BIND_MW,
		  "bind");
	errno = 0;
	CHECK(ibv_dereg_mr(mr) == EBUSY, "dereg with a bound window");
	fill(a->buf, 64, 3);
	CHECK(rdma(a, l.qa, IBV_WR_RDMA_WRITE, a->buf, (uintptr_t)mem + 8000, mw->rkey, 64) ==
	      IBV_WC_SUCCESS, "the region still works");
	CHECK(memcmp(mem + 8000, a->buf, 64) == 0, "bytes");
	/* Unbound (no region, length 0): the region is free, the key dead. */
	expect_wc(bind_type1(b, l.qb, mw, NULL, NULL, 0, 0), IBV_WC_SUCCESS, IBV_WC_BIND_MW,
		  "unbind");
	CHECK(ibv_dereg_mr(mr) == 0, "dereg once unbound");
	refused(a, b, IBV_WR_RDMA_READ, (uintptr_t)mem, mw->rkey, 8, "an unbound window");

	/* No IBV_ACCESS_MW_BIND: the bind fails, and the QP with it. */
	struct ibv_mr *plain = ibv_reg_mr(b->pd, mem, 8192, IBV_ACCESS_LOCAL_WRITE);
	CHECK(plain, "reg_mr without MW_BIND");
	uint32_t before = mw->rkey;
	expect_wc(bind_type1(b, l.qb, mw, plain, mem, 4096, IBV_ACCESS_REMOTE_READ),
		  IBV_WC_MW_BIND_ERR, 0, "bind to a region without MW_BIND");
	mw->rkey = before; /* the application undoes the key of a failed bind */
	CHECK(ibv_dealloc_mw(mw) == 0, "dealloc_mw");
	CHECK(ibv_dereg_mr(plain) == 0, "dereg");
	free(mem);
	printf("ok dereg_busy\n");
}

/* Type 2: bound by a work request, for the QP that bound it only, invalidated by
 * LOCAL_INV, bound again, refused a bind while bound. */
static void type2(struct end *a, struct end *b)
{
	struct ibv_mw *mw = ibv_alloc_mw(b->pd, IBV_MW_TYPE_2);
	CHECK(mw && mw->type == IBV_MW_TYPE_2, "alloc_mw type 2");
	struct link l = new_link(a, b);
	/* verbs.h binds type 1 windows only with ibv_bind_mw. */
	struct ibv_mw_bind mb = { .bind_info = { .mr = b->mr, .addr = (uintptr_t)b->buf,
						 .length = 64, .mw_access_flags = RW } };
	CHECK(ibv_bind_mw(l.qb, mw, &mb) == EINVAL, "ibv_bind_mw of type 2");
	char *win = b->buf + 32768;
	uint32_t key = ibv_inc_rkey(mw->rkey);
	expect_wc(bind_by_wr(b, l.qb, mw, key, b->mr, win, 4096, RW), IBV_WC_SUCCESS,
		  IBV_WC_BIND_MW, "IBV_WR_BIND_MW");
	fill(a->buf, 4096, 4);
	CHECK(rdma(a, l.qa, IBV_WR_RDMA_WRITE, a->buf, (uintptr_t)win, key, 4096) ==
	      IBV_WC_SUCCESS, "WRITE through the window");
	CHECK(memcmp(win, a->buf, 4096) == 0, "bytes");
	/* Another QP of the PD may not use it. */
	refused(a, b, IBV_WR_RDMA_READ, (uintptr_t)win, key, 8, "through another QP");
	/* LOCAL_INV of its key frees it. */
	struct ibv_send_wr inv = { .opcode = IBV_WR_LOCAL_INV, .invalidate_rkey = key };
	expect_wc(post_one(l.qb, b->cq, &inv), IBV_WC_SUCCESS, IBV_WC_LOCAL_INV, "LOCAL_INV");
	CHECK(rdma(a, l.qa, IBV_WR_RDMA_READ, a->buf, (uintptr_t)win, key, 8) ==
	      IBV_WC_REM_ACCESS_ERR, "an invalidated window");
	/* Free again: bound anew, through another QP, under the next key. */
	struct link l2 = new_link(a, b);
	uint32_t key2 = ibv_inc_rkey(key);
	expect_wc(bind_by_wr(b, l2.qb, mw, key2, b->mr, win, 2048, IBV_ACCESS_REMOTE_READ),
		  IBV_WC_SUCCESS, IBV_WC_BIND_MW, "bind after invalidation");
	CHECK(rdma(a, l2.qa, IBV_WR_RDMA_READ, a->buf + 8192, (uintptr_t)win, key2, 2048) ==
	      IBV_WC_SUCCESS, "READ through the new binding");
	CHECK(memcmp(a->buf + 8192, win, 2048) == 0, "bytes read");
	/* Bound: a second bind fails. */
	expect_wc(bind_by_wr(b, l2.qb, mw, ibv_inc_rkey(key2), b->mr, win, 64, RW),
		  IBV_WC_MW_BIND_ERR, 0, "a bind while bound");
	CHECK(ibv_dealloc_mw(mw) == 0, "dealloc a bound window");
	printf("ok type2\n");
}

/* A's SEND with invalidate frees b's type 2 window bound on the receiving QP. */
static void send_inv(struct end *a, struct end *b)
{
	struct ibv_mw *mw = ibv_alloc_mw(b->pd, IBV_MW_TYPE_2);
	CHECK(mw, "alloc_mw");
	struct link l = new_link(a, b);
	char *win = b->buf + 40960;
	uint32_t key = ibv_inc_rkey(mw->rkey);
	expect_wc(bind_by_wr(b, l.qb, mw, key, b->mr, win, 1024, RW), IBV_WC_SUCCESS,
		  IBV_WC_BIND_MW, "bind");
	CHECK(rdma(a, l.qa, IBV_WR_RDMA_READ, a->buf, (uintptr_t)win, key, 1024) ==
	      IBV_WC_SUCCESS, "READ before");
	post_recv(l.qb, b->mr, b->buf + 49152, 64, 777);
	struct ibv_sge sge = { .addr = (uintptr_t)a->buf, .length = 16, .lkey = a->mr->lkey };
	struct ibv_send_wr wr = { .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND_WITH_INV,
				  .invalidate_rkey = key };
	expect_wc(post_one(l.qa, a->cq, &wr), IBV_WC_SUCCESS, IBV_WC_SEND, "SEND with invalidate");
	struct ibv_wc got = poll_one(b->cq);
	expect(got, 777, IBV_WC_RECV);
	CHECK(got.byte_len == 16 && (got.wc_flags & IBV_WC_WITH_INV) &&
	      !(got.wc_flags & IBV_WC_WITH_IMM) && got.invalidated_rkey == key,
	      "receive: %u bytes, flags %#x, invalidated %#x (want %#x)", got.byte_len,
	      got.wc_flags, got.invalidated_rkey, key);
	CHECK(rdma(a, l.qa, IBV_WR_RDMA_READ, a->buf, (uintptr_t)win, key, 8) ==
	      IBV_WC_REM_ACCESS_ERR, "the invalidated window");
	CHECK(ibv_dealloc_mw(mw) == 0, "dealloc_mw");
	printf("ok send_inv\n");
}

/* A zero-based type 2 window bound with the ibv_wr_* API: its first byte is address 0. */
static void zero_based(struct end *a, struct end *b)
{
	struct ibv_qp_init_attr_ex x = {
		.send_cq = b->cq, .recv_cq = b->cq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 1,
			 .max_recv_sge = 1 },
		.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
		.pd = b->pd,
		.send_ops_flags = IBV_QP_EX_WITH_BIND_MW | IBV_QP_EX_WITH_LOCAL_INV,
	};
	struct ibv_qp *qb = ibv_create_qp_ex(b->ctx, &x);
	CHECK(qb, "create_qp_ex with BIND_MW");
	struct link l = connect_link(a, b, qb);
	struct ibv_mw *mw = ibv_alloc_mw(b->pd, IBV_MW_TYPE_2);
	CHECK(mw, "alloc_mw");
	char *win = b->buf + 8192;
	memset(win, 0, 4096);
	uint32_t key = ibv_inc_rkey(mw->rkey);
	struct ibv_qp_ex *qpx = ibv_qp_to_qp_ex(qb);
	CHECK(qpx, "qp_ex");
	struct ibv_mw_bind_info info = { .mr = b->mr, .addr = (uintptr_t)win, .length = 4096,
					 .mw_access_flags = RW | IBV_ACCESS_ZERO_BASED };
	ibv_wr_start(qpx);
	qpx->wr_id = ++next_id;
	qpx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_bind_mw(qpx, mw, key, &info);
	CHECK(ibv_wr_complete(qpx) == 0, "ibv_wr_complete");
	expect(poll_one(b->cq), next_id, IBV_WC_BIND_MW);
	fill(a->buf, 200, 5);
	CHECK(rdma(a, l.qa, IBV_WR_RDMA_WRITE, a->buf, 100, key, 200) == IBV_WC_SUCCESS,
	      "WRITE at address 100 of the window");
	CHECK(memcmp(win + 100, a->buf, 200) == 0, "bytes at the window's byte 100");
	CHECK(rdma(a, l.qa, IBV_WR_RDMA_READ, a->buf + 4096, 4000, key, 96) == IBV_WC_SUCCESS,
	      "READ at its end");
	CHECK(memcmp(a->buf + 4096, win + 4000, 96) == 0, "bytes read");
	refused(a, b, IBV_WR_RDMA_READ, 4090, key, 16, "past a zero-based window's end");
	/* Zero-based is for type 2 only: ibv_bind_mw refuses it, as rxe. */
	struct ibv_mw *t1 = ibv_alloc_mw(b->pd, IBV_MW_TYPE_1);
	CHECK(t1, "alloc_mw");
	uint32_t before = t1->rkey;
	struct ibv_mw_bind mb = { .bind_info = { .mr = b->mr, .addr = (uintptr_t)win,
						 .length = 64,
						 .mw_access_flags = RW | IBV_ACCESS_ZERO_BASED } };
	errno = 0;
	CHECK(ibv_bind_mw(l.qb, t1, &mb) == EINVAL && errno == EINVAL, "zero-based type 1");
	CHECK(t1->rkey == before, "the key stays");
	CHECK(ibv_dealloc_mw(t1) == 0 && ibv_dealloc_mw(mw) == 0, "dealloc_mw");
	printf("ok zero_based\n");
}

/* A window's key is no lkey: a SEND gathering through it fails LOC_PROT_ERR. */
static void not_an_lkey(struct end *a, struct end *b, struct ibv_mw *bound)
{
	struct link l = new_link(a, b);
	post_recv(l.qa, a->mr, a->buf, 64, 888);
	struct ibv_sge sge = { .addr = (uintptr_t)b->buf + 16384, .length = 8,
			       .lkey = bound->rkey };
	struct ibv_send_wr wr = { .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND };
	expect_wc(post_one(l.qb, b->cq, &wr), IBV_WC_LOC_PROT_ERR, 0, "a window key as lkey");
	/* Nothing reached a, whose receive stays posted until its QP is put in error. */
	struct ibv_qp_attr attr = { .qp_state = IBV_QPS_ERR };
	CHECK(ibv_modify_qp(l.qa, &attr, IBV_QP_STATE) == 0, "a's QP to ERR");
	struct ibv_wc wc = poll_one(a->cq);
	CHECK(wc.wr_id == 888 && wc.status == IBV_WC_WR_FLUSH_ERR, "the receive is flushed");
	printf("ok not_an_lkey\n");
}

int main(void)
{
	struct ibv_device **list = two_devices();
	struct end a, b;
	open_end(&a, list[0], IBV_ACCESS_LOCAL_WRITE);
	open_end(&b, list[1], IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND);

	query(&b);
	struct ibv_mw *t1 = type1(&a, &b);
	dereg_busy(&a, &b);
	type2(&a, &b);
	send_inv(&a, &b);
	zero_based(&a, &b);
	not_an_lkey(&a, &b, t1);

	/* One completion per WR: nothing is left. The bound window goes before its
	 * region, which then deregisters. */
	quiet(a.cq, "a");
	quiet(b.cq, "b");
	errno = 0;
	CHECK(ibv_dereg_mr(b.mr) == EBUSY, "b's region has a bound window");
	CHECK(ibv_dealloc_mw(t1) == 0, "dealloc_mw");
	CHECK(ibv_dereg_mr(b.mr) == 0, "dereg after the window went");
	printf("ok done\n");
	/* The rest (QPs, CQs, PDs) goes with the contexts. */
	ibv_close_device(a.ctx);
	ibv_close_device(b.ctx);
	ibv_free_device_list(list);
	return 0;
}
