// SPDX-License-Identifier: GPL-2.0
/*
 * rnic: address handles, for kernel UD and GSI QPs. The device has no AH
 * object: a UD send work request carries the address vector, so an AH is
 * the driver's copy of it.
 */
#include <net/ipv6.h>

#include "rnic_ib.h"

/*
 * The rnic address vector of @ah_attr: a RoCEv2 destination at an IPv4
 * address, sent from an IPv4 address of the GID table.
 */
int rnic_ib_av_from_ah_attr(struct rnic_ib *rib,
			    const struct rdma_ah_attr *ah_attr,
			    struct rnic_ib_av *av)
{
	const struct ib_global_route *grh;
	int index;

	if (ah_attr->type != RDMA_AH_ATTR_TYPE_ROCE ||
	    !(rdma_ah_get_ah_flags(ah_attr) & IB_AH_GRH))
		return -EINVAL;
	grh = rdma_ah_read_grh(ah_attr);
	index = rnic_ib_sgid_index(rib, grh->sgid_attr);
	if (index < 0)
		return index;
	if (!ipv6_addr_v4mapped((const struct in6_addr *)grh->dgid.raw)) {
		ibdev_dbg(&rib->ibdev, "destination GID %pI6c is not IPv4\n",
			  grh->dgid.raw);
		return -EINVAL;
	}
	memcpy(av->dgid, grh->dgid.raw, sizeof(av->dgid));
	av->sgid_index = index;
	av->hop_limit = grh->hop_limit;
	av->traffic_class = grh->traffic_class;
	av->flow_label = grh->flow_label;
	return 0;
}

int rnic_create_ah(struct ib_ah *ibah, struct rdma_ah_init_attr *init,
		   struct ib_udata *udata)
{
	struct rnic_ib *rib = to_rib(ibah->device);
	struct rnic_ah *ah = to_rah(ibah);
	int ret;

	if (udata)
		return -EOPNOTSUPP;
	if (atomic_inc_return(&rib->ahs) > RNIC_IB_MAX_AH) {
		ret = -ENOMEM;
		goto err;
	}
	ret = rnic_ib_av_from_ah_attr(rib, init->ah_attr, &ah->av);
	if (ret)
		goto err;
	return 0;
err:
	atomic_dec(&rib->ahs);
	return ret;
}

int rnic_destroy_ah(struct ib_ah *ibah, u32 flags)
{
	atomic_dec(&to_rib(ibah->device)->ahs);
	return 0;
}
