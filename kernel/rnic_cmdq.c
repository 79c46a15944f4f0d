// SPDX-License-Identifier: GPL-2.0
/*
 * rnic command queue: a virtio split ring in one coherent page, one command
 * in flight at a time (commands are control-path work), completion signalled
 * on RNIC_VEC_CMDQ and checked against the used ring (datasheet 6).
 */
#include <linux/delay.h>
#include <linux/dma-mapping.h>
#include <linux/jiffies.h>

#include "rnic.h"

#define RNIC_CMDQ_SIZE		64
#define RNIC_CMDQ_AVAIL		0x400	/* after 64 descriptors */
#define RNIC_CMDQ_USED		0x488	/* after the available ring, aligned */
#define RNIC_CMD_BUF_HALF	(RNIC_PAGE_SIZE / 2)
#define RNIC_CMD_TIMEOUT_MS	10000

static_assert(RNIC_CMDQ_SIZE * sizeof(struct rnic_vring_desc) == RNIC_CMDQ_AVAIL);
static_assert(RNIC_CMDQ_AVAIL + 6 + 2 * RNIC_CMDQ_SIZE <= RNIC_CMDQ_USED);
static_assert(RNIC_CMDQ_USED + 6 + 8 * RNIC_CMDQ_SIZE <= RNIC_PAGE_SIZE);

static __le16 *rnic_avail(struct rnic_cmdq *q, unsigned int off)
{
	return q->ring + RNIC_CMDQ_AVAIL + off;
}

static void *rnic_used(struct rnic_cmdq *q, unsigned int off)
{
	return q->ring + RNIC_CMDQ_USED + off;
}

int rnic_cmdq_alloc(struct rnic_dev *rd)
{
	struct device *dev = &rd->pdev->dev;
	struct rnic_cmdq *q = &rd->cmdq;

	mutex_init(&q->lock);
	init_completion(&q->done);
	q->ring = dma_alloc_coherent(dev, RNIC_PAGE_SIZE, &q->ring_dma,
				     GFP_KERNEL);
	if (!q->ring)
		return -ENOMEM;
	q->buf = dma_alloc_coherent(dev, RNIC_PAGE_SIZE, &q->buf_dma,
				    GFP_KERNEL);
	if (!q->buf) {
		dma_free_coherent(dev, RNIC_PAGE_SIZE, q->ring, q->ring_dma);
		q->ring = NULL;
		return -ENOMEM;
	}
	return 0;
}

void rnic_cmdq_free(struct rnic_dev *rd)
{
	struct device *dev = &rd->pdev->dev;
	struct rnic_cmdq *q = &rd->cmdq;

	if (q->buf)
		dma_free_coherent(dev, RNIC_PAGE_SIZE, q->buf, q->buf_dma);
	if (q->ring)
		dma_free_coherent(dev, RNIC_PAGE_SIZE, q->ring, q->ring_dma);
	q->buf = NULL;
	q->ring = NULL;
}

static void rnic_wr64(struct rnic_dev *rd, u32 lo, u64 val)
{
	rnic_wr(rd, lo, lower_32_bits(val));
	rnic_wr(rd, lo + 4, upper_32_bits(val));
}

/* Programs and enables the queue; the function must be freshly reset. */
int rnic_cmdq_start(struct rnic_dev *rd)
{
	struct rnic_cmdq *q = &rd->cmdq;
	u32 status;

	mutex_lock(&q->lock);
	memset(q->ring, 0, RNIC_PAGE_SIZE);
	q->next_avail = 0;
	q->last_used = 0;
	q->token = 1;
	rnic_wr64(rd, RNIC_REG_CMDQ_DESC_LO, q->ring_dma);
	rnic_wr64(rd, RNIC_REG_CMDQ_AVAIL_LO, q->ring_dma + RNIC_CMDQ_AVAIL);
	rnic_wr64(rd, RNIC_REG_CMDQ_USED_LO, q->ring_dma + RNIC_CMDQ_USED);
	rnic_wr(rd, RNIC_REG_CMDQ_SIZE, RNIC_CMDQ_SIZE);
	rnic_wr(rd, RNIC_REG_CMDQ_MSIX_VECTOR, RNIC_VEC_CMDQ);
	rnic_wr(rd, RNIC_REG_CMDQ_CONTROL, RNIC_CMDQ_ENABLE);
	status = rnic_rd(rd, RNIC_REG_DEVICE_STATUS);
	if (!(status & RNIC_STATUS_CMDQ_RUNNING)) {
		dev_err(&rd->pdev->dev,
			"command queue did not start: status %#x, error code %u\n",
			status, rnic_rd(rd, RNIC_REG_ERROR_CODE));
		mutex_unlock(&q->lock);
		return -EIO;
	}
	q->running = true;
	mutex_unlock(&q->lock);
	return 0;
}

