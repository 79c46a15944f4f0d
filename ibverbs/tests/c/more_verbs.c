/* The verbs of libibverbs' ABI beyond the data path, through Debian's
 * <infiniband/verbs.h>, on devices 0 and 1 (two functions of one rnicd) in one process
 * with connected RC QPs: ibv_query_qp_data_in_order; ibv_rereg_mr moving a region to
 * other memory, giving it other access and another PD, with the data going where the new
 * keys say, rdma-core's argument checks, a failed re-registration leaving the region as
 * it was, and the old keys refused; and the imports, refused as rdma-core refuses them
 * for a provider without import support.
 *
 * Every check exits with a message on stderr when it fails; each step that passes
 * prints `ok STEP` for ibverbs/tests/more_verbs.rs. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#include "verbs_test.h"

struct end {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	union ibv_gid gid;
};

static void open_end(struct end *e, struct ibv_device *dev)
{
	e->ctx = open_with_pd(dev, &e->gid, &e->pd);
	e->cq = ibv_create_cq(e->ctx, 32, NULL, NULL, 0);
	CHECK(e->cq, "create_cq");
	struct ibv_qp_init_attr qa = {
		.send_cq = e->cq, .recv_cq = e->cq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 1,
			 .max_recv_sge = 1 },
	};
	e->qp = ibv_create_qp(e->pd, &qa);
	CHECK(e->qp, "create_qp");
}

/* `len` bytes between `local` (of `mr`) and `remote` (`rkey`) of the peer, by `op`
 * (RDMA WRITE or READ): the completion's status. */
static enum ibv_wc_status rdma(struct end *a, enum ibv_wr_opcode op, struct ibv_mr *mr,
			       void *local, void *remote, uint32_t rkey, uint32_t len)
{
	static uint64_t id;
	struct ibv_sge sge = { .addr = (uintptr_t)local, .length = len, .lkey = mr->lkey };
	struct ibv_send_wr wr = { .wr_id = ++id, .sg_list = &sge, .num_sge = 1,
				  .opcode = op, .send_flags = IBV_SEND_SIGNALED }, *bad;
	wr.wr.rdma.remote_addr = (uintptr_t)remote;
	wr.wr.rdma.rkey = rkey;
	CHECK(ibv_post_send(a->qp, &wr, &bad) == 0, "post_send");
	struct ibv_wc wc = poll_one(a->cq);
	CHECK(wc.wr_id == id, "wr %lu, want %lu", (unsigned long)wc.wr_id, (unsigned long)id);
	return wc.status;
}

static void fill(char *p, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (char)(i * 13 + seed);
}

static void data_in_order(struct end *a)
{
	/* rnic guarantees no order of placement within a message: 0, every way asked. */
	CHECK(ibv_query_qp_data_in_order(a->qp, IBV_WR_RDMA_WRITE, 0) == 0, "WRITE");
	CHECK(ibv_query_qp_data_in_order(a->qp, IBV_WR_SEND,
					 IBV_QUERY_QP_DATA_IN_ORDER_RETURN_CAPS) == 0, "caps");
	CHECK(ibv_query_qp_data_in_order(a->qp, IBV_WR_RDMA_READ, 1 << 5) == 0, "flags");
	printf("ok data_in_order\n");
}

#define LEN 8192

