// SPDX-License-Identifier: GPL-2.0
/*
 * rnic.ko's user verbs without a provider: ib_uverbs' write() commands on
 * /dev/infiniband/uverbsN with the driver data of kernel/rnic-abi-user.h,
 * the doorbell and kick pages mapped, WQEs and CQEs of kernel/rnic_abi.h in
 * this process's memory. Built static on the host, run in the kernel guest
 * (boot.sh --kernel --file).
 *
 *   uverbs_smoke run DEV     contexts, PD, MRs (16 MiB, 256 MiB, unmapped),
 *                            CQ, RC QP connected to itself, two RDMA WRITEs
 *                            (the second with a completion event), a UD QP
 *                            with no receive queue, memory windows (with
 *                            CAP_MW), the page pool's limit
 *   uverbs_smoke hold DEV    a context with objects, then sleeps (for rmmod)
 *
 * Prints "UVERBS-SMOKE OK" at the end of a successful run.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#include <rdma/ib_user_verbs.h>

/* ibverbs access flags (IBV_ACCESS_*): local write 1, remote write 2, remote read 4 */

#include "../../kernel/rnic_abi.h"

#define die(...) do { fprintf(stderr, "uverbs_smoke: " __VA_ARGS__); \
		       fprintf(stderr, "\n"); exit(1); } while (0)
#define check(c, ...) do { if (!(c)) die(__VA_ARGS__); } while (0)

struct ctx {
	int fd;
	struct rnic_uverbs_alloc_ucontext_resp uc;
	volatile uint8_t *db;
	volatile uint32_t *kick;
};

/* One write() command: header, body, driver data; response buffer. */
static int cmd(int fd, uint32_t op, void *body, size_t blen, const void *drv,
	       size_t dlen, void *resp, size_t rlen)
{
	uint8_t buf[512];
	struct ib_uverbs_cmd_hdr *h = (void *)buf;
	size_t in = sizeof(*h) + blen + dlen;

	if (resp)	/* every body with a response starts with its address */
		*(uint64_t *)body = (uintptr_t)resp;
	h->command = op;
	h->in_words = in / 4;
	h->out_words = rlen / 4;
	memcpy(buf + sizeof(*h), body, blen);
	if (dlen)
		memcpy(buf + sizeof(*h) + blen, drv, dlen);
	return write(fd, buf, in) == (ssize_t)in ? 0 : -errno;
}

static int open_ctx(const char *dev, struct ctx *c)
{
	struct ib_uverbs_get_context g = {};
	struct {
		struct ib_uverbs_get_context_resp r;
		struct rnic_uverbs_alloc_ucontext_resp d;
	} resp = {};
	int ret;

	c->fd = open(dev, O_RDWR | O_CLOEXEC);
	check(c->fd >= 0, "open %s: %s", dev, strerror(errno));
	ret = cmd(c->fd, IB_USER_VERBS_CMD_GET_CONTEXT, &g, sizeof(g), NULL, 0,
		  &resp, sizeof(resp));
	if (ret) {
		close(c->fd);
		return ret;
	}
	c->uc = resp.d;
	return 0;
}

static void map_ctx(struct ctx *c)
{
	void *p;

	p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, c->fd,
		 c->uc.doorbell_offset);
	check(p != MAP_FAILED, "mmap doorbell page: %s", strerror(errno));
	c->db = p;
	p = mmap(NULL, 4096, PROT_WRITE, MAP_SHARED, c->fd, c->uc.kick_offset);
	check(p != MAP_FAILED, "mmap kick page: %s", strerror(errno));
	c->kick = p;
	/* Wrong length: refused. */
	p = mmap(NULL, 8192, PROT_READ, MAP_SHARED, c->fd,
		 c->uc.doorbell_offset);
	check(p == MAP_FAILED, "an 8 KiB mapping of the doorbell page worked");
}

static uint32_t alloc_pd(struct ctx *c, uint32_t *pdn)
{
	struct ib_uverbs_alloc_pd a = {};
	struct {
		struct ib_uverbs_alloc_pd_resp r;
		struct rnic_uverbs_alloc_pd_resp d;
	} __attribute__((packed)) resp = {};

	check(!cmd(c->fd, IB_USER_VERBS_CMD_ALLOC_PD, &a, sizeof(a), NULL, 0,
		   &resp, sizeof(resp)), "ALLOC_PD");
	*pdn = resp.d.pdn;
	return resp.r.pd_handle;
}

