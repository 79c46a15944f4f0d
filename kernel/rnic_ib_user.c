// SPDX-License-Identifier: GPL-2.0
/*
 * rnic: user contexts (ABI 1.9, datasheet 17). Each context takes one
 * doorbell page of its own (pages RNIC_DB_PAGE_USER and up; the kernel's
 * objects stay on RNIC_DB_PAGE_IB) and maps it with the user kick page.
 * Its CQ and QP rings and its memory regions are process memory pinned with
 * ib_umem and named to the device by page lists (flat, or page tables with
 * CAP_PAGE_TABLES).
 */
#include <linux/dma-mapping.h>
#include <linux/pci.h>
#include <rdma/iter.h>
#include <rdma/uverbs_ioctl.h>

#include "rnic_ib.h"

/*
 * Reads the request of a command: a shorter one (an older provider) is
 * zero-extended, a longer one must have zeros past what the driver knows.
 */
int rnic_udata_in(struct ib_udata *udata, void *req, size_t len)
{
	memset(req, 0, len);
	if (udata->inlen > len &&
	    !ib_is_udata_cleared(udata, len, udata->inlen - len))
		return -EOPNOTSUPP;
	return ib_copy_from_udata(req, udata, min(len, udata->inlen));
}

/* Writes a response, as far as the provider asked for. */
int rnic_udata_out(struct ib_udata *udata, void *resp, size_t len)
{
	return ib_copy_to_udata(udata, resp, min(len, udata->outlen));
}

/* Pins a ring of a process: 4 KiB aligned, writable (CQEs; no COW copy). */
struct ib_umem *rnic_umem_ring(struct rnic_ib *rib, u64 va, size_t size)
{
	if (!size || !va || va & (RNIC_PAGE_SIZE - 1)) {
		ibdev_dbg(&rib->ibdev, "ring at %#llx of %zu bytes refused\n",
			  va, size);
		return ERR_PTR(-EINVAL);
	}
	return ib_umem_get(&rib->ibdev, va, size, IB_ACCESS_LOCAL_WRITE);
}

/*
 * Pins a process's ring of @size bytes at @va (rnic_umem_ring) and names it
 * to the device: *@umem and @pbl hold it until rnic_ib_ring_unpin(), @pl is
 * its page list for the command. On an error nothing stays pinned and
 * *@umem is left as it was. CQs, SRQs and QPs, at creation and at a resize.
 */
int rnic_ib_ring_pin(struct rnic_ib *rib, u64 va, size_t size,
		     struct ib_umem **umem, struct rnic_ib_pbl *pbl,
		     struct rnic_page_list *pl)
{
	struct ib_umem *u = rnic_umem_ring(rib, va, size);
	int ret;

	if (IS_ERR(u))
		return PTR_ERR(u);
	ret = rnic_ib_pbl_alloc(rib, pbl, u);
	if (ret) {
		ib_umem_release(u);
		return ret;
	}
	rnic_ib_pbl_page_list(pbl, pl);
	*umem = u;
	return 0;
}

/* Unpins a ring of rnic_ib_ring_pin(), once the device has let go of it. */
void rnic_ib_ring_unpin(struct rnic_ib *rib, struct ib_umem *umem,
			struct rnic_ib_pbl *pbl)
{
	rnic_ib_pbl_free(rib, pbl);
	ib_umem_release(umem);
}

void rnic_ib_pbl_free(struct rnic_ib *rib, struct rnic_ib_pbl *pbl)
{
	struct device *dev = &rib->rd->pdev->dev;
	u32 i;

	for (i = 0; i < pbl->nchunks; i++)
		dma_free_coherent(dev, pbl->chunks[i].size, pbl->chunks[i].va,
				  pbl->chunks[i].dma);
	kfree(pbl->chunks);
	pbl->chunks = NULL;
	pbl->nchunks = 0;
}

/*
 * The page list of @umem's 4 KiB blocks (its iova set: the first block holds
 * iova % 4096). A flat array when it fits a page or the device has no page
 * tables; otherwise table pages, each level's in order, the top one last.
 */
int rnic_ib_pbl_alloc(struct rnic_ib *rib, struct rnic_ib_pbl *pbl,
		      struct ib_umem *umem)
{
	struct device *dev = &rib->rd->pdev->dev;
	size_t count = ib_umem_num_dma_blocks(umem, RNIC_PAGE_SIZE);
	struct ib_block_iter biter;
	u32 nchunks, n, first, i;
	size_t size;
	u8 levels = 0;