/* Returns the first registration's rkey, to be tried once the QPs may fail. */
static uint32_t rereg(struct end *a, struct end *b, struct ibv_mr *a_mr, char *src,
		      struct ibv_mr **b_mr_out, char **two_out)
{
	char *one = malloc(LEN), *two = malloc(LEN);
	CHECK(one && two, "malloc");
	memset(one, 0, LEN);
	memset(two, 0, LEN);
	struct ibv_mr *mr = ibv_reg_mr(b->pd, one, 4096,
				       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	CHECK(mr, "reg_mr");
	CHECK(rdma(a, IBV_WR_RDMA_WRITE, a_mr, src, one, mr->rkey, 4096) == IBV_WC_SUCCESS,
	      "WRITE before");
	CHECK(memcmp(one, src, 4096) == 0, "bytes before");
	uint32_t old_rkey = mr->rkey, old_lkey = mr->lkey, handle = mr->handle;

	/* Other memory: the region is there, under new keys. */
	CHECK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, two, 6000, 0) == 0,
	      "rereg translation");
	CHECK(mr->addr == two && mr->length == 6000 && mr->pd == b->pd &&
	      mr->context == b->ctx && mr->handle == handle, "mr fields");
	CHECK(mr->rkey != old_rkey && mr->lkey != old_lkey, "new keys");
	CHECK(rdma(a, IBV_WR_RDMA_WRITE, a_mr, src + 100, two, mr->rkey, 6000) ==
	      IBV_WC_SUCCESS, "WRITE to the new memory");
	CHECK(memcmp(two, src + 100, 6000) == 0, "bytes in the new memory");
	CHECK(one[4095] == src[4095], "the old memory is left alone");

	/* Other access: READ instead of WRITE. */
	CHECK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0,
			   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ) == 0, "rereg access");
	CHECK(mr->addr == two && mr->length == 6000, "translation kept");
	memset(src + 7000, 0, 1000);
	CHECK(rdma(a, IBV_WR_RDMA_READ, a_mr, src + 7000, two + 10, mr->rkey, 1000) ==
	      IBV_WC_SUCCESS, "READ");
	CHECK(memcmp(src + 7000, two + 10, 1000) == 0, "bytes read");

	/* Another PD of its context: the old one is free once nothing holds it. */
	struct ibv_pd *pd2 = ibv_alloc_pd(b->ctx);
	CHECK(pd2, "alloc_pd");
	CHECK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_PD, pd2, NULL, 0, 0) == 0, "rereg PD");
	CHECK(mr->pd == pd2 && ibv_dealloc_pd(pd2) == EBUSY, "the new PD is in use");
	CHECK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_PD | IBV_REREG_MR_CHANGE_ACCESS, b->pd,
			   NULL, 0, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ) == 0,
	      "rereg back");
	CHECK(ibv_dealloc_pd(pd2) == 0, "the other PD is free again");
	errno = 0;
	CHECK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_PD, a->pd, NULL, 0, 0) ==
	      IBV_REREG_MR_ERR_CMD && errno == EINVAL, "a PD of another context");

	/* rdma-core's argument checks. */
	errno = 0;
	CHECK(ibv_rereg_mr(mr, 1 << 3, NULL, NULL, 0, 0) == IBV_REREG_MR_ERR_INPUT &&
	      errno == EINVAL, "unknown flags");
	errno = 0;
	CHECK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, NULL, 10, 0) ==
	      IBV_REREG_MR_ERR_INPUT && errno == EINVAL, "no address");
	errno = 0;
	CHECK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_PD, b->pd, NULL, 0,
			   IBV_ACCESS_LOCAL_WRITE) == IBV_REREG_MR_ERR_INPUT && errno == EINVAL,
	      "access without CHANGE_ACCESS");
	errno = 0;
	CHECK(ibv_rereg_mr((struct ibv_mr *)src, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0,
			   0) == IBV_REREG_MR_ERR_INPUT && errno == EINVAL, "not an MR");
	errno = 0;
	CHECK(ibv_rereg_mr(mr, 0, NULL, NULL, 0, 0) == IBV_REREG_MR_ERR_CMD && errno == EINVAL,
	      "no flags");

	/* A re-registration that fails leaves the region as it was. */
	uint32_t rkey = mr->rkey;
	errno = 0;
	CHECK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0,
			   IBV_ACCESS_ON_DEMAND) == IBV_REREG_MR_ERR_CMD && errno == EOPNOTSUPP,
	      "ODP");
	long page = sysconf(_SC_PAGESIZE);
	char *gone = mmap(NULL, page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	munmap(gone, page);
	errno = 0;
	CHECK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, gone, 100, 0) ==
	      IBV_REREG_MR_ERR_CMD && errno == EFAULT, "unmapped memory");
	CHECK(mr->rkey == rkey && mr->addr == two && mr->length == 6000, "unchanged");
	CHECK(rdma(a, IBV_WR_RDMA_READ, a_mr, src + 7000, two, rkey, 1000) == IBV_WC_SUCCESS,
	      "READ after the failures");
	printf("ok rereg\n");
	free(one);
	*b_mr_out = mr;
	*two_out = two;
	return old_rkey;
}

