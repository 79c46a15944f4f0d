/* SPDX-License-Identifier: GPL-2.0 */
/*
 * rnic: the contract between the RDMA device's files. rnic_ib.c registers
 * the ib_device and owns its port, rnic_ib_cq.c the event queue and the CQs,
 * rnic_ib_mr.c PDs and memory keys, rnic_ib_qp.c QPs and the datapath,
 * rnic_ib_ah.c address handles, rnic_ib_srq.c shared receive queues.
 */
#ifndef RNIC_IB_H
#define RNIC_IB_H

#include <linux/mutex.h>
#include <linux/spinlock.h>
#include <linux/xarray.h>
#include <rdma/ib_umem.h>
#include <rdma/ib_verbs.h>

#include "rnic.h"

#define RNIC_IB_EQ_ENTRIES	1024
#define RNIC_IB_MAX_AH		4096

/* A ring or page list in coherent DMA memory, named by a flat page list. */
struct rnic_ib_buf {
	void *va;
	dma_addr_t dma;
	size_t size;
	__le64 *pages;
	dma_addr_t pages_dma;
	u32 npages;
};

/* One coherent allocation of a page list: a flat array or a table page. */
struct rnic_ib_pbl_chunk {
	__le64 *va;
	dma_addr_t dma;
	size_t size;
};

/*
 * The page list of pinned user memory (ib_umem): a flat array in one
 * coherent allocation, or with CAP_PAGE_TABLES and more than one page of
 * entries a page table of 4 KiB table pages (datasheet 7.2), level-1 tables
 * first, the top table last.
 */
struct rnic_ib_pbl {
	struct rnic_ib_pbl_chunk *chunks;
	u32 nchunks;
	u32 count;		/* 4 KiB pages named */
	u8 levels;		/* 0: flat */
};

struct rnic_ib_eq {
	struct rnic_ib_buf buf;
	u32 entries;
	u32 consumed;
	u32 eqn;
	void __iomem *db;	/* consumer-index slot */
	bool created;
};

/* The driver's counters, `rdma statistic` (port 1). */
enum rnic_ib_stat {
	RNIC_STAT_SEND_WRS,		/* send work requests posted */
	RNIC_STAT_RECV_WRS,		/* receive work requests posted */
	RNIC_STAT_COMPLETIONS,		/* CQEs polled */
	RNIC_STAT_COMPLETION_ERRORS,	/* of them, not successful */
	RNIC_STAT_COMPLETION_EVENTS,	/* EQEs of armed CQs */
	RNIC_STAT_ASYNC_EVENTS,		/* EQEs of QP and CQ errors and states */
	RNIC_STAT_EQ_INTERRUPTS,	/* the EQ's vector */
	RNIC_STAT_POSTS_REFUSED,	/* work requests refused (full queue...) */
	RNIC_NUM_STATS,
};

struct rnic_ib {
	struct ib_device ibdev;
	struct rnic_dev *rd;
	struct net_device *netdev;
	struct notifier_block nb;
	struct rnic_ib_eq eq;
	struct xarray cqs;	/* CQN -> struct rnic_cq */
	struct xarray qps;	/* QPN -> struct rnic_qp */
	struct xarray srqs;	/* SRQN -> struct rnic_srq */
	spinlock_t db_lock;	/* RUNG_BITMAP read-modify-writes */
	atomic_t ahs;
	atomic64_t stats[RNIC_NUM_STATS];
	u32 db_pages;		/* doorbell pages of the function */
	spinlock_t upages_lock;	/* upages */
	DECLARE_BITMAP(upages, RNIC_DB_PAGES);	/* user contexts' pages */
};

/*
 * A user context (one ibv_context of a process): its doorbell page, which
 * holds its objects' slots and nobody else's, mapped into the process with
 * the user kick page.
 */
struct rnic_ucontext {
	struct ib_ucontext ibuc;
	u32 db_page;
	atomic_t objects;	/* CQs, QPs and SRQs on db_page */
	struct rdma_user_mmap_entry *db_entry;
	struct rdma_user_mmap_entry *kick_entry;
};