static int reg_mr(struct ctx *c, uint32_t pd, void *addr, uint64_t len,
		  struct ib_uverbs_reg_mr_resp *resp)
{
	struct ib_uverbs_reg_mr r = {
		.start = (uintptr_t)addr,
		.length = len,
		.hca_va = (uintptr_t)addr,
		.pd_handle = pd,
		.access_flags = 1 |
				2 |
				4,
	};

	return cmd(c->fd, IB_USER_VERBS_CMD_REG_MR, &r, sizeof(r), NULL, 0,
		   resp, sizeof(*resp));
}

/* ALLOC_MW of @type: 0 with the window's handle and key, or -errno. */
static int alloc_mw(struct ctx *c, uint32_t pd, uint8_t type,
		    struct ib_uverbs_alloc_mw_resp *resp)
{
	struct ib_uverbs_alloc_mw a = { .pd_handle = pd, .mw_type = type };

	return cmd(c->fd, IB_USER_VERBS_CMD_ALLOC_MW, &a, sizeof(a), NULL, 0,
		   resp, sizeof(*resp));
}

static void *ring(size_t len)
{
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	check(p != MAP_FAILED, "ring of %zu bytes", len);
	return p;
}

struct cq {
	uint32_t handle, entries, cqn, slot, consumed;
	struct rnic_cqe *ring;
};

static void create_cq(struct ctx *c, struct cq *cq, uint32_t entries,
		      int channel)
{
	struct ib_uverbs_create_cq r = {
		.cqe = entries,
		.comp_channel = channel,
	};
	struct rnic_uverbs_create_cq_req d = {};
	struct {
		struct ib_uverbs_create_cq_resp r;
		struct rnic_uverbs_create_cq_resp d;
	} resp = {};

	cq->ring = ring(entries * sizeof(struct rnic_cqe));
	d.ring_va = (uintptr_t)cq->ring;
	d.entries = entries;
	check(!cmd(c->fd, IB_USER_VERBS_CMD_CREATE_CQ, &r, sizeof(r), &d,
		   sizeof(d), &resp, sizeof(resp)), "CREATE_CQ");
	cq->handle = resp.r.cq_handle;
	cq->entries = resp.d.entries;
	cq->cqn = resp.d.cqn;
	cq->slot = resp.d.doorbell_slot;
	cq->consumed = 0;
	printf("CQ %u: %u entries, slot %u\n", cq->cqn, cq->entries, cq->slot);
}

struct qp {
	uint32_t handle, qpn, sq_slot, rq_slot, sq_stride, rq_stride, posted;
	uint32_t sq_entries;
	uint8_t *sq;
};

static int create_qp(struct ctx *c, struct qp *qp, uint32_t pd,
		     struct cq *cq, uint8_t type, uint32_t sq_entries,
		     uint32_t rq_entries)
{
	struct ib_uverbs_create_qp r = {
		.pd_handle = pd,
		.send_cq_handle = cq->handle,
		.recv_cq_handle = cq->handle,
		.max_send_wr = sq_entries,
		.max_recv_wr = rq_entries,
		.max_send_sge = 2,
		.max_recv_sge = 2,
		.max_inline_data = 64,
		.qp_type = type,
	};
	struct rnic_uverbs_create_qp_req d = {};
	struct {
		struct ib_uverbs_create_qp_resp r;
		struct rnic_uverbs_create_qp_resp d;
	} resp = {};
	uint32_t sq_stride = rnic_sq_stride(2, 64), rq_stride = rnic_rq_stride(2);
	int ret;

	qp->sq = ring(sq_entries * sq_stride);
	d.sq_va = (uintptr_t)qp->sq;
	d.sq_entries = sq_entries;
	if (rq_entries)
		d.rq_va = (uintptr_t)ring(rq_entries * rq_stride);
	d.rq_entries = rq_entries;
	ret = cmd(c->fd, IB_USER_VERBS_CMD_CREATE_QP, &r, sizeof(r), &d,
		  sizeof(d), &resp, sizeof(resp));
	if (ret)
		return ret;
	qp->handle = resp.r.qp_handle;
	qp->qpn = resp.d.qpn;
	qp->sq_slot = resp.d.sq_slot;
	qp->rq_slot = resp.d.rq_slot;
	qp->sq_stride = resp.d.sq_stride;
	qp->rq_stride = resp.d.rq_stride;
	qp->sq_entries = sq_entries;
	qp->posted = 0;
	printf("QP %u (type %u): slots %u/%u, strides %u/%u, inline %u, caps %u/%u wr\n",
	       qp->qpn, type, qp->sq_slot, qp->rq_slot, qp->sq_stride,
	       qp->rq_stride, resp.d.max_inline_data, resp.r.max_send_wr,
	       resp.r.max_recv_wr);
	check(qp->sq_stride == sq_stride && qp->rq_stride == rq_stride,
	      "strides %u/%u, expected %u/%u", qp->sq_stride, qp->rq_stride,
	      sq_stride, rq_stride);
	check(resp.r.max_recv_wr == rq_entries, "max_recv_wr %u",
	      resp.r.max_recv_wr);
	return 0;
}