static void imports(struct end *a, struct ibv_mr *a_mr, char *src, struct end *b,
		    struct ibv_mr *b_mr, char *two)
{
	errno = 0;
	CHECK(!ibv_import_device(-1) && errno == EINVAL, "import_device(-1)");
	int fd = open("/dev/null", O_RDWR);
	errno = 0;
	CHECK(!ibv_import_device(fd) && errno == EOPNOTSUPP, "import_device");
	close(fd);
	errno = 0;
	CHECK(!ibv_import_pd(a->ctx, a->pd->handle) && errno == EOPNOTSUPP, "import_pd");
	errno = 0;
	CHECK(!ibv_import_mr(a->pd, a_mr->handle) && errno == EOPNOTSUPP, "import_mr");
	errno = 0;
	CHECK(!ibv_import_dm(a->ctx, 1) && errno == EOPNOTSUPP, "import_dm");
	errno = 0;
	CHECK(!ibv_import_pd(NULL, 1) && errno == EINVAL, "import_pd(NULL)");
	/* Nothing was imported: unimporting leaves the objects working. */
	ibv_unimport_mr(a_mr);
	ibv_unimport_pd(a->pd);
	CHECK(rdma(a, IBV_WR_RDMA_READ, a_mr, src, two, b_mr->rkey, 64) == IBV_WC_SUCCESS,
	      "READ after unimport");
	printf("ok imports\n");
}

int main(void)
{
	struct ibv_device **list = two_devices();
	struct end a, b;
	open_end(&a, list[0]);
	open_end(&b, list[1]);
	CONNECT_ENDS(a, b);
	char *src = malloc(LEN);
	CHECK(src, "malloc");
	fill(src, LEN, 3);
	struct ibv_mr *a_mr = ibv_reg_mr(a.pd, src, LEN, IBV_ACCESS_LOCAL_WRITE);
	CHECK(a_mr, "reg_mr");

	data_in_order(&a);
	struct ibv_mr *b_mr;
	char *two;
	uint32_t old_rkey = rereg(&a, &b, a_mr, src, &b_mr, &two);
	imports(&a, a_mr, src, &b, b_mr, two);
	/* The first registration's key died with it (the QPs fail with it: last). */
	CHECK(rdma(&a, IBV_WR_RDMA_READ, a_mr, src, two, old_rkey, 64) ==
	      IBV_WC_REM_ACCESS_ERR, "the old rkey");
	printf("ok old_keys\n");

	CHECK(ibv_destroy_qp(a.qp) == 0 && ibv_destroy_qp(b.qp) == 0, "destroy_qp");
	CHECK(ibv_dereg_mr(a_mr) == 0 && ibv_dereg_mr(b_mr) == 0, "dereg_mr");
	CHECK(ibv_destroy_cq(a.cq) == 0 && ibv_destroy_cq(b.cq) == 0, "destroy_cq");
	CHECK(ibv_dealloc_pd(a.pd) == 0 && ibv_dealloc_pd(b.pd) == 0, "dealloc_pd");
	CHECK(ibv_close_device(a.ctx) == 0 && ibv_close_device(b.ctx) == 0, "close");
	ibv_free_device_list(list);
	free(src);
	free(two);
	printf("ok done\n");
	return 0;
}