/* Stops the queue: every command it took has completed when this returns. */
void rnic_cmdq_stop(struct rnic_dev *rd)
{
	struct rnic_cmdq *q = &rd->cmdq;

	mutex_lock(&q->lock);
	if (q->running)
		rnic_wr(rd, RNIC_REG_CMDQ_CONTROL, 0);
	q->running = false;
	mutex_unlock(&q->lock);
}

irqreturn_t rnic_cmdq_irq(int irq, void *data)
{
	struct rnic_dev *rd = data;

	complete(&rd->cmdq.done);
	return IRQ_HANDLED;
}

static const char *rnic_status_name(u16 status)
{
	static const char * const names[] = {
		"OK", "BAD_OPCODE", "BAD_PARAM", "MALFORMED", "DMA_ERROR",
		"NO_RESOURCES", "NOT_PERMITTED", "INTERNAL", "BUSY",
		"NOT_FOUND", "BAD_STATE",
	};

	return status < ARRAY_SIZE(names) ? names[status] : "unknown";
}

static int rnic_status_errno(u16 status)
{
	switch (status) {
	case RNIC_ST_BAD_OPCODE:
		return -EOPNOTSUPP;
	case RNIC_ST_BAD_PARAM:
	case RNIC_ST_MALFORMED:
		return -EINVAL;
	case RNIC_ST_NO_RESOURCES:
		return -ENOSPC;
	case RNIC_ST_NOT_PERMITTED:
		return -EPERM;
	case RNIC_ST_BUSY:
		return -EBUSY;
	case RNIC_ST_NOT_FOUND:
		return -ENOENT;
	default:
		return -EIO;
	}
}

static bool rnic_was_reset(struct rnic_dev *rd)
{
	if (!rd->lost &&
	    ioread32(rd->db + RNIC_DB_RESET_COUNT) != rd->reset_count) {
		dev_warn(&rd->pdev->dev,
			 "the function was reset by someone else\n");
		rd->lost = true;
	}
	return rd->lost;
}

static void rnic_set_desc(struct rnic_vring_desc *d, dma_addr_t addr, u32 len,
			  u16 flags, u16 next)
{
	d->addr = cpu_to_le64(addr);
	d->len = cpu_to_le32(len);
	d->flags = cpu_to_le16(flags);
	d->next = cpu_to_le16(next);
}

/**
 * rnic_cmd_quiet - run one command and wait for its response
 * @rd: the function
 * @opcode: RNIC_CMD_*
 * @req: the request body (after the CmdHeader), @req_len bytes
 * @req_len: its length
 * @resp: where the response body (after the RespHeader) goes, or NULL
 * @resp_len: bytes of response body expected
 * @quiet: a device status the caller expects and handles: not logged
 *
 * Sleeps. Returns 0, a negative errno for a device status other than OK
 * (logged unless it is @quiet or BAD_OPCODE), -ETIMEDOUT, or -ENODEV when
 * the function was reset under us.
 */
