/* Loads Debian's libibverbs, then the plug-in given as argv[1], as libibverbs' own
 * dlopen of a provider does (RTLD_NOW: every symbol must resolve, with its version), so
 * the plug-in's constructor registers it with libibverbs; then lists the devices.
 * Prints "ok STEP" for each step that worked. */
#include <dlfcn.h>
#include <stdio.h>

int main(int argc, char **argv)
{
	void *verbs, *plugin;
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