static void modify(struct ctx *c, struct ib_uverbs_modify_qp *m)
{
	int ret = cmd(c->fd, IB_USER_VERBS_CMD_MODIFY_QP, m, sizeof(*m), NULL,
		      0, NULL, 0);

	check(!ret, "MODIFY_QP to %u: %s", m->qp_state, strerror(-ret));
}

/* The function's own RoCEv2 GID (IPv4-mapped) and its index. */
static int own_gid(const char *ibdev, uint8_t gid[16])
{
	char path[256], text[64];
	unsigned int w[8];
	int i, j;
	FILE *f;

	for (i = 0; i < 16; i++) {
		snprintf(path, sizeof(path),
			 "/sys/class/infiniband/%s/ports/1/gid_attrs/types/%d",
			 ibdev, i);
		f = fopen(path, "r");
		if (!f || !fgets(text, sizeof(text), f) ||
		    strncmp(text, "RoCE v2", 7)) {
			if (f)
				fclose(f);
			continue;
		}
		fclose(f);
		snprintf(path, sizeof(path),
			 "/sys/class/infiniband/%s/ports/1/gids/%d", ibdev, i);
		f = fopen(path, "r");
		if (!f)
			continue;
		if (fscanf(f, "%x:%x:%x:%x:%x:%x:%x:%x", &w[0], &w[1], &w[2],
			   &w[3], &w[4], &w[5], &w[6], &w[7]) == 8 &&
		    !w[0] && !w[1] && !w[2] && !w[3] && !w[4] &&
		    w[5] == 0xffff) {
			fclose(f);
			for (j = 0; j < 8; j++) {
				gid[2 * j] = w[j] >> 8;
				gid[2 * j + 1] = w[j] & 0xff;
			}
			return i;
		}
		fclose(f);
	}
	die("no IPv4 RoCE v2 GID on %s", ibdev);
}

static void connect_self(struct ctx *c, struct qp *qp, const char *ibdev)
{
	struct ib_uverbs_modify_qp m = {};
	int idx;

	m.qp_handle = qp->handle;
	m.attr_mask = RNIC_ATTR_STATE | RNIC_ATTR_PKEY_INDEX | RNIC_ATTR_PORT |
		      RNIC_ATTR_ACCESS_FLAGS;
	m.qp_state = RNIC_QPS_INIT;
	m.port_num = 1;
	m.qp_access_flags = 2 |
			    4;
	modify(c, &m);

	memset(&m, 0, sizeof(m));
	m.qp_handle = qp->handle;
	m.attr_mask = RNIC_ATTR_STATE | RNIC_ATTR_AV | RNIC_ATTR_PATH_MTU |
		      RNIC_ATTR_DEST_QPN | RNIC_ATTR_RQ_PSN |
		      RNIC_ATTR_MAX_DEST_RD_ATOMIC | RNIC_ATTR_MIN_RNR_TIMER;
	m.qp_state = RNIC_QPS_RTR;
	idx = own_gid(ibdev, m.dest.dgid);
	m.dest.sgid_index = idx;
	m.dest.hop_limit = 64;
	m.dest.is_global = 1;
	m.dest.port_num = 1;
	m.path_mtu = 3;
	m.dest_qp_num = qp->qpn;
	m.rq_psn = 100;
	m.max_dest_rd_atomic = 1;
	m.min_rnr_timer = 12;
	modify(c, &m);

	memset(&m, 0, sizeof(m));
	m.qp_handle = qp->handle;
	m.attr_mask = RNIC_ATTR_STATE | RNIC_ATTR_TIMEOUT | RNIC_ATTR_RETRY_CNT |
		      RNIC_ATTR_RNR_RETRY | RNIC_ATTR_SQ_PSN | RNIC_ATTR_MAX_QP_RD_ATOMIC;
	m.qp_state = RNIC_QPS_RTS;
	m.timeout = 14;
	m.retry_cnt = 7;
	m.rnr_retry = 7;
	m.sq_psn = 100;
	m.max_rd_atomic = 1;
	modify(c, &m);
}