int rnic_cmd_quiet(struct rnic_dev *rd, u16 opcode, const void *req,
		   u32 req_len, void *resp, u32 resp_len, u16 quiet)
{
	struct rnic_cmdq *q = &rd->cmdq;
	struct rnic_vring_desc *desc = q->ring;
	struct rnic_cmd_header *hdr = q->buf;
	struct rnic_resp_header *rh = q->buf + RNIC_CMD_BUF_HALF;
	u32 full_resp = sizeof(*rh) + resp_len;
	unsigned long deadline;
	u32 written, token;
	u16 used, status;
	void *elem;
	int ret = 0;

	if (sizeof(*hdr) + req_len > RNIC_CMD_BUF_HALF ||
	    full_resp > RNIC_CMD_BUF_HALF)
		return -EINVAL;

	mutex_lock(&q->lock);
	if (!q->running || rnic_was_reset(rd)) {
		ret = -ENODEV;
		goto out;
	}
	token = q->token++;
	hdr->opcode = cpu_to_le16(opcode);
	hdr->reserved = 0;
	hdr->token = cpu_to_le32(token);
	if (req_len)
		memcpy(hdr + 1, req, req_len);
	memset(rh, 0, full_resp);

	rnic_set_desc(&desc[0], q->buf_dma, sizeof(*hdr) + req_len,
		      RNIC_VRING_DESC_F_NEXT, 1);
	rnic_set_desc(&desc[1], q->buf_dma + RNIC_CMD_BUF_HALF, full_resp,
		      RNIC_VRING_DESC_F_WRITE, 0);
	*rnic_avail(q, 4 + 2 * (q->next_avail % RNIC_CMDQ_SIZE)) = 0;
	q->next_avail++;
	reinit_completion(&q->done);
	dma_wmb();	/* descriptors and ring entry before the index */
	WRITE_ONCE(*rnic_avail(q, 2), cpu_to_le16(q->next_avail));
	wmb();		/* the index before the doorbell */
	iowrite32(q->next_avail, rd->db + RNIC_DB_CMDQ_DOORBELL);
	rnic_notify(rd, 0);

	deadline = jiffies + msecs_to_jiffies(RNIC_CMD_TIMEOUT_MS);
	for (;;) {
		used = le16_to_cpu(READ_ONCE(*(__le16 *)rnic_used(q, 2)));
		if (used != q->last_used)
			break;
		if (rnic_was_reset(rd)) {
			ret = -ENODEV;
			goto out;
		}
		if (time_after(jiffies, deadline)) {
			dev_err(&rd->pdev->dev,
				"command %#06x timed out (device status %#x)\n",
				opcode, rnic_rd(rd, RNIC_REG_DEVICE_STATUS));
			/* Its used element may still come: trust the queue no more. */
			q->running = false;
			ret = -ETIMEDOUT;
			goto out;
		}
		wait_for_completion_timeout(&q->done, msecs_to_jiffies(10));
	}
	dma_rmb();	/* the used index before the element and response */
	elem = rnic_used(q, 4 + 8 * (q->last_used % RNIC_CMDQ_SIZE));
	written = le32_to_cpu(*(__le32 *)(elem + 4));
	q->last_used++;
	if (written < sizeof(*rh)) {
		dev_err(&rd->pdev->dev,
			"command %#06x: the device wrote %u bytes of response\n",
			opcode, written);
		ret = -EIO;
		goto out;
	}
	status = le16_to_cpu(rh->status);
	if (le32_to_cpu(rh->token) != token) {
		dev_err(&rd->pdev->dev, "command %#06x: token mismatch\n",
			opcode);
		ret = -EIO;
		goto out;
	}
	if (status != RNIC_ST_OK) {
		/* BAD_OPCODE is how an older device says it lacks a command. */
		if (status != RNIC_ST_BAD_OPCODE && status != quiet)
			dev_err(&rd->pdev->dev,
				"command %#06x failed: %s (syndrome %#x)\n",
				opcode, rnic_status_name(status),
				le32_to_cpu(rh->syndrome));
		ret = rnic_status_errno(status);
		goto out;
	}
	if (written < full_resp) {
		dev_err(&rd->pdev->dev,
			"command %#06x: short response (%u of %u bytes)\n",
			opcode, written, full_resp);
		ret = -EIO;
		goto out;
	}
	if (resp && resp_len)
		memcpy(resp, rh + 1, resp_len);
out:
	mutex_unlock(&q->lock);
	return ret;
}

/* rnic_cmd_quiet() that logs every failure but BAD_OPCODE. */
int rnic_cmd(struct rnic_dev *rd, u16 opcode, const void *req, u32 req_len,
	     void *resp, u32 resp_len)
{
	return rnic_cmd_quiet(rd, opcode, req, req_len, resp, resp_len,
			      RNIC_ST_OK);
}
