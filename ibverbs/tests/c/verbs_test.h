/* What the C programs of ibverbs/tests share: a check that exits with a message, and
 * the steps of connecting RC QPs and moving completions. Every function is static inline,
 * so a program that leaves one unused compiles without a warning. */
#ifndef RNIC_VERBS_TEST_H
#define RNIC_VERBS_TEST_H

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <infiniband/verbs.h>

#define CHECK(cond, ...)                                                         \
	do {                                                                     \
		if (!(cond)) {                                                   \
			fprintf(stderr, "FAIL line %d: %s: ", __LINE__, #cond);  \
			fprintf(stderr, __VA_ARGS__);                            \
			fprintf(stderr, " (errno %d)\n", errno);                 \
			exit(2);                                                 \
		}                                                                \
	} while (0)

/* Seconds on the monotonic clock. */
static inline double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

/* One completion from `cq` by ibv_poll_cq, within 10 s. */
static inline struct ibv_wc poll_one(struct ibv_cq *cq)
{
	struct ibv_wc wc;
	double end = now() + 10;
	int n;
	while ((n = ibv_poll_cq(cq, 1, &wc)) == 0)
		CHECK(now() < end, "no completion within 10 s");
	CHECK(n == 1, "ibv_poll_cq returned %d", n);
	return wc;
}

/* `wc` succeeded, for WR `wr_id` with opcode `op`. */
static inline void expect(struct ibv_wc wc, uint64_t wr_id, enum ibv_wc_opcode op)
{
	CHECK(wc.status == IBV_WC_SUCCESS, "wr %lu: %s", (unsigned long)wc.wr_id,
	      ibv_wc_status_str(wc.status));
	CHECK(wc.wr_id == wr_id && wc.opcode == op, "wr %lu opcode %d, want %lu %d",
	      (unsigned long)wc.wr_id, wc.opcode, (unsigned long)wr_id, op);
}

/* RESET -> INIT, every remote access allowed. */
static inline void qp_to_init(struct ibv_qp *qp)
{
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_INIT, .port_num = 1,
		.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
				   IBV_ACCESS_REMOTE_ATOMIC,
	};
	CHECK(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
			    IBV_QP_ACCESS_FLAGS) == 0, "INIT");
}

/* INIT -> RTR, talking to QP `qpn` at `gid`, answering `max_dest_rd_atomic` READs and
 * atomics at once: ibv_modify_qp's answer. */
static inline int qp_to_rtr(struct ibv_qp *qp, uint32_t qpn, union ibv_gid gid,
			    int max_dest_rd_atomic)
{
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_RTR, .path_mtu = IBV_MTU_1024, .dest_qp_num = qpn,
		.rq_psn = 0x123, .max_dest_rd_atomic = max_dest_rd_atomic, .min_rnr_timer = 12,
		.ah_attr = { .is_global = 1, .port_num = 1,
			     .grh = { .dgid = gid, .sgid_index = 1, .hop_limit = 64 } },
	};
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
			     IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
			     IBV_QP_MIN_RNR_TIMER);
}

/* RTR -> RTS with `max_rd_atomic` READs and atomics in flight: ibv_modify_qp's answer. */
static inline int qp_to_rts(struct ibv_qp *qp, int max_rd_atomic)
{
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_RTS, .sq_psn = 0x123, .timeout = 14, .retry_cnt = 7,
		.rnr_retry = 7, .max_rd_atomic = max_rd_atomic,
	};
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
			     IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
}

/* RESET -> INIT -> RTR -> RTS, talking to QP `qpn` at `gid`. */
static inline void connect_qp(struct ibv_qp *qp, uint32_t qpn, union ibv_gid gid)
{
	qp_to_init(qp);
	CHECK(qp_to_rtr(qp, qpn, gid, 4) == 0, "RTR");
	CHECK(qp_to_rts(qp, 4) == 0, "RTS");
	CHECK(qp->state == IBV_QPS_RTS, "qp->state follows");
}

/* Posts a receive of `len` bytes at `addr` of `mr` as WR `wr_id`. */
static inline void post_recv(struct ibv_qp *qp, struct ibv_mr *mr, void *addr, uint32_t len,
			     uint64_t wr_id)
{
	struct ibv_sge sge = { .addr = (uintptr_t)addr, .length = len, .lkey = mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = wr_id, .sg_list = &sge, .num_sge = 1 }, *bad;
	CHECK(ibv_post_recv(qp, &wr, &bad) == 0, "post_recv");
}

/* Opens `dev`, reads its GID 1 (the function's own, which rnic's packets carry) into
 * `gid` and allocates a PD into `pd`. */
static inline struct ibv_context *open_with_pd(struct ibv_device *dev, union ibv_gid *gid,
					       struct ibv_pd **pd)
{
	struct ibv_context *ctx = ibv_open_device(dev);
	CHECK(ctx, "open %s", ibv_get_device_name(dev));
	CHECK(ibv_query_gid(ctx, 1, 1, gid) == 0, "query GID 1");
	*pd = ibv_alloc_pd(ctx);
	CHECK(*pd, "alloc_pd");
	return ctx;
}

/* The device list, which must name two devices (two functions of one rnicd). */
static inline struct ibv_device **two_devices(void)
{
	int n;
	struct ibv_device **list = ibv_get_device_list(&n);
	CHECK(list && n == 2, "two devices, got %d", n);
	return list;
}

/* Connects the RC QPs of ends `a` and `b` (anything with a `qp` and its function's
 * `gid`) to each other. */
#define CONNECT_ENDS(a, b)                                          \
	do {                                                        \
		connect_qp((a).qp, (b).qp->qp_num, (b).gid);        \
		connect_qp((b).qp, (a).qp->qp_num, (a).gid);        \
	} while (0)

#endif