/* Datasheet 7.5 from a process: WQE, posted count, bit, kick if asked. */
static void post_write(struct ctx *c, struct qp *qp, void *src,
		       uint32_t lkey, void *dst, uint32_t rkey, uint32_t len)
{
	uint8_t *w = qp->sq + (qp->posted & (qp->sq_entries - 1)) *
		     qp->sq_stride;
	struct rnic_send_wqe *wqe = (void *)w;
	struct rnic_sge *sge = (void *)(w + sizeof(*wqe));
	volatile uint32_t *bitmap;

	memset(w, 0, qp->sq_stride);
	wqe->wr_id = 0x1000 + qp->posted;
	wqe->opcode = RNIC_WR_RDMA_WRITE;
	wqe->flags = RNIC_SEND_SIGNALED;
	wqe->num_sge = 1;
	wqe->remote_addr = (uintptr_t)dst;
	wqe->rkey = rkey;
	sge->addr = (uintptr_t)src;
	sge->length = len;
	sge->lkey = lkey;
	qp->posted++;
	__atomic_thread_fence(__ATOMIC_RELEASE);
	*(volatile uint32_t *)(c->db + RNIC_DB_SLOTS_BASE +
			       qp->sq_slot * RNIC_DB_SLOT_SIZE) = qp->posted;
	bitmap = (volatile uint32_t *)(c->db + RNIC_DB_RUNG_BITMAP +
				       4 * (qp->sq_slot / 32));
	__atomic_fetch_or(bitmap, 1u << (qp->sq_slot % 32), __ATOMIC_SEQ_CST);
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	if (*(volatile uint32_t *)(c->db + RNIC_DB_NOTIFY_REQUEST))
		*c->kick = c->uc.doorbell_page;
}

static struct rnic_cqe *poll_cqe(struct ctx *c, struct cq *cq)
{
	struct rnic_cqe *e;
	int i;

	for (i = 0; i < 5000; i++) {
		e = &cq->ring[cq->consumed & (cq->entries - 1)];
		if ((__atomic_load_n(&e->owner, __ATOMIC_ACQUIRE) & 1) ==
		    rnic_owner_phase(cq->consumed, cq->entries)) {
			cq->consumed++;
			*(volatile uint32_t *)(c->db + RNIC_DB_SLOTS_BASE +
					       cq->slot * RNIC_DB_SLOT_SIZE) =
				cq->consumed;
			return e;
		}
		usleep(1000);
	}
	die("no CQE in 5 s");
}

/* ibv_query_device_ex's command: the driver's query_device with udata. */
static void query_device_ex(struct ctx *c)
{
	struct {
		struct ib_uverbs_cmd_hdr h;
		struct ib_uverbs_ex_cmd_hdr x;
		struct ib_uverbs_ex_query_device q;
	} req = {};
	struct ib_uverbs_ex_query_device_resp r = {};
	struct ib_uverbs_query_device_resp *b = &r.base;

	req.h.command = IB_USER_VERBS_CMD_FLAG_EXTENDED |
			IB_USER_VERBS_EX_CMD_QUERY_DEVICE;
	req.h.in_words = sizeof(req.q) / 8;
	req.h.out_words = sizeof(r) / 8;
	req.x.response = (uintptr_t)&r;
	check(write(c->fd, &req, sizeof(req)) == sizeof(req),
	      "EX_QUERY_DEVICE: %s", strerror(errno));
	printf("device: max_qp %u max_qp_wr %u max_sge %u max_cq %u max_cqe %u max_mr %u max_pd %u max_mr_size %#llx page_size_cap %#llx max_qp_rd_atom %u\n",
	       b->max_qp, b->max_qp_wr, b->max_sge, b->max_cq, b->max_cqe,
	       b->max_mr, b->max_pd, (unsigned long long)b->max_mr_size,
	       (unsigned long long)b->page_size_cap, b->max_qp_rd_atom);
	check(b->max_qp_wr && b->max_sge && b->max_cqe && b->max_mr_size &&
	      b->page_size_cap == 4096, "device limits");
}

