/* Two contexts of one process on one function, as rdma-core's own test suite opens them
 * (a client's and a server's on the device under test): both open, each has its own
 * objects, their RC QPs talk to each other through the function, and each context's
 * completion channel gets the events of its own CQs only. Closing one leaves the other
 * working; closing both frees the function, which opens again. A child made by fork does
 * not get the parent's function: EBUSY.
 *
 * Prints `ok STEP` after each step; exits 2 with a message at the first wrong answer. */
#include <fcntl.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "verbs_test.h"

#define SIZE 256

/* One context's objects. */
struct end {
	struct ibv_context *ctx;
	union ibv_gid gid;
	struct ibv_pd *pd;
	struct ibv_comp_channel *chan;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_mr *mr;
	char buf[2 * SIZE];
};

/* Opens `dev` into `e`: PD, a channel, a CQ on it, an RC QP, a region over `buf`. */
static void open_end(struct ibv_device *dev, struct end *e)
{
	e->ctx = open_with_pd(dev, &e->gid, &e->pd);
	e->chan = ibv_create_comp_channel(e->ctx);
	CHECK(e->chan, "create_comp_channel");
	e->cq = ibv_create_cq(e->ctx, 16, e, e->chan, 0);
	CHECK(e->cq, "create_cq");
	struct ibv_qp_init_attr qa = {
		.send_cq = e->cq, .recv_cq = e->cq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1,
			 .max_recv_sge = 1 },
	};
	e->qp = ibv_create_qp(e->pd, &qa);
	CHECK(e->qp, "create_qp");
	e->mr = ibv_reg_mr(e->pd, e->buf, sizeof(e->buf), IBV_ACCESS_LOCAL_WRITE);
	CHECK(e->mr, "reg_mr");
}

/* `from` SENDs `SIZE` bytes of `fill` to `to`, which waits for the receive's completion
 * event on its own channel: the event names `to`'s CQ and context. */
static void send_and_wait_event(struct end *from, struct end *to, char fill)
{
	post_recv(to->qp, to->mr, to->buf + SIZE, SIZE, 7);
	CHECK(ibv_req_notify_cq(to->cq, 0) == 0, "req_notify_cq");
	memset(from->buf, fill, SIZE);
	struct ibv_sge sge = { .addr = (uintptr_t)from->buf, .length = SIZE,
			       .lkey = from->mr->lkey };
	struct ibv_send_wr wr = { .wr_id = 9, .sg_list = &sge, .num_sge = 1,
				  .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED },
			   *bad;
	CHECK(ibv_post_send(from->qp, &wr, &bad) == 0, "post_send");
	struct ibv_cq *cq;
	void *cq_ctx;
	CHECK(ibv_get_cq_event(to->chan, &cq, &cq_ctx) == 0, "get_cq_event");
	CHECK(cq == to->cq && cq_ctx == to, "the event names the receiver's CQ");
	CHECK(cq->context == to->ctx, "of the receiver's context");
	ibv_ack_cq_events(cq, 1);
	expect(poll_one(to->cq), 7, IBV_WC_RECV);
	if (from->cq != to->cq)
		expect(poll_one(from->cq), 9, IBV_WC_SEND);
	for (int i = 0; i < SIZE; i++)
		CHECK(to->buf[SIZE + i] == fill, "byte %d", i);
}

/* The sender's own channel saw no event: it armed nothing. */
static void no_event(struct end *e)
{
	struct ibv_cq *cq;
	void *cq_ctx;
	int flags = fcntl(e->chan->fd, F_GETFL);
	CHECK(fcntl(e->chan->fd, F_SETFL, flags | O_NONBLOCK) == 0, "O_NONBLOCK");
	CHECK(ibv_get_cq_event(e->chan, &cq, &cq_ctx) == -1 && errno == EAGAIN,
	      "no event on the other context's channel");
	CHECK(fcntl(e->chan->fd, F_SETFL, flags) == 0, "blocking again");
}