	memset(pbl, 0, sizeof(*pbl));
	if (!count || count > RNIC_MAX_PAGE_LIST)
		return -EINVAL;
	nchunks = 1;
	if (count > RNIC_PAGE_TABLE_ENTRIES &&
	    rib->rd->caps & RNIC_CAP_PAGE_TABLES) {
		nchunks = 0;
		n = count;
		do {
			n = DIV_ROUND_UP(n, RNIC_PAGE_TABLE_ENTRIES);
			nchunks += n;
			levels++;
		} while (n > 1);
	}
	size = levels ? RNIC_PAGE_SIZE : count * sizeof(__le64);
	pbl->chunks = kcalloc(nchunks, sizeof(*pbl->chunks), GFP_KERNEL);
	if (!pbl->chunks)
		return -ENOMEM;
	for (i = 0; i < nchunks; i++) {
		pbl->chunks[i].va = dma_alloc_coherent(dev, size,
						       &pbl->chunks[i].dma,
						       GFP_KERNEL);
		if (!pbl->chunks[i].va) {
			rnic_ib_pbl_free(rib, pbl);
			return -ENOMEM;
		}
		pbl->chunks[i].size = size;
		pbl->nchunks = i + 1;
	}
	pbl->count = count;
	pbl->levels = levels;

	/* The pages: the flat array, or the level-1 tables. */
	i = 0;
	rdma_umem_for_each_dma_block(umem, &biter, RNIC_PAGE_SIZE) {
		if (WARN_ON_ONCE(i >= count))
			break;
		if (levels)
			pbl->chunks[i / RNIC_PAGE_TABLE_ENTRIES]
				.va[i % RNIC_PAGE_TABLE_ENTRIES] =
				cpu_to_le64(rdma_block_iter_dma_address(&biter));
		else
			pbl->chunks[0].va[i] =
				cpu_to_le64(rdma_block_iter_dma_address(&biter));
		i++;
	}
	/* Each level's n tables in the entries of the level above. */
	first = 0;
	n = levels ? DIV_ROUND_UP(count, RNIC_PAGE_TABLE_ENTRIES) : 1;
	while (n > 1) {
		for (i = 0; i < n; i++)
			pbl->chunks[first + n + i / RNIC_PAGE_TABLE_ENTRIES]
				.va[i % RNIC_PAGE_TABLE_ENTRIES] =
				cpu_to_le64(pbl->chunks[first + i].dma);
		first += n;
		n = DIV_ROUND_UP(n, RNIC_PAGE_TABLE_ENTRIES);
	}
	return 0;
}

void rnic_ib_pbl_page_list(const struct rnic_ib_pbl *pbl,
			   struct rnic_page_list *pl)
{
	pl->addr = cpu_to_le64(pbl->chunks[pbl->nchunks - 1].dma);
	pl->count = cpu_to_le32(pbl->count);
	pl->page_shift = RNIC_PAGE_SHIFT;
	pl->levels = pbl->levels;
	pl->reserved = 0;
}

/* A free doorbell page for a user context, or -ENOSPC. */
static int rnic_upage_get(struct rnic_ib *rib)
{
	u32 page;

	spin_lock(&rib->upages_lock);
	page = find_next_zero_bit(rib->upages, rib->db_pages,
				  RNIC_DB_PAGE_USER);
	if (page < rib->db_pages)
		__set_bit(page, rib->upages);
	spin_unlock(&rib->upages_lock);
	return page < rib->db_pages ? page : -ENOSPC;
}

static void rnic_upage_put(struct rnic_ib *rib, u32 page)
{
	spin_lock(&rib->upages_lock);
	__clear_bit(page, rib->upages);
	spin_unlock(&rib->upages_lock);
}

static struct rdma_user_mmap_entry *
rnic_user_mmap_insert(struct rnic_ucontext *uc, phys_addr_t addr, u64 *offset)
{
	struct rnic_user_mmap *um;
	int ret;

	um = kzalloc(sizeof(*um), GFP_KERNEL);
	if (!um)
		return ERR_PTR(-ENOMEM);
	um->addr = addr;
	ret = rdma_user_mmap_entry_insert(&uc->ibuc, &um->rdma, PAGE_SIZE);
	if (ret) {
		kfree(um);
		return ERR_PTR(ret);
	}
	*offset = rdma_user_mmap_get_offset(&um->rdma);
	return &um->rdma;
}

/*
 * ibv_get_context: a doorbell page of the context's own, the mmap offsets of
 * it and of the user kick page. Only with CAP_USER_KICK: without it the
 * process would need DOORBELL_KICK, among the function's other registers.
 */