static void hold(const char *dev)
{
	struct ctx c;
	struct cq cq;
	struct qp qp;
	struct ib_uverbs_reg_mr_resp mr;
	uint32_t pd, pdn;
	void *buf = ring(1 << 20);

	check(!open_ctx(dev, &c), "GET_CONTEXT");
	map_ctx(&c);
	pd = alloc_pd(&c, &pdn);
	check(!reg_mr(&c, pd, buf, 1 << 20, &mr), "REG_MR");
	create_cq(&c, &cq, 64, -1);
	check(!create_qp(&c, &qp, pd, &cq, RNIC_QPT_RC, 16, 16), "CREATE_QP");
	printf("UVERBS-SMOKE HOLDING\n");
	fflush(stdout);
	for (;;)
		pause();
}

int main(int argc, char **argv)
{
	const char *dev, *ibdev = "rnic0";
	struct ib_uverbs_create_comp_channel cc = {};
	struct ib_uverbs_create_comp_channel_resp ccr = {};
	struct ib_uverbs_comp_event_desc ev;
	struct ib_uverbs_reg_mr_resp mr, big;
	struct ctx c, more[16];
	struct rnic_cqe *e;
	struct pollfd pfd;
	struct cq cq;
	struct qp qp, ud;
	uint32_t pd, pdn;
	uint8_t *buf, *huge;
	int i, n, ret;

	if (argc < 3)
		die("usage: uverbs_smoke run|hold /dev/infiniband/uverbsN [ibdev]");
	dev = argv[2];
	if (argc > 3)
		ibdev = argv[3];
	if (!strcmp(argv[1], "hold"))
		hold(dev);

	check(!open_ctx(dev, &c), "GET_CONTEXT");
	printf("context: ABI %#x, doorbell page %u, offsets %#llx/%#llx, caps %#llx\n",
	       c.uc.abi_version, c.uc.doorbell_page,
	       (unsigned long long)c.uc.doorbell_offset,
	       (unsigned long long)c.uc.kick_offset,
	       (unsigned long long)c.uc.caps);
	check(c.uc.abi_version == (RNIC_ABI_MAJOR << 16 | RNIC_ABI_MINOR),
	      "ABI %#x", c.uc.abi_version);
	check(c.uc.doorbell_page >= 4, "doorbell page %u", c.uc.doorbell_page);
	check(c.uc.caps & RNIC_CAP_USER_KICK, "caps");
	map_ctx(&c);
	query_device_ex(&c);
	pd = alloc_pd(&c, &pdn);
	printf("PD %u\n", pdn);

	/* 16 MiB, then 256 MiB (page tables), then memory that is not there. */
	buf = ring(16 << 20);
	memset(buf, 0, 16 << 20);
	check(!reg_mr(&c, pd, buf, 16 << 20, &mr), "REG_MR 16 MiB");
	printf("MR 16 MiB: lkey %#x rkey %#x\n", mr.lkey, mr.rkey);
	huge = ring(256 << 20);
	ret = reg_mr(&c, pd, huge, 256 << 20, &big);
	check(!ret, "REG_MR 256 MiB: %s", strerror(-ret));
	printf("MR 256 MiB: lkey %#x\n", big.lkey);
	munmap(huge + (128 << 20), 1 << 20);
	ret = reg_mr(&c, pd, huge + (128 << 20), 4096, &big);
	printf("MR of unmapped memory: %s\n", strerror(-ret));
	check(ret == -EFAULT, "REG_MR of unmapped memory: %d", ret);
	ret = reg_mr(&c, pd, (void *)0x1000, 4096, &big);
	check(ret == -EFAULT, "REG_MR at 0x1000: %d", ret);

	check(!cmd(c.fd, IB_USER_VERBS_CMD_CREATE_COMP_CHANNEL, &cc,
		   sizeof(cc), NULL, 0, &ccr, sizeof(ccr)), "COMP_CHANNEL");
	create_cq(&c, &cq, 256, ccr.fd);
	check(!create_qp(&c, &qp, pd, &cq, RNIC_QPT_RC, 64, 64), "CREATE_QP RC");
	connect_self(&c, &qp, ibdev);

	/* An RDMA WRITE to itself: 4 KiB from offset 0 to offset 1 MiB. */
	for (i = 0; i < 4096; i++)
		buf[i] = i * 7 + 3;
	post_write(&c, &qp, buf, mr.lkey, buf + (1 << 20), mr.rkey, 4096);
	e = poll_cqe(&c, &cq);
	printf("CQE: wr_id %#llx status %u opcode %u qp %u\n",
	       (unsigned long long)e->wr_id, e->status, e->opcode, e->qp_num);
	check(!e->status && e->opcode == RNIC_WC_RDMA_WRITE &&
	      e->qp_num == qp.qpn && e->wr_id == 0x1000, "CQE");
	check(!memcmp(buf, buf + (1 << 20), 4096), "written data differ");

	/* Armed: the next completion is an event on the channel. */
	*(volatile uint32_t *)(c.db + RNIC_DB_SLOTS_BASE +
			       cq.slot * RNIC_DB_SLOT_SIZE + 4) =
		rnic_cq_arm_word(1, 0);
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	post_write(&c, &qp, buf, mr.lkey, buf + (2 << 20), mr.rkey, 4096);
	pfd.fd = ccr.fd;
	pfd.events = POLLIN;
	check(poll(&pfd, 1, 5000) == 1, "no completion event in 5 s");
	check(read(ccr.fd, &ev, sizeof(ev)) == sizeof(ev), "read event");
	check(ev.cq_handle == 0, "event of CQ handle %llu",
	      (unsigned long long)ev.cq_handle);
	e = poll_cqe(&c, &cq);
	check(!e->status && !memcmp(buf, buf + (2 << 20), 4096),
	      "second WRITE");
	printf("completion event and second WRITE: ok\n");

	/* UD without a receive queue; GSI refused. */
	check(!create_qp(&c, &ud, pd, &cq, RNIC_QPT_UD, 8, 0), "CREATE_QP UD");
	ret = create_qp(&c, &ud, pd, &cq, 0xff, 8, 8);
	check(ret, "QP of an unknown type created");

	/*
	 * Memory windows: a key of each type with MW_KEY_BIT and tag 0, type 3
	 * refused; one freed, the other left to the close.
	 */
	if (c.uc.caps & RNIC_CAP_MW) {
		struct ib_uverbs_alloc_mw_resp mw1, mw2, mw3;
		struct ib_uverbs_dealloc_mw d = {};

		check(!alloc_mw(&c, pd, 1, &mw1), "ALLOC_MW type 1");
		check(!alloc_mw(&c, pd, 2, &mw2), "ALLOC_MW type 2");
		printf("MWs: type 1 rkey %#x, type 2 rkey %#x\n", mw1.rkey,
		       mw2.rkey);
		check(mw1.rkey & RNIC_MW_KEY_BIT && !(mw1.rkey & 0xff) &&
		      mw2.rkey & RNIC_MW_KEY_BIT && !(mw2.rkey & 0xff) &&
		      mw1.rkey != mw2.rkey, "MW keys");
		ret = alloc_mw(&c, pd, 3, &mw3);
		check(ret == -EINVAL, "ALLOC_MW of type 3: %d", ret);
		d.mw_handle = mw1.mw_handle;
		check(!cmd(c.fd, IB_USER_VERBS_CMD_DEALLOC_MW, &d, sizeof(d),
			   NULL, 0, NULL, 0), "DEALLOC_MW");
	}

	/* Every page 4 and up: one context each, then none. */
	for (n = 0; n < 16; n++) {
		ret = open_ctx(dev, &more[n]);
		if (ret)
			break;
	}
	printf("%d more contexts, then: %s\n", n, strerror(-ret));
	check(ret == -ENOSPC && n >= 1, "page pool");
	close(more[--n].fd);
	check(!open_ctx(dev, &more[n]), "a freed page is not reused");
	for (i = 0; i <= n; i++)
		close(more[i].fd);

	close(c.fd);	/* the core destroys everything through the driver */
	check(!open_ctx(dev, &c), "GET_CONTEXT after close");
	close(c.fd);
	printf("UVERBS-SMOKE OK\n");
	return 0;
}
