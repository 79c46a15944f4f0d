// SPDX-License-Identifier: GPL-2.0
/*
 * rnic: PCI driver of the rnic software RDMA NIC's functions, the PF
 * (0xf1c0:0x0001) and its VFs (0xf1c0:0x0002). This file owns the PCI side:
 * BARs, identification, the function reset, MSI-X and FLR. The Ethernet
 * function lives in rnic_netdev.c, the RDMA device in rnic_ib*.c.
 */
#include <linux/delay.h>
#include <linux/dma-mapping.h>
#include <linux/jiffies.h>
#include <linux/module.h>

#include "rnic.h"

#define RNIC_RESET_TIMEOUT_MS	5000
#define RNIC_REQUIRED_CAPS	(RNIC_CAP_CMDQ | RNIC_CAP_DOORBELL_NOTIFY | \
				 RNIC_CAP_MSIX | RNIC_CAP_FUNCTION_RESET)

/* Resets the device state of the function and waits until it is ready. */
static int rnic_reset(struct rnic_dev *rd)
{
	unsigned long deadline;
	u32 status;

	rnic_wr(rd, RNIC_REG_DEVICE_CONTROL, RNIC_CONTROL_RESET);
	deadline = jiffies + msecs_to_jiffies(RNIC_RESET_TIMEOUT_MS);
	for (;;) {
		status = rnic_rd(rd, RNIC_REG_DEVICE_STATUS);
		if (status & RNIC_STATUS_DISABLED) {
			dev_err(&rd->pdev->dev,
				"the function is disabled by its PF\n");
			return -ENODEV;
		}
		if (status & RNIC_STATUS_READY)
			return 0;
		if (time_after(jiffies, deadline)) {
			dev_err(&rd->pdev->dev,
				"the function did not come out of reset\n");
			return -ETIMEDOUT;
		}
		usleep_range(1000, 2000);
	}
}

/* Brings the function from any state to a running command queue. */
static int rnic_hw_init(struct rnic_dev *rd)
{
	int ret;

	ret = rnic_reset(rd);
	if (ret)
		return ret;
	rd->reset_count = ioread32(rd->db + RNIC_DB_RESET_COUNT);
	rd->lost = false;
	return rnic_cmdq_start(rd);
}

/* Stops everything the device does for the driver; it forgets the queues. */
static void rnic_hw_stop(struct rnic_dev *rd)
{
	rnic_cmdq_stop(rd);
	rnic_wr(rd, RNIC_REG_DEVICE_CONTROL, RNIC_CONTROL_RESET);
}

static int rnic_query_device(struct rnic_dev *rd)
{
	struct rnic_query_device_resp *info = &rd->info;
	char kind[8];
	u32 fw;
	int ret;

	ret = rnic_cmd(rd, RNIC_CMD_QUERY_DEVICE, NULL, 0, info, sizeof(*info));
	if (ret)
		return ret;
	rd->caps = le64_to_cpu(info->caps);
	fw = le32_to_cpu(info->fw_version);
	if (info->function_kind == RNIC_FUNCTION_KIND_VF)
		snprintf(kind, sizeof(kind), "VF%u", info->vf_index);
	else
		strscpy(kind, "PF", sizeof(kind));
	dev_info(&rd->pdev->dev,
		 "rnic %s, ABI %u.%u, rnicd %u.%u.%u, caps %#llx, mac %pM, gid %pI6c\n",
		 kind, le16_to_cpu(info->abi_major), le16_to_cpu(info->abi_minor),
		 (fw >> 16) & 0xff, (fw >> 8) & 0xff, fw & 0xff, rd->caps,
		 info->mac, info->gid);
	return 0;
}

/*
 * The function's default GID as QUERY_DEVICE gave it, and its IPv4 address
 * when the GID is IPv4-mapped (what RoCEv2 uses, and so what the network
 * interface should carry).
 */
static ssize_t gid_show(struct device *dev, struct device_attribute *attr,
			char *buf)
{
	struct rnic_dev *rd = dev_get_drvdata(dev);

	return sysfs_emit(buf, "%pI6c\n", rd->info.gid);
}
static DEVICE_ATTR_RO(gid);

static ssize_t ipv4_show(struct device *dev, struct device_attribute *attr,
			 char *buf)
{
	static const u8 mapped[12] = { [10] = 0xff, [11] = 0xff };
	struct rnic_dev *rd = dev_get_drvdata(dev);

	if (memcmp(rd->info.gid, mapped, sizeof(mapped)))
		return sysfs_emit(buf, "\n");
	return sysfs_emit(buf, "%pI4\n", &rd->info.gid[12]);
}
static DEVICE_ATTR_RO(ipv4);

static struct attribute *rnic_attrs[] = {
	&dev_attr_gid.attr,
	&dev_attr_ipv4.attr,
	NULL,
};
ATTRIBUTE_GROUPS(rnic);

