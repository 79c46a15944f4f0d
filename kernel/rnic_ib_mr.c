// SPDX-License-Identifier: GPL-2.0
/*
 * rnic: protection domains and memory keys. Kernel verbs (ABI 1.8,
 * datasheet 16): the DMA key of a PD (REG_DMA_MR), which the core takes as
 * the PD's local_dma_lkey through get_dma_mr, and fast-registration MRs
 * (ALLOC_FAST_REG_MR) whose pages map_mr_sg gathers into a coherent page
 * list that an IB_WR_REG_MR work request names. User verbs (datasheet 17):
 * REG_MR of a process's pinned memory, and with CAP_MW memory windows
 * (ALLOC_MW; the provider binds them with BIND_MW WQEs of its own). A
 * process never gets a DMA key.
 */
#include <linux/dma-mapping.h>

#include "rnic_ib.h"

int rnic_alloc_pd(struct ib_pd *ibpd, struct ib_udata *udata)
{
	struct rnic_ib *rib = to_rib(ibpd->device);
	struct rnic_uverbs_alloc_pd_resp uresp = {};
	struct rnic_object_resp resp;
	struct rnic_object_req req;
	int ret;

	ret = rnic_cmd(rib->rd, RNIC_CMD_ALLOC_PD, NULL, 0, &resp,
		       sizeof(resp));
	if (ret)
		return ret;
	to_rpd(ibpd)->pdn = le32_to_cpu(resp.handle);
	if (!udata)
		return 0;
	uresp.pdn = to_rpd(ibpd)->pdn;
	ret = rnic_udata_out(udata, &uresp, sizeof(uresp));
	if (ret) {
		req.handle = resp.handle;
		req.reserved = 0;
		rnic_cmd(rib->rd, RNIC_CMD_DEALLOC_PD, &req, sizeof(req), NULL,
			 0);
	}
	return ret;
}

int rnic_dealloc_pd(struct ib_pd *ibpd, struct ib_udata *udata)
{
	struct rnic_ib *rib = to_rib(ibpd->device);
	struct rnic_object_req req = {
		.handle = cpu_to_le32(to_rpd(ibpd)->pdn),
	};

	/* A function reset under us has freed it already. */
	rnic_cmd(rib->rd, RNIC_CMD_DEALLOC_PD, &req, sizeof(req), NULL, 0);
	return 0;
}

/* IB access flags to rnic's (the same bits as ibverbs). */
u32 rnic_ib_access(int ib_access)
{
	u32 access = 0;

	if (ib_access & IB_ACCESS_LOCAL_WRITE)
		access |= RNIC_ACCESS_LOCAL_WRITE;
	if (ib_access & IB_ACCESS_REMOTE_WRITE)
		access |= RNIC_ACCESS_REMOTE_WRITE;
	if (ib_access & IB_ACCESS_REMOTE_READ)
		access |= RNIC_ACCESS_REMOTE_READ;
	if (ib_access & IB_ACCESS_REMOTE_ATOMIC)
		access |= RNIC_ACCESS_REMOTE_ATOMIC;
	if (ib_access & IB_ACCESS_MW_BIND)
		access |= RNIC_ACCESS_MW_BIND;
	if (ib_access & IB_ACCESS_FLUSH_GLOBAL)
		access |= RNIC_ACCESS_FLUSH_GLOBAL;
	if (ib_access & IB_ACCESS_FLUSH_PERSISTENT)
		access |= RNIC_ACCESS_FLUSH_PERSISTENT;
	return access;
}

/*
 * The PD's DMA key: byte a of it is device address a. The core asks for it
 * in ib_alloc_pd and makes it the PD's local_dma_lkey (rnic's key belongs to
 * a PD, so the device has no IBK_LOCAL_DMA_LKEY).
 */
struct ib_mr *rnic_get_dma_mr(struct ib_pd *ibpd, int access)
{
	struct rnic_ib *rib = to_rib(ibpd->device);
	struct rnic_reg_dma_mr_req req = {};
	struct rnic_reg_mr_resp resp;
	struct rnic_mr *mr;
	int ret;

	if (!(rib->rd->caps & RNIC_CAP_FAST_REG))
		return ERR_PTR(-EOPNOTSUPP);
	mr = kzalloc(sizeof(*mr), GFP_KERNEL);
	if (!mr)
		return ERR_PTR(-ENOMEM);
	req.pdn = cpu_to_le32(to_rpd(ibpd)->pdn);
	req.access = cpu_to_le32(rnic_ib_access(access) |
				 RNIC_ACCESS_LOCAL_WRITE);
	ret = rnic_cmd(rib->rd, RNIC_CMD_REG_DMA_MR, &req, sizeof(req), &resp,
		       sizeof(resp));
	if (ret) {
		kfree(mr);
		return ERR_PTR(ret);
	}
	mr->key = le32_to_cpu(resp.lkey);
	mr->ibmr.lkey = mr->key;
	mr->ibmr.rkey = le32_to_cpu(resp.rkey);
	return &mr->ibmr;
}

