// SPDX-License-Identifier: MIT
/*
 * SRQ control verbs through Debian's libibverbs and rnic's provider on one
 * function: ibv_create_srq, ibv_query_srq, ibv_modify_srq (the limit armed),
 * two RC QPs connected to each other, the receiver on the SRQ; SENDs until the
 * limit fires (IBV_EVENT_SRQ_LIMIT_REACHED from ibv_get_async_event, the limit
 * then 0), the receives completed with their wr_ids; a resize (IBV_SRQ_MAX_WR)
 * below the receives pending refused, one to 16 WRs with them, which the next
 * SENDs then take in order; ibv_post_recv on the SRQ's QP refused, and
 * everything destroyed.
 * Usage: srq_limit DEVICE GID_INDEX. Prints "srq_limit: ok" at the end.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <infiniband/verbs.h>

#define CHECK(c) do { if (!(c)) { fprintf(stderr, "srq_limit: %s:%d: %s failed (errno %d)\n", __FILE__, __LINE__, #c, errno); exit(1); } } while (0)

static struct ibv_qp *rc_qp(struct ibv_pd *pd, struct ibv_cq *cq,
			    struct ibv_srq *srq)
{
	struct ibv_qp_init_attr a = {
		.send_cq = cq, .recv_cq = cq, .srq = srq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 16, .max_send_sge = 1,
			 .max_recv_wr = srq ? 0 : 16, .max_recv_sge = srq ? 0 : 1 },
	};
	return ibv_create_qp(pd, &a);
}

static void connect_qp(struct ibv_qp *qp, uint32_t dest, union ibv_gid *gid,
		       int gidx)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1,
				 .qp_access_flags = IBV_ACCESS_REMOTE_WRITE };

	CHECK(!ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX |
			     IBV_QP_PORT | IBV_QP_ACCESS_FLAGS));
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = dest;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 12;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = *gid;
	a.ah_attr.grh.sgid_index = gidx;
	a.ah_attr.grh.hop_limit = 1;
	a.ah_attr.port_num = 1;
	CHECK(!ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
			     IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
			     IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER));
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.max_rd_atomic = 1;
	CHECK(!ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT |
			     IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
			     IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC));
}

static int poll_n(struct ibv_cq *cq, struct ibv_wc *wc, int n)
{
	int got = 0, spins = 0;

	while (got < n && spins++ < 20000000) {
		int r = ibv_poll_cq(cq, n - got, wc + got);

		CHECK(r >= 0);
		got += r;
	}
	return got;
}

int main(int argc, char **argv)
{
	struct ibv_device **list;
	struct ibv_context *ctx = NULL;
	struct ibv_srq_init_attr sia = { .attr = { .max_wr = 8, .max_sge = 1 } };
	struct ibv_srq_attr sa;
	struct ibv_async_event ev;
	struct ibv_wc wc[16];
	union ibv_gid gid;
	struct pollfd pfd;
	char *buf;
	int i, n, gidx;

	CHECK(argc == 3);
	gidx = atoi(argv[2]);
	list = ibv_get_device_list(&n);
	CHECK(list);
	for (i = 0; i < n; i++)
		if (!strcmp(ibv_get_device_name(list[i]), argv[1]))
			ctx = ibv_open_device(list[i]);
	CHECK(ctx);
	CHECK(!ibv_query_gid(ctx, 1, gidx, &gid));
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	CHECK(pd);
	buf = calloc(1, 16 * 64);
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, 16 * 64, IBV_ACCESS_LOCAL_WRITE);
	CHECK(mr);
	struct ibv_cq *cq = ibv_create_cq(ctx, 32, NULL, NULL, 0);
	CHECK(cq);

	struct ibv_srq *srq = ibv_create_srq(pd, &sia);
	CHECK(srq);
	printf("srq_limit: created an SRQ of %u WRs, %u SGEs\n", sia.attr.max_wr,
	       sia.attr.max_sge);
	CHECK(sia.attr.max_wr == 8 && sia.attr.max_sge == 1);
	CHECK(!ibv_query_srq(srq, &sa));
	CHECK(sa.max_wr == 8 && sa.max_sge == 1 && sa.srq_limit == 0);
	sa.srq_limit = 4;
	CHECK(!ibv_modify_srq(srq, &sa, IBV_SRQ_LIMIT));
	CHECK(!ibv_query_srq(srq, &sa));
	CHECK(sa.srq_limit == 4);

	struct ibv_qp *tx = rc_qp(pd, cq, NULL);
	struct ibv_qp *rx = rc_qp(pd, cq, srq);

	CHECK(tx && rx);
	connect_qp(tx, rx->qp_num, &gid, gidx);
	connect_qp(rx, tx->qp_num, &gid, gidx);

	/* Eight receives; a post_recv on the SRQ's QP is refused. */
	for (i = 0; i < 8; i++) {
		struct ibv_sge s = { (uintptr_t)(buf + i * 64), 64, mr->lkey };
		struct ibv_recv_wr w = { .wr_id = 100 + i, .sg_list = &s,
					 .num_sge = 1 }, *bad;

		CHECK(!ibv_post_srq_recv(srq, &w, &bad));
		if (i == 0)
			CHECK(ibv_post_recv(rx, &w, &bad) != 0);
	}
	{
		struct ibv_sge s = { (uintptr_t)buf, 64, mr->lkey };
		struct ibv_recv_wr w = { .wr_id = 999, .sg_list = &s,
					 .num_sge = 1 }, *bad;

		CHECK(ibv_post_srq_recv(srq, &w, &bad) == ENOMEM);
	}
	/* Five SENDs: the fifth leaves 3 < 4 posted, and the limit fires. */
	for (i = 0; i < 5; i++) {
		struct ibv_sge s = { (uintptr_t)(buf + 15 * 64), 32, mr->lkey };
		struct ibv_send_wr w = { .wr_id = i, .sg_list = &s, .num_sge = 1,
					 .opcode = IBV_WR_SEND,
					 .send_flags = IBV_SEND_SIGNALED }, *bad;

		CHECK(!ibv_post_send(tx, &w, &bad));
	}
	CHECK(poll_n(cq, wc, 10) == 10);
	for (i = 0, n = 0; i < 10; i++) {
		CHECK(wc[i].status == IBV_WC_SUCCESS);
		if (wc[i].opcode == IBV_WC_RECV) {
			CHECK(wc[i].qp_num == rx->qp_num);
			CHECK(wc[i].wr_id == 100 + (uint64_t)n);
			n++;
		}
	}
	CHECK(n == 5);
	pfd.fd = ctx->async_fd;
	pfd.events = POLLIN;
	CHECK(poll(&pfd, 1, 5000) == 1);
	CHECK(!ibv_get_async_event(ctx, &ev));
	printf("srq_limit: async event %s\n", ibv_event_type_str(ev.event_type));
	CHECK(ev.event_type == IBV_EVENT_SRQ_LIMIT_REACHED &&
	      ev.element.srq == srq);
	ibv_ack_async_event(&ev);
	CHECK(!ibv_query_srq(srq, &sa));
	CHECK(sa.srq_limit == 0);
	/* Receives 105 to 107 pending: a resize below them is refused. */
	sa.max_wr = 2;
	errno = 0;
	CHECK(ibv_modify_srq(srq, &sa, IBV_SRQ_MAX_WR) != 0);
	printf("srq_limit: resize below the pending receives refused (errno %d)\n",
	       errno);
	sa.max_wr = 16;
	CHECK(!ibv_modify_srq(srq, &sa, IBV_SRQ_MAX_WR));
	CHECK(!ibv_query_srq(srq, &sa));
	CHECK(sa.max_wr == 16 && sa.srq_limit == 0);
	printf("srq_limit: resized to %u WRs\n", sa.max_wr);
	/* Entries freed by the completions can be posted again. */
	for (i = 0; i < 5; i++) {
		struct ibv_sge s = { (uintptr_t)(buf + i * 64), 64, mr->lkey };
		struct ibv_recv_wr w = { .wr_id = 200 + i, .sg_list = &s,
					 .num_sge = 1 }, *bad;

		CHECK(!ibv_post_srq_recv(srq, &w, &bad));
	}
	/* Four SENDs take 105 to 107 from the new ring, then 200. */
	for (i = 0; i < 4; i++) {
		struct ibv_sge s = { (uintptr_t)(buf + 15 * 64), 32, mr->lkey };
		struct ibv_send_wr w = { .wr_id = 10 + i, .sg_list = &s,
					 .num_sge = 1, .opcode = IBV_WR_SEND,
					 .send_flags = IBV_SEND_SIGNALED }, *bad;

		CHECK(!ibv_post_send(tx, &w, &bad));
	}
	CHECK(poll_n(cq, wc, 8) == 8);
	for (i = 0, n = 0; i < 8; i++) {
		CHECK(wc[i].status == IBV_WC_SUCCESS);
		if (wc[i].opcode == IBV_WC_RECV) {
			CHECK(wc[i].wr_id == (n < 3 ? 105 + (uint64_t)n : 200));
			n++;
		}
	}
	CHECK(n == 4);
	errno = 0;
	CHECK(ibv_destroy_srq(srq) != 0);	/* rx still uses it */
	CHECK(!ibv_destroy_qp(rx));
	CHECK(!ibv_destroy_qp(tx));
	CHECK(!ibv_destroy_srq(srq));
	CHECK(!ibv_destroy_cq(cq));
	CHECK(!ibv_dereg_mr(mr));
	CHECK(!ibv_dealloc_pd(pd));
	CHECK(!ibv_close_device(ctx));
	ibv_free_device_list(list);
	printf("srq_limit: ok\n");
	return 0;
}
