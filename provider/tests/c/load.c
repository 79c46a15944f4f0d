/* Loads Debian's libibverbs, then the plug-in given as argv[1], as libibverbs' own
 * dlopen of a provider does (RTLD_NOW: every symbol must resolve, with its version), and
 * lists the devices. The program defines verbs_register_driver_34 itself (linked with
 * -rdynamic, so the plug-in binds to it): it prints what the plug-in's constructor
 * registers, read through driver.h's v56.1 structures, and passes it on to libibverbs'.
 * Prints "ok STEP ..." for each step that worked. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

/* From rdma-core v56.1 libibverbs/driver.h. */
struct verbs_match_ent {
	void *driver_data;
	union {
		const char *modalias;
		uint64_t driver_id;
	} u;
	uint16_t vendor;
	uint16_t device;
	uint8_t kind;
};

struct verbs_device_ops {
	const char *name;
	uint32_t match_min_abi_version;
	uint32_t match_max_abi_version;
	const struct verbs_match_ent *match_table;
	const struct verbs_device_ops **static_providers;
	bool (*match_device)(void *sysfs_dev);
	void *(*alloc_context)(void *device, int cmd_fd, void *private_data);
	void *(*import_context)(void *device, int cmd_fd);
	void *(*alloc_device)(void *sysfs_dev);
	void (*uninit_device)(void *device);
};

static void *verbs;

void verbs_register_driver_34(const struct verbs_device_ops *ops)
{
	void (*real)(const struct verbs_device_ops *);
	const struct verbs_match_ent *m;

	printf("ok register %s abi %u-%u alloc_context %d import_context %d alloc_device %d uninit_device %d\n",
	       ops->name, ops->match_min_abi_version,
	       ops->match_max_abi_version, ops->alloc_context != NULL,
	       ops->import_context != NULL, ops->alloc_device != NULL,
	       ops->uninit_device != NULL);
	for (m = ops->match_table; m->kind; m++)
		printf("ok match kind %u %04x:%04x\n", m->kind, m->vendor,
		       m->device);
	real = dlvsym(verbs, "verbs_register_driver_34", "IBVERBS_PRIVATE_34");
	if (!real) {
		fprintf(stderr, "no verbs_register_driver_34 in libibverbs\n");
		return;
	}
	real(ops);
	printf("ok registered\n");
}

int main(int argc, char **argv)
{
	void *plugin;
	void **(*get_device_list)(int *);
	void (*free_device_list)(void **);
	int n = -1;

	if (argc != 2)
		return 2;
	verbs = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_GLOBAL);
	if (!verbs) {
		fprintf(stderr, "libibverbs: %s\n", dlerror());
		return 1;
	}
	printf("ok libibverbs\n");
	plugin = dlopen(argv[1], RTLD_NOW);
	if (!plugin) {
		fprintf(stderr, "plug-in: %s\n", dlerror());
		return 1;
	}
	printf("ok plugin\n");
	get_device_list = (void **(*)(int *))dlsym(verbs, "ibv_get_device_list");
	free_device_list = (void (*)(void **))dlsym(verbs, "ibv_free_device_list");
	if (get_device_list && free_device_list) {
		void **list = get_device_list(&n);
		if (list)
			free_device_list(list);
		printf("ok devices %d\n", n);
	}
	return 0;
}