static int rnic_probe(struct pci_dev *pdev, const struct pci_device_id *id)
{
	struct device *dev = &pdev->dev;
	struct rnic_dev *rd;
	u32 magic, version;
	u64 caps;
	int ret;

	rd = devm_kzalloc(dev, sizeof(*rd), GFP_KERNEL);
	if (!rd)
		return -ENOMEM;
	rd->pdev = pdev;
	pci_set_drvdata(pdev, rd);

	ret = pcim_enable_device(pdev);
	if (ret)
		return ret;
	rd->regs = pcim_iomap_region(pdev, RNIC_REG_BAR, RNIC_DRV_NAME);
	if (IS_ERR(rd->regs))
		return PTR_ERR(rd->regs);
	rd->db = pcim_iomap_region(pdev, RNIC_DOORBELL_BAR, RNIC_DRV_NAME);
	if (IS_ERR(rd->db))
		return PTR_ERR(rd->db);
	ret = dma_set_mask_and_coherent(dev, DMA_BIT_MASK(64));
	if (ret)
		return ret;

	magic = rnic_rd(rd, RNIC_REG_MAGIC);
	version = rnic_rd(rd, RNIC_REG_ABI_VERSION);
	if (magic != RNIC_MAGIC || version >> 16 != RNIC_ABI_MAJOR) {
		dev_err(dev, "not an rnic of ABI %u: magic %#x, version %#x\n",
			RNIC_ABI_MAJOR, magic, version);
		return -ENODEV;
	}
	caps = rnic_rd(rd, RNIC_REG_CAPS_LO) |
	       (u64)rnic_rd(rd, RNIC_REG_CAPS_HI) << 32;
	if ((caps & RNIC_REQUIRED_CAPS) != RNIC_REQUIRED_CAPS) {
		dev_err(dev, "capabilities %#llx lack %#llx\n", caps,
			RNIC_REQUIRED_CAPS & ~caps);
		return -ENODEV;
	}
	pci_set_master(pdev);

	ret = pci_alloc_irq_vectors(pdev, RNIC_NUM_VECS, RNIC_NUM_VECS,
				    PCI_IRQ_MSIX);
	if (ret < 0) {
		dev_err(dev, "cannot get %d MSI-X vectors: %d\n", RNIC_NUM_VECS,
			ret);
		return ret;
	}
	ret = rnic_cmdq_alloc(rd);
	if (ret)
		goto err_vectors;
	ret = request_irq(pci_irq_vector(pdev, RNIC_VEC_CMDQ), rnic_cmdq_irq, 0,
			  "rnic-cmdq", rd);
	if (ret)
		goto err_cmdq;
	ret = rnic_hw_init(rd);
	if (ret)
		goto err_irq;
	ret = rnic_query_device(rd);
	if (ret)
		goto err_hw;

	if (rd->caps & RNIC_CAP_ETH) {
		ret = rnic_netdev_create(rd);
		if (ret)
			goto err_hw;
	} else {
		dev_info(dev, "the device has no Ethernet queues (CAP_ETH): no network interface\n");
	}
	/* The RDMA device is an extra: without it the interface still works. */
	ret = rnic_ib_add(rd);
	if (ret)
		dev_err(dev, "no RDMA device: %d\n", ret);
	return 0;

err_hw:
	rnic_hw_stop(rd);
err_irq:
	free_irq(pci_irq_vector(pdev, RNIC_VEC_CMDQ), rd);
err_cmdq:
	rnic_cmdq_free(rd);
err_vectors:
	pci_free_irq_vectors(pdev);
	pci_clear_master(pdev);
	return ret;
}

static void rnic_remove(struct pci_dev *pdev)
{
	struct rnic_dev *rd = pci_get_drvdata(pdev);

	rnic_ib_remove(rd);
	rnic_netdev_destroy(rd);
	rnic_hw_stop(rd);
	free_irq(pci_irq_vector(pdev, RNIC_VEC_CMDQ), rd);
	rnic_cmdq_free(rd);
	pci_free_irq_vectors(pdev);
	pci_clear_master(pdev);
}

/* Power-off or kexec: stop the device's DMA; nothing is freed. */
static void rnic_shutdown(struct pci_dev *pdev)
{
	struct rnic_dev *rd = pci_get_drvdata(pdev);

	rnic_netdev_reset_prepare(rd);
	rnic_hw_stop(rd);
	pci_clear_master(pdev);
}

/*
 * FLR (pci_reset_function): quiesce before, set everything up again after.
 * The RDMA device is unregistered (its users let go of it while the
 * function still runs) and registered anew afterwards.
 */
static void rnic_reset_prepare(struct pci_dev *pdev)
{
	struct rnic_dev *rd = pci_get_drvdata(pdev);

	rnic_ib_remove(rd);
	rnic_netdev_reset_prepare(rd);
	rnic_cmdq_stop(rd);
}

static void rnic_reset_done(struct pci_dev *pdev)
{
	struct rnic_dev *rd = pci_get_drvdata(pdev);
	int ret;

	pci_set_master(pdev);
	ret = rnic_hw_init(rd);
	if (ret)
		dev_err(&pdev->dev, "set-up after reset failed: %d\n", ret);
	rnic_netdev_reset_done(rd, !ret);
	if (!ret) {
		ret = rnic_ib_add(rd);
		if (ret)
			dev_err(&pdev->dev, "no RDMA device after reset: %d\n",
				ret);
	}
}

static const struct pci_error_handlers rnic_err_handlers = {
	.reset_prepare = rnic_reset_prepare,
	.reset_done = rnic_reset_done,
};

static const struct pci_device_id rnic_pci_ids[] = {
	{ PCI_DEVICE(RNIC_VENDOR_ID, RNIC_PF_DEVICE_ID) },
	{ PCI_DEVICE(RNIC_VENDOR_ID, RNIC_VF_DEVICE_ID) },
	{ }
};
MODULE_DEVICE_TABLE(pci, rnic_pci_ids);

static struct pci_driver rnic_driver = {
	.name = RNIC_DRV_NAME,
	.id_table = rnic_pci_ids,
	.probe = rnic_probe,
	.remove = rnic_remove,
	.shutdown = rnic_shutdown,
	.err_handler = &rnic_err_handlers,
	.dev_groups = rnic_groups,
};
module_pci_driver(rnic_driver);

MODULE_DESCRIPTION("rnic software RDMA NIC: PCI, Ethernet and RDMA driver");
MODULE_LICENSE("GPL");