/* What an mmap offset of a user context maps: one page of BAR0 or BAR2. */
struct rnic_user_mmap {
	struct rdma_user_mmap_entry rdma;
	phys_addr_t addr;
};

struct rnic_pd {
	struct ib_pd ibpd;
	u32 pdn;
};

struct rnic_mr {
	struct ib_mr ibmr;
	u32 key;
	bool fast_reg;
	struct ib_umem *umem;	/* reg_user_mr: the pinned memory */
	struct rnic_ib_pbl pbl;	/* and its pages */
	__le64 *pages;		/* fast registration: the page list */
	dma_addr_t pages_dma;
	u32 max_pages;
	u32 npages;
};

/*
 * A process's memory window (CAP_MW): its key from ALLOC_MW, index fixed,
 * tag set by each bind (the provider's BIND_MW WQEs); the device goes by its
 * index, so DEALLOC_MW takes the key it was allocated with.
 */
struct rnic_mw {
	struct ib_mw ibmw;
	u32 key;
};

struct rnic_cq {
	struct ib_cq ibcq;
	spinlock_t lock;	/* polling and arming */
	struct rnic_ib_buf buf;
	u32 entries;
	u32 consumed;
	u32 arm_seq;
	u32 cqn;
	void __iomem *db;	/* consumer index at +0, arm word at +4 */
	struct rnic_ucontext *uctx;	/* a user CQ's context, else NULL */
	struct mutex resize_lock;	/* a user CQ's: one resize at a time */
	struct ib_umem *umem;	/* a user CQ's ring */
	struct rnic_ib_pbl pbl;
};

struct rnic_wq {
	spinlock_t lock;	/* posting */
	struct rnic_ib_buf buf;
	u64 *wr_ids;		/* the consumer's wr_id of each entry */
	u32 entries;
	u32 stride;
	u32 max_sge;
	u32 posted;		/* free-running */
	u32 done;		/* completed, free-running (set by polling) */
	u32 db_page;
	u32 db_slot;
	void __iomem *db;
	struct ib_umem *umem;	/* a user QP's ring */
	struct rnic_ib_pbl pbl;
};

struct rnic_qp {
	struct ib_qp ibqp;
	struct rnic_wq sq;
	struct rnic_wq rq;
	struct mutex state_lock;	/* modify_qp */
	u32 qpn;
	u8 qp_type;		/* RNIC_QPT_* */
	u8 state;		/* RNIC_QPS_* as last set */
	u32 max_inline;
	u32 qkey;		/* as last set (QUERY_QP does not return it) */
	bool sig_all;
	struct rnic_srq *srq;	/* the SRQ a kernel QP receives from */
	struct rnic_ucontext *uctx;	/* a user QP's context, else NULL */
};

/*
 * A shared receive queue: a process's (its ring pinned, its slot on its
 * page) or the kernel's (a coherent ring posted by post_srq_recv, whose WQEs
 * carry the consumer's wr_id: completions on any QP's CQ, in any order,
 * return it as it is and count one entry free).
 */
struct rnic_srq {
	struct ib_srq ibsrq;
	u32 srqn;
	u32 entries;
	u32 max_sge;
	struct rnic_ucontext *uctx;	/* a process's SRQ, else NULL */
	struct mutex resize_lock;	/* a process's: one resize at a time */
	struct ib_umem *umem;
	struct rnic_ib_pbl pbl;
	struct rnic_wq wq;	/* the kernel's: ring, lock, posted, slot */
	atomic_t completed;	/* the kernel's: receives completed */
};

/* An address vector as the device takes it: RoCEv2 over IPv4. */
struct rnic_ib_av {
	u8 dgid[16];
	u8 sgid_index;		/* the entry of the device's GID table */
	u8 hop_limit;
	u8 traffic_class;
	u32 flow_label;
};

struct rnic_ah {
	struct ib_ah ibah;
	struct rnic_ib_av av;
};