struct ib_mr *rnic_alloc_mr(struct ib_pd *ibpd, enum ib_mr_type type,
			    u32 max_num_sg)
{
	struct rnic_ib *rib = to_rib(ibpd->device);
	struct device *dev = &rib->rd->pdev->dev;
	struct rnic_alloc_fast_reg_mr_req req = {};
	struct rnic_reg_mr_resp resp;
	struct rnic_mr *mr;
	int ret;

	if (!(rib->rd->caps & RNIC_CAP_FAST_REG) || type != IB_MR_TYPE_MEM_REG)
		return ERR_PTR(-EOPNOTSUPP);
	if (!max_num_sg || max_num_sg > RNIC_MAX_FAST_REG_PAGES)
		return ERR_PTR(-EINVAL);
	mr = kzalloc(sizeof(*mr), GFP_KERNEL);
	if (!mr)
		return ERR_PTR(-ENOMEM);
	mr->fast_reg = true;
	mr->max_pages = max_num_sg;
	mr->pages = dma_alloc_coherent(dev, max_num_sg * sizeof(__le64),
				       &mr->pages_dma, GFP_KERNEL);
	if (!mr->pages) {
		ret = -ENOMEM;
		goto err_free;
	}
	req.pdn = cpu_to_le32(to_rpd(ibpd)->pdn);
	req.max_pages = cpu_to_le32(max_num_sg);
	ret = rnic_cmd(rib->rd, RNIC_CMD_ALLOC_FAST_REG_MR, &req, sizeof(req),
		       &resp, sizeof(resp));
	if (ret)
		goto err_pages;
	mr->key = le32_to_cpu(resp.lkey);
	mr->ibmr.lkey = mr->key;
	mr->ibmr.rkey = mr->key;
	return &mr->ibmr;

err_pages:
	dma_free_coherent(dev, max_num_sg * sizeof(__le64), mr->pages,
			  mr->pages_dma);
err_free:
	kfree(mr);
	return ERR_PTR(ret);
}

#define RNIC_USER_MR_ACCESS	(IB_ACCESS_LOCAL_WRITE | IB_ACCESS_REMOTE_WRITE | \
				 IB_ACCESS_REMOTE_READ |			\
				 IB_ACCESS_REMOTE_ATOMIC | IB_ACCESS_MW_BIND | \
				 IB_ACCESS_FLUSH_GLOBAL |			\
				 IB_ACCESS_FLUSH_PERSISTENT | IB_ACCESS_OPTIONAL)

/*
 * ibv_reg_mr: the process's memory from @start, pinned (ib_umem), named to
 * the device by the list of its 4 KiB pages (page tables for large ones),
 * known by @virt_addr in work requests. The first page holds virt_addr %
 * 4096, so start and virt_addr must agree in their page offsets. Memory the
 * process does not have fails in ib_umem_get (-EFAULT).
 */
struct ib_mr *rnic_reg_user_mr(struct ib_pd *ibpd, u64 start, u64 length,
			       u64 virt_addr, int access,
			       struct ib_udata *udata)
{
	struct rnic_ib *rib = to_rib(ibpd->device);
	const struct rnic_limits *l = &rib->rd->info.limits;
	struct rnic_reg_mr_req req = {};
	struct rnic_reg_mr_resp resp;
	struct rnic_mr *mr;
	int ret;

	if (!udata || access & ~RNIC_USER_MR_ACCESS)
		return ERR_PTR(-EOPNOTSUPP);
	/* Windows are bound to regions that allow it (CAP_MW). */
	if (access & IB_ACCESS_MW_BIND && !(rib->rd->caps & RNIC_CAP_MW))
		return ERR_PTR(-EOPNOTSUPP);
	/* FLUSH targets where the device does FLUSH (CAP_FLUSH, ABI 1.11). */
	if (access & (IB_ACCESS_FLUSH_GLOBAL | IB_ACCESS_FLUSH_PERSISTENT) &&
	    !(rib->rd->caps & RNIC_CAP_FLUSH))
		return ERR_PTR(-EOPNOTSUPP);
	if (!length || length > le64_to_cpu(l->max_mr_size))
		return ERR_PTR(-EINVAL);
	mr = kzalloc(sizeof(*mr), GFP_KERNEL);
	if (!mr)
		return ERR_PTR(-ENOMEM);
	mr->umem = ib_umem_get(ibpd->device, start, length, access);
	if (IS_ERR(mr->umem)) {
		ret = PTR_ERR(mr->umem);
		ibdev_dbg(&rib->ibdev, "cannot pin %llu bytes at %#llx: %d\n",
			  length, start, ret);
		goto err_free;
	}
	/* Sets the umem's iova: 0 when the page offsets differ. */
	if (!ib_umem_find_best_pgsz(mr->umem, RNIC_PAGE_SIZE, virt_addr) ||
	    ib_umem_num_dma_blocks(mr->umem, RNIC_PAGE_SIZE) >
	    le32_to_cpu(l->max_mr_pages)) {
		ret = -EINVAL;
		goto err_umem;
	}
	ret = rnic_ib_pbl_alloc(rib, &mr->pbl, mr->umem);
	if (ret)
		goto err_umem;
	req.pdn = cpu_to_le32(to_rpd(ibpd)->pdn);
	req.access = cpu_to_le32(rnic_ib_access(access));
	req.iova = cpu_to_le64(virt_addr);
	req.length = cpu_to_le64(length);
	rnic_ib_pbl_page_list(&mr->pbl, &req.pages);
	ret = rnic_cmd(rib->rd, RNIC_CMD_REG_MR, &req, sizeof(req), &resp,
		       sizeof(resp));
	if (ret)
		goto err_pbl;
	mr->key = le32_to_cpu(resp.lkey);
	mr->ibmr.lkey = mr->key;
	mr->ibmr.rkey = le32_to_cpu(resp.rkey);
	return &mr->ibmr;

err_pbl:
	rnic_ib_pbl_free(rib, &mr->pbl);
err_umem:
	ib_umem_release(mr->umem);
err_free:
	kfree(mr);
	return ERR_PTR(ret);
}

