/* SPDX-License-Identifier: ((GPL-2.0 WITH Linux-syscall-note) OR MIT) */
/*
 * rnic user verbs (ABI 1.9, datasheet 17): the driver data (udata) of the
 * ib_uverbs commands between rnic.ko and its rdma-core provider, as
 * abi/src/uverbs.rs defines it, in the spirit of the headers of
 * include/uapi/rdma/: only <linux/types.h>, so a provider can include it as
 * it is. Every field is little-endian (the byte order of every host rnic
 * runs on); reserved fields must be 0. A request shorter than its structure (an older provider)
 * is taken as zero-extended, and a response is written only as far as the
 * provider asked.
 */
#ifndef RNIC_ABI_USER_H
#define RNIC_ABI_USER_H

#include <linux/types.h>

/* ib_device_ops.uverbs_abi_ver: the provider accepts exactly this. */
#define RNIC_UVERBS_ABI_VERSION		1

/* Bytes the provider maps at doorbell_offset and at kick_offset. */
#define RNIC_UVERBS_MMAP_LEN		4096

/* ALLOC_UCONTEXT (ibv_get_context) response. */
struct rnic_uverbs_alloc_ucontext_resp {
	__u32 abi_version;	/* ABI_VERSION: major << 16 | minor */
	__u32 doorbell_page;	/* the context's page; USER_KICK takes it */
	__aligned_u64 doorbell_offset;	/* mmap offset of that page */
	__aligned_u64 kick_offset;	/* mmap offset of the user kick page */
	__aligned_u64 caps;	/* CAPS_HI << 32 | CAPS_LO */
};

/* ALLOC_PD response. */
struct rnic_uverbs_alloc_pd_resp {
	__u32 pdn;
	__u32 reserved;
};

/* CREATE_CQ request: the ring in the process's memory. */
struct rnic_uverbs_create_cq_req {
	__aligned_u64 ring_va;	/* 4 KiB aligned, entries * 32 bytes */
	__u32 entries;		/* power of two, >= 2, >= cqe, <= max_cqe */
	__u32 reserved;
};

/* RESIZE_CQ request: the new ring (ABI 1.10, RNIC_CAP_RESIZE_CQ). */
struct rnic_uverbs_resize_cq_req {
	__aligned_u64 ring_va;	/* 4 KiB aligned, entries * 32 bytes */
	__u32 entries;		/* power of two, >= 2, >= cqe and pending, <= max_cqe */
	__u32 reserved;
};

/* CREATE_CQ response. */
struct rnic_uverbs_create_cq_resp {
	__u32 cqn;
	__u32 entries;
	__u32 doorbell_slot;	/* in the context's doorbell page */
	__u32 reserved;
};

/*
 * CREATE_QP request: the rings in the process's memory, their strides the
 * device's for the capabilities of the command (rnic_sq_stride(max_send_sge,
 * max_inline_data), rnic_rq_stride(max_recv_sge)).
 */
struct rnic_uverbs_create_qp_req {
	__aligned_u64 sq_va;	/* 4 KiB aligned, sq_entries * sq_stride */
	__aligned_u64 rq_va;	/* 4 KiB aligned; 0 when rq_entries is 0 */
	__u32 sq_entries;	/* power of two, >= max_send_wr */
	__u32 rq_entries;	/* power of two, >= max_recv_wr; 0 with an SRQ */
};

/* CREATE_QP response. */
struct rnic_uverbs_create_qp_resp {
	__u32 qpn;
	__u32 sq_slot;		/* in the context's doorbell page */
	__u32 rq_slot;
	__u32 sq_stride;	/* bytes between send WQEs */
	__u32 rq_stride;	/* bytes between receive WQEs */
	__u32 max_inline_data;
};

/*
 * CREATE_SRQ request: the ring in the process's memory, its stride
 * rnic_rq_stride(max_sge) of the command's max_sge.
 */
struct rnic_uverbs_create_srq_req {
	__aligned_u64 ring_va;	/* 4 KiB aligned, entries * stride */
	__u32 entries;		/* power of two, >= 2, >= max_wr, <= max_qp_wr */
	__u32 reserved;
};

/*
 * MODIFY_SRQ request with IB_SRQ_MAX_WR: the new ring (ABI 1.11,
 * RNIC_CAP_RESIZE_SRQ), of the SRQ's stride. Without IB_SRQ_MAX_WR there is
 * no request data.
 */
struct rnic_uverbs_resize_srq_req {
	__aligned_u64 ring_va;	/* 4 KiB aligned, entries * stride */
	__u32 entries;		/* power of two, >= 2, >= max_wr, <= max_qp_wr */
	__u32 reserved;
};

/* CREATE_SRQ response. */
struct rnic_uverbs_create_srq_resp {
	__u32 srqn;
	__u32 doorbell_slot;	/* in the context's doorbell page */
	__u32 stride;		/* bytes between receive WQEs */
	__u32 reserved;
};

#endif /* RNIC_ABI_USER_H */