static inline struct rnic_ib *to_rib(struct ib_device *ibdev)
{
	return container_of(ibdev, struct rnic_ib, ibdev);
}

static inline struct rnic_pd *to_rpd(struct ib_pd *pd)
{
	return container_of(pd, struct rnic_pd, ibpd);
}

static inline struct rnic_mr *to_rmr(struct ib_mr *mr)
{
	return container_of(mr, struct rnic_mr, ibmr);
}

static inline struct rnic_mw *to_rmw(struct ib_mw *mw)
{
	return container_of(mw, struct rnic_mw, ibmw);
}

static inline struct rnic_cq *to_rcq(struct ib_cq *cq)
{
	return container_of(cq, struct rnic_cq, ibcq);
}

static inline struct rnic_qp *to_rqp(struct ib_qp *qp)
{
	return container_of(qp, struct rnic_qp, ibqp);
}

static inline struct rnic_srq *to_rsrq(struct ib_srq *srq)
{
	return container_of(srq, struct rnic_srq, ibsrq);
}

static inline struct rnic_ucontext *to_ructx(struct ib_ucontext *uc)
{
	return container_of(uc, struct rnic_ucontext, ibuc);
}

static inline struct rnic_user_mmap *
to_rumap(struct rdma_user_mmap_entry *entry)
{
	return container_of(entry, struct rnic_user_mmap, rdma);
}

static inline struct rnic_ah *to_rah(struct ib_ah *ah)
{
	return container_of(ah, struct rnic_ah, ibah);
}

static inline void rnic_ib_count(struct rnic_ib *rib, enum rnic_ib_stat stat,
				 u32 n)
{
	atomic64_add(n, &rib->stats[stat]);
}

/* rnic_ib.c */
int rnic_ib_buf_alloc(struct rnic_ib *rib, struct rnic_ib_buf *buf,
		      size_t size);
void rnic_ib_buf_free(struct rnic_ib *rib, struct rnic_ib_buf *buf);
void rnic_ib_page_list(const struct rnic_ib_buf *buf,
		       struct rnic_page_list *pl);
void rnic_ib_ring(struct rnic_ib *rib, u32 page, u32 slot);
int rnic_ib_sgid_index(struct rnic_ib *rib, const struct ib_gid_attr *attr);

/* rnic_ib_user.c */
int rnic_alloc_ucontext(struct ib_ucontext *ibuc, struct ib_udata *udata);
void rnic_dealloc_ucontext(struct ib_ucontext *ibuc);
void rnic_disassociate_ucontext(struct ib_ucontext *ibuc);
int rnic_mmap(struct ib_ucontext *ibuc, struct vm_area_struct *vma);
void rnic_mmap_free(struct rdma_user_mmap_entry *entry);
int rnic_udata_in(struct ib_udata *udata, void *req, size_t len);
int rnic_udata_out(struct ib_udata *udata, void *resp, size_t len);
struct ib_umem *rnic_umem_ring(struct rnic_ib *rib, u64 va, size_t size);
int rnic_ib_pbl_alloc(struct rnic_ib *rib, struct rnic_ib_pbl *pbl,
		      struct ib_umem *umem);
void rnic_ib_pbl_free(struct rnic_ib *rib, struct rnic_ib_pbl *pbl);
void rnic_ib_pbl_page_list(const struct rnic_ib_pbl *pbl,
			   struct rnic_page_list *pl);
int rnic_ib_ring_pin(struct rnic_ib *rib, u64 va, size_t size,
		     struct ib_umem **umem, struct rnic_ib_pbl *pbl,
		     struct rnic_page_list *pl);
void rnic_ib_ring_unpin(struct rnic_ib *rib, struct ib_umem *umem,
			struct rnic_ib_pbl *pbl);

/* rnic_ib_cq.c */
int rnic_ib_create_on_page(struct rnic_ib *rib, u32 page, u16 opcode,
			   void *req, u32 req_len, __le32 *page_field,
			   void *resp, u32 resp_len);