static int rnic_set_page(struct ib_mr *ibmr, u64 addr)
{
	struct rnic_mr *mr = to_rmr(ibmr);

	if (mr->npages >= mr->max_pages)
		return -ENOMEM;
	mr->pages[mr->npages++] = cpu_to_le64(addr);
	return 0;
}

int rnic_map_mr_sg(struct ib_mr *ibmr, struct scatterlist *sg, int sg_nents,
		   unsigned int *sg_offset)
{
	struct rnic_mr *mr = to_rmr(ibmr);

	if (ibmr->page_size != RNIC_PAGE_SIZE)
		return -EINVAL;
	mr->npages = 0;
	return ib_sg_to_pages(ibmr, sg, sg_nents, sg_offset, rnic_set_page);
}

int rnic_dereg_mr(struct ib_mr *ibmr, struct ib_udata *udata)
{
	struct rnic_ib *rib = to_rib(ibmr->device);
	struct rnic_mr *mr = to_rmr(ibmr);
	/* A fast-registration MR goes by any key of its index (fast_reg.rs). */
	struct rnic_object_req req = { .handle = cpu_to_le32(mr->key) };
	int ret;

	/*
	 * BUSY: a memory window is bound to it, and the device still reaches
	 * its pages (as rxe, the region stays). Any other failure: a function
	 * reset under us has freed it already.
	 */
	ret = rnic_cmd_quiet(rib->rd, RNIC_CMD_DEREG_MR, &req, sizeof(req),
			     NULL, 0, RNIC_ST_BUSY);
	if (ret == -EBUSY)
		return ret;
	if (mr->pages)
		dma_free_coherent(&rib->rd->pdev->dev,
				  mr->max_pages * sizeof(__le64), mr->pages,
				  mr->pages_dma);
	if (mr->umem) {
		/* The device has let go of the pages: unpin them. */
		rnic_ib_pbl_free(rib, &mr->pbl);
		ib_umem_release(mr->umem);
	}
	kfree(mr);
	return 0;
}

/*
 * ibv_alloc_mw: a window of the PD, of type 1 or 2 (another type is
 * -EINVAL), unbound. Its key has tag 0; binds set the tag.
 */
int rnic_alloc_mw(struct ib_mw *ibmw, struct ib_udata *udata)
{
	struct rnic_ib *rib = to_rib(ibmw->device);
	struct rnic_alloc_mw_req req = {};
	struct rnic_alloc_mw_resp resp;
	struct rnic_mw *mw = to_rmw(ibmw);
	int ret;

	switch (ibmw->type) {
	case IB_MW_TYPE_1:
		req.mw_type = RNIC_MW_TYPE_1;
		break;
	case IB_MW_TYPE_2:
		req.mw_type = RNIC_MW_TYPE_2;
		break;
	default:
		return -EINVAL;
	}
	req.pdn = cpu_to_le32(to_rpd(ibmw->pd)->pdn);
	ret = rnic_cmd(rib->rd, RNIC_CMD_ALLOC_MW, &req, sizeof(req), &resp,
		       sizeof(resp));
	if (ret)
		return ret;
	mw->key = le32_to_cpu(resp.rkey);
	ibmw->rkey = mw->key;
	return 0;
}

int rnic_dealloc_mw(struct ib_mw *ibmw)
{
	struct rnic_ib *rib = to_rib(ibmw->device);
	/* The device goes by the key's index, whatever its tag is now. */
	struct rnic_object_req req = {
		.handle = cpu_to_le32(to_rmw(ibmw)->key),
	};

	/* A function reset under us has freed it already. */
	rnic_cmd(rib->rd, RNIC_CMD_DEALLOC_MW, &req, sizeof(req), NULL, 0);
	return 0;
}