int rnic_alloc_ucontext(struct ib_ucontext *ibuc, struct ib_udata *udata)
{
	struct rnic_ib *rib = to_rib(ibuc->device);
	struct rnic_ucontext *uc = to_ructx(ibuc);
	struct rnic_dev *rd = rib->rd;
	struct rnic_uverbs_alloc_ucontext_resp resp = {};
	u64 db_offset, kick_offset;
	int page, ret;

	if (!(rd->caps & RNIC_CAP_USER_KICK) || PAGE_SIZE != RNIC_PAGE_SIZE)
		return -EOPNOTSUPP;
	if (udata->inlen && !ib_is_udata_cleared(udata, 0, udata->inlen))
		return -EOPNOTSUPP;
	page = rnic_upage_get(rib);
	if (page < 0) {
		ibdev_dbg_ratelimited(&rib->ibdev,
				      "no free doorbell page for a user context (pages %u to %u taken)\n",
				      RNIC_DB_PAGE_USER, rib->db_pages - 1);
		return page;
	}
	uc->db_page = page;
	atomic_set(&uc->objects, 0);
	uc->db_entry = rnic_user_mmap_insert(uc,
					     pci_resource_start(rd->pdev, RNIC_DOORBELL_BAR) +
					     (phys_addr_t)page * RNIC_PAGE_SIZE,
					     &db_offset);
	if (IS_ERR(uc->db_entry)) {
		ret = PTR_ERR(uc->db_entry);
		goto err_page;
	}
	uc->kick_entry = rnic_user_mmap_insert(uc,
					       pci_resource_start(rd->pdev, RNIC_REG_BAR) +
					       RNIC_REG_USER_KICK_PAGE,
					       &kick_offset);
	if (IS_ERR(uc->kick_entry)) {
		ret = PTR_ERR(uc->kick_entry);
		goto err_db;
	}
	resp.abi_version = ioread32(rd->regs + RNIC_REG_ABI_VERSION);
	resp.doorbell_page = page;
	resp.doorbell_offset = db_offset;
	resp.kick_offset = kick_offset;
	resp.caps = rd->caps;
	ret = rnic_udata_out(udata, &resp, sizeof(resp));
	if (ret)
		goto err_kick;
	ibdev_dbg(&rib->ibdev, "user context on doorbell page %d\n", page);
	return 0;

err_kick:
	rdma_user_mmap_entry_remove(uc->kick_entry);
err_db:
	rdma_user_mmap_entry_remove(uc->db_entry);
err_page:
	rnic_upage_put(rib, page);
	return ret;
}

/*
 * The core destroyed the context's objects before (and on a device removal
 * zapped its mappings), so nothing is on its page any more: the next context
 * may have it.
 */
void rnic_dealloc_ucontext(struct ib_ucontext *ibuc)
{
	struct rnic_ib *rib = to_rib(ibuc->device);
	struct rnic_ucontext *uc = to_ructx(ibuc);
	int left = atomic_read(&uc->objects);

	rdma_user_mmap_entry_remove(uc->kick_entry);
	rdma_user_mmap_entry_remove(uc->db_entry);
	if (WARN_ON(left)) {
		ibdev_err(&rib->ibdev, "doorbell page %u still holds %d objects: not reused\n",
			  uc->db_page, left);
		return;
	}
	rnic_upage_put(rib, uc->db_page);
}

/*
 * Device removal (rmmod, FLR, unbind) with live processes: the core zaps
 * their mappings, destroys their objects through the driver while the
 * device still runs, then deallocates the contexts. Nothing of the driver's
 * own outlives that, so there is nothing to do here; the op tells the core
 * it need not wait for the processes to close their files.
 */
void rnic_disassociate_ucontext(struct ib_ucontext *ibuc)
{
}

int rnic_mmap(struct ib_ucontext *ibuc, struct vm_area_struct *vma)
{
	struct rdma_user_mmap_entry *entry;
	int ret;

	if (vma->vm_flags & VM_EXEC)
		return -EPERM;
	/* Checks the length, one page, against the entry's. */
	entry = rdma_user_mmap_entry_get(ibuc, vma);
	if (!entry)
		return -EINVAL;
	ret = rdma_user_mmap_io(ibuc, vma, PHYS_PFN(to_rumap(entry)->addr),
				PAGE_SIZE, pgprot_noncached(vma->vm_page_prot),
				entry);
	rdma_user_mmap_entry_put(entry);
	return ret;
}

void rnic_mmap_free(struct rdma_user_mmap_entry *entry)
{
	kfree(to_rumap(entry));
}
