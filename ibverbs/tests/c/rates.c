/* Prints every answer of the rate conversions of the libibverbs.so.1 at argv[1]
 * (ibv_rate_to_mult, ibv_rate_to_mbps, mult_to_ibv_rate, mbps_to_ibv_rate), one line
 * each, for ibverbs/tests/more_verbs.rs to compare rnic's library with Debian's: every
 * rate from -1 to 31, every multiple from -1 to 1000, and every Mb/s value from -1 to
 * 1,300,000 that converts to a rate. */
#include <dlfcn.h>
#include <stdio.h>

int main(int argc, char **argv)
{
	if (argc != 2)
		return 2;
	void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
	if (!lib) {
		fprintf(stderr, "%s\n", dlerror());
		return 1;
	}
	int (*to_mult)(int) = (int (*)(int))dlsym(lib, "ibv_rate_to_mult");
	int (*to_mbps)(int) = (int (*)(int))dlsym(lib, "ibv_rate_to_mbps");
	int (*from_mult)(int) = (int (*)(int))dlsym(lib, "mult_to_ibv_rate");
	int (*from_mbps)(int) = (int (*)(int))dlsym(lib, "mbps_to_ibv_rate");
	if (!to_mult || !to_mbps || !from_mult || !from_mbps) {
		fprintf(stderr, "a conversion is missing\n");
		return 1;
	}
	for (int r = -1; r < 32; r++)
		printf("rate %d mult %d mbps %d\n", r, to_mult(r), to_mbps(r));
	for (int m = -1; m <= 1000; m++)
		printf("mult %d rate %d\n", m, from_mult(m));
	for (int m = -1; m <= 1300000; m++)
		if (from_mbps(m) != 0)
			printf("mbps %d rate %d\n", m, from_mbps(m));
	return 0;
}