int rnic_ib_eq_create(struct rnic_ib *rib);
void rnic_ib_eq_destroy(struct rnic_ib *rib);
irqreturn_t rnic_ib_eq_irq(int irq, void *data);
int rnic_create_cq(struct ib_cq *ibcq, const struct ib_cq_init_attr *attr,
		   struct uverbs_attr_bundle *attrs);
int rnic_destroy_cq(struct ib_cq *ibcq, struct ib_udata *udata);
int rnic_resize_cq(struct ib_cq *ibcq, int cqe, struct ib_udata *udata);
int rnic_poll_cq(struct ib_cq *ibcq, int num_entries, struct ib_wc *wc);
int rnic_req_notify_cq(struct ib_cq *ibcq, enum ib_cq_notify_flags flags);

/* rnic_ib_mr.c */
int rnic_alloc_pd(struct ib_pd *ibpd, struct ib_udata *udata);
int rnic_dealloc_pd(struct ib_pd *ibpd, struct ib_udata *udata);
struct ib_mr *rnic_get_dma_mr(struct ib_pd *ibpd, int access);
struct ib_mr *rnic_alloc_mr(struct ib_pd *ibpd, enum ib_mr_type type,
			    u32 max_num_sg);
struct ib_mr *rnic_reg_user_mr(struct ib_pd *ibpd, u64 start, u64 length,
			       u64 virt_addr, int access,
			       struct ib_udata *udata);
int rnic_map_mr_sg(struct ib_mr *ibmr, struct scatterlist *sg, int sg_nents,
		   unsigned int *sg_offset);
int rnic_dereg_mr(struct ib_mr *ibmr, struct ib_udata *udata);
int rnic_alloc_mw(struct ib_mw *ibmw, struct ib_udata *udata);
int rnic_dealloc_mw(struct ib_mw *ibmw);
u32 rnic_ib_access(int ib_access);

/* rnic_ib_qp.c */
int rnic_create_qp(struct ib_qp *ibqp, struct ib_qp_init_attr *init,
		   struct ib_udata *udata);
int rnic_modify_qp(struct ib_qp *ibqp, struct ib_qp_attr *attr, int mask,
		   struct ib_udata *udata);
int rnic_query_qp(struct ib_qp *ibqp, struct ib_qp_attr *attr, int mask,
		  struct ib_qp_init_attr *init);
int rnic_destroy_qp(struct ib_qp *ibqp, struct ib_udata *udata);
int rnic_attach_mcast(struct ib_qp *ibqp, union ib_gid *gid, u16 lid);
int rnic_detach_mcast(struct ib_qp *ibqp, union ib_gid *gid, u16 lid);
int rnic_post_send(struct ib_qp *ibqp, const struct ib_send_wr *wr,
		   const struct ib_send_wr **bad_wr);
int rnic_post_recv(struct ib_qp *ibqp, const struct ib_recv_wr *wr,
		   const struct ib_recv_wr **bad_wr);

/* rnic_ib_srq.c */
int rnic_create_srq(struct ib_srq *ibsrq, struct ib_srq_init_attr *init,
		    struct ib_udata *udata);
int rnic_modify_srq(struct ib_srq *ibsrq, struct ib_srq_attr *attr,
		    enum ib_srq_attr_mask mask, struct ib_udata *udata);
int rnic_query_srq(struct ib_srq *ibsrq, struct ib_srq_attr *attr);
int rnic_destroy_srq(struct ib_srq *ibsrq, struct ib_udata *udata);
int rnic_post_srq_recv(struct ib_srq *ibsrq, const struct ib_recv_wr *wr,
		       const struct ib_recv_wr **bad_wr);

/* rnic_ib_ah.c */
int rnic_create_ah(struct ib_ah *ibah, struct rdma_ah_init_attr *init,
		   struct ib_udata *udata);
int rnic_destroy_ah(struct ib_ah *ibah, u32 flags);
int rnic_ib_av_from_ah_attr(struct rnic_ib *rib,
			    const struct rdma_ah_attr *ah_attr,
			    struct rnic_ib_av *av);

#endif /* RNIC_IB_H */