int main(void)
{
	int n;
	struct ibv_device **list = ibv_get_device_list(&n);
	CHECK(list && n >= 1, "a device, got %d", n);
	static struct end a, b;

	open_end(list[0], &a);
	open_end(list[0], &b);
	CHECK(a.ctx != b.ctx, "two contexts");
	CHECK(memcmp(&a.gid, &b.gid, sizeof(a.gid)) == 0, "one function: one GID");
	CHECK(a.qp->qp_num != b.qp->qp_num, "two QPs of one function");
	printf("ok open_twice\n");

	fflush(stdout);
	pid_t child = fork();
	CHECK(child >= 0, "fork");
	if (child == 0) {
		errno = 0;
		struct ibv_context *c = ibv_open_device(list[0]);
		_exit(c == NULL && errno == EBUSY ? 0 : 1);
	}
	int status;
	CHECK(waitpid(child, &status, 0) == child, "waitpid");
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0,
	      "a forked child's open is EBUSY (status %#x)", status);
	printf("ok fork_busy\n");

	CONNECT_ENDS(a, b);
	send_and_wait_event(&a, &b, 'a');
	no_event(&a);
	send_and_wait_event(&b, &a, 'b');
	no_event(&b);
	printf("ok events_per_context\n");

	/* A's context closes with its objects in place: they go with it, B keeps working
	 * (two new QPs of B's, connected to each other). */
	CHECK(ibv_close_device(a.ctx) == 0, "close A");
	struct ibv_qp_init_attr qa = {
		.send_cq = b.cq, .recv_cq = b.cq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1,
			 .max_recv_sge = 1 },
	};
	struct end c = b, d = b;
	c.qp = ibv_create_qp(b.pd, &qa);
	d.qp = ibv_create_qp(b.pd, &qa);
	CHECK(c.qp && d.qp, "two more QPs on B");
	CONNECT_ENDS(c, d);
	/* c and d share B's CQ, channel and region: the SEND's and the receive's
	 * completions both land there; the event is the first of them. */
	post_recv(d.qp, b.mr, b.buf + SIZE, SIZE, 7);
	CHECK(ibv_req_notify_cq(b.cq, 0) == 0, "req_notify_cq");
	memset(b.buf, 'c', SIZE);
	struct ibv_sge sge = { .addr = (uintptr_t)b.buf, .length = SIZE, .lkey = b.mr->lkey };
	struct ibv_send_wr wr = { .wr_id = 9, .sg_list = &sge, .num_sge = 1,
				  .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED },
			   *bad;
	CHECK(ibv_post_send(c.qp, &wr, &bad) == 0, "post_send");
	struct ibv_cq *cq;
	void *cq_ctx;
	CHECK(ibv_get_cq_event(b.chan, &cq, &cq_ctx) == 0 && cq == b.cq, "B's event");
	ibv_ack_cq_events(cq, 1);
	struct ibv_wc wc[2];
	int got = 0;
	double end = now() + 10;
	while (got < 2) {
		int k = ibv_poll_cq(b.cq, 2 - got, wc + got);
		CHECK(k >= 0, "poll_cq");
		got += k;
		CHECK(now() < end, "two completions within 10 s");
	}
	for (int i = 0; i < 2; i++)
		CHECK(wc[i].status == IBV_WC_SUCCESS, "%s", ibv_wc_status_str(wc[i].status));
	for (int i = 0; i < SIZE; i++)
		CHECK(b.buf[SIZE + i] == 'c', "byte %d", i);
	printf("ok one_closed\n");

	CHECK(ibv_close_device(b.ctx) == 0, "close B");
	struct ibv_context *again = ibv_open_device(list[0]);
	CHECK(again, "the function opens again after both closed");
	CHECK(ibv_close_device(again) == 0, "close");
	printf("ok reopen\n");

	ibv_free_device_list(list);
	printf("ok done\n");
	return 0;
}
