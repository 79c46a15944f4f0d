/* Calls libibverbs the way a C program does, through Debian's <infiniband/verbs.h> and
 * its inline functions (ibv_query_device_ex, ibv_query_port, ibv_query_gid_ex,
 * ibv_query_gid_table, ibv_create_cq_ex reach the library through the verbs_context),
 * and prints one `key value...` line per answer for ibverbs/tests/c_api.rs to check.
 * Device 0 must exist. */
#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <infiniband/verbs.h>

static const char *gid_str(const union ibv_gid *gid, char *buf)
{
	return inet_ntop(AF_INET6, gid->raw, buf, INET6_ADDRSTRLEN);
}

int main(void)
{
	char s[INET6_ADDRSTRLEN];
	int n = -1;
	struct ibv_device **list = ibv_get_device_list(&n);

	printf("devices %d %s\n", n, list && n > 0 ? ibv_get_device_name(list[0]) : "-");
	if (!list || n < 1)
		return 1;

	struct ibv_context *ctx = ibv_open_device(list[0]);
	if (!ctx) {
		printf("open_errno %d\n", errno);
		return 1;
	}
	/* Each call before the printf that shows its errno: C leaves the order in which
	 * arguments are evaluated open. */
	errno = 0;
	struct ibv_context *second = ibv_open_device(list[0]);
	int opened = second != NULL;
	printf("reopen %d %d\n", opened, errno);
	if (second)
		ibv_close_device(second);

	struct ibv_device_attr_ex ex;
	memset(&ex, 0xa5, sizeof(ex));
	int rc = ibv_query_device_ex(ctx, NULL, &ex);
	printf("device_ex %d %d %d %d %u %016llx %u %llu\n", rc, ex.orig_attr.max_qp,
	       ex.orig_attr.max_cqe, ex.orig_attr.max_mr, ex.orig_attr.phys_port_cnt,
	       (unsigned long long)be64toh(ex.orig_attr.node_guid), ex.comp_mask,
	       (unsigned long long)ex.max_dm_size);
	struct ibv_query_device_ex_input input = { .comp_mask = 1 };
	printf("device_ex_input %d\n", ibv_query_device_ex(ctx, &input, &ex));
	struct ibv_device_attr attr;
	rc = ibv_query_device(ctx, &attr);
	printf("device %d %d\n", rc, attr.max_pd);

	struct ibv_port_attr port;
	memset(&port, 0xa5, sizeof(port));
	rc = ibv_query_port(ctx, 1, &port);
	printf("port %d %d %d %d %u %d %u %u %u\n", rc, port.state, port.active_mtu,
	       port.gid_tbl_len, port.link_layer, port.pkey_tbl_len, port.flags,
	       port.port_cap_flags2, port.active_speed_ex);
	printf("port2 %d\n", ibv_query_port(ctx, 2, &port));

	union ibv_gid gid;
	for (int i = 0; i < 2; i++) {
		rc = ibv_query_gid(ctx, 1, i, &gid);
		printf("gid%d %d %s\n", i, rc, gid_str(&gid, s));
	}
	errno = 0;
	rc = ibv_query_gid(ctx, 1, 2, &gid);
	printf("gid2 %d %d\n", rc, errno);

	struct ibv_gid_entry entry;
	memset(&entry, 0xa5, sizeof(entry));
	rc = ibv_query_gid_ex(ctx, 1, 1, &entry, 0);
	printf("gid_ex %d %s %u %u %u %u\n", rc, gid_str(&entry.gid, s), entry.gid_index,
	       entry.port_num, entry.gid_type, entry.ndev_ifindex);
	printf("gid_ex_bad %d %d\n", ibv_query_gid_ex(ctx, 1, 5, &entry, 0),
	       ibv_query_gid_ex(ctx, 1, 0, &entry, 1));

	struct ibv_gid_entry table[4];
	ssize_t k = ibv_query_gid_table(ctx, table, 4, 0);
	printf("gid_table %zd", k);
	for (ssize_t i = 0; i < k; i++)
		printf(" %u:%s", table[i].gid_index, gid_str(&table[i].gid, s));
	printf("\n");
	printf("gid_table_small %zd\n", ibv_query_gid_table(ctx, table, 1, 0));

	__be16 pkey = 0;
	rc = ibv_query_pkey(ctx, 1, 0, &pkey);
	printf("pkey %d %04x %d %d\n", rc, ntohs(pkey), ibv_query_pkey(ctx, 1, 1, &pkey),
	       ibv_get_pkey_index(ctx, 1, htons(0xffff)));

	/* A CQ with the fields of a plain ibv_wc, left for ibv_close_device to destroy;
	 * one with timestamps, which rnic lacks. */
	struct ibv_cq_init_attr_ex cq_attr = { .cqe = 16, .wc_flags = IBV_WC_STANDARD_FLAGS };
	errno = 0;
	struct ibv_cq_ex *cq = ibv_create_cq_ex(ctx, &cq_attr);
	printf("create_cq_ex %d %d %d\n", cq != NULL, errno, cq ? cq->cqe >= 16 : -1);
	cq_attr.wc_flags |= IBV_WC_EX_WITH_COMPLETION_TIMESTAMP;
	errno = 0;
	int created = ibv_create_cq_ex(ctx, &cq_attr) != NULL;
	printf("create_cq_ex_ts %d %d\n", created, errno);
	struct ibv_values_ex values = { .comp_mask = 0 };
	printf("rt_values %d\n", ibv_query_rt_values_ex(ctx, &values));

	/* Pointers that are not what they claim: errors, not crashes. */
	errno = 0;
	rc = ibv_close_device((struct ibv_context *)list);
	int close_errno = errno;
	int no_name = ibv_get_device_name((struct ibv_device *)ctx) == NULL;
	printf("garbage %d %d %d %d\n", rc, close_errno, no_name,
	       ibv_query_device((struct ibv_context *)&attr, &attr));

	printf("close %d\n", ibv_close_device(ctx));
	printf("close_again %d\n", ibv_close_device(ctx));
	ibv_free_device_list(list);
	printf("strings %s|%s|%s\n", ibv_port_state_str(IBV_PORT_ACTIVE),
	       ibv_wc_status_str(IBV_WC_RETRY_EXC_ERR), ibv_node_type_str(IBV_NODE_CA));
	return 0;
}
