/*
 * cuda-probe: a small CUDA driver-API program. It loads libcuda.so.1 with
 * dlopen, as CUDA programs do, calls cuInit, cuDriverGetVersion,
 * cuDeviceGetCount, cuDeviceGet and cuDeviceGetName, and prints what it
 * sees, a line each, after the container's NVIDIA_* variables. It needs
 * no CUDA toolkit to build: the few declarations are here.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <limits.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern char **environ;

typedef int (*cu_init_t)(unsigned int);
typedef int (*cu_version_t)(int *);
typedef int (*cu_count_t)(int *);
typedef int (*cu_get_t)(int *, int);
typedef int (*cu_name_t)(char *, int, int);

static void *sym(void *h, const char *name) {
	void *f = dlsym(h, name);
	if (!f) {
		printf("cuda-probe: libcuda.so.1 has no %s\n", name);
		exit(3);
	}
	return f;
}

int main(void) {
	for (char **e = environ; *e; e++) {
		if (strncmp(*e, "NVIDIA_", 7) == 0) {
			printf("cuda-probe: env %s\n", *e);
		}
	}
	void *h = dlopen("libcuda.so.1", RTLD_NOW);
	if (!h) {
		printf("cuda-probe: dlopen libcuda.so.1: FAILED: %s\n", dlerror());
		return 2;
	}
	struct link_map *lm = NULL;
	if (dlinfo(h, RTLD_DI_LINKMAP, &lm) == 0 && lm) {
		char real[PATH_MAX];
		printf("cuda-probe: libcuda.so.1 loaded from %s (%s)\n", lm->l_name, realpath(lm->l_name, real) ? real : "unresolved");
	}
	cu_init_t cu_init = (cu_init_t)sym(h, "cuInit");
	cu_version_t cu_version = (cu_version_t)sym(h, "cuDriverGetVersion");
	cu_count_t cu_count = (cu_count_t)sym(h, "cuDeviceGetCount");
	cu_get_t cu_get = (cu_get_t)sym(h, "cuDeviceGet");
	cu_name_t cu_name = (cu_name_t)sym(h, "cuDeviceGetName");
	int r = cu_init(0);
	printf("cuda-probe: cuInit: %d\n", r);
	if (r != 0) {
		return 4;
	}
	int v = 0;
	r = cu_version(&v);
	printf("cuda-probe: cuDriverGetVersion: %d, version %d\n", r, v);
	int n = 0;
	r = cu_count(&n);
	printf("cuda-probe: cuDeviceGetCount: %d, count %d\n", r, n);
	if (r != 0) {
		return 5;
	}
	for (int i = 0; i < n; i++) {
		int dev = 0;
		char name[256] = "";
		if ((r = cu_get(&dev, i)) != 0) {
			printf("cuda-probe: device %d: cuDeviceGet: %d\n", i, r);
			continue;
		}
		r = cu_name(name, sizeof name, dev);
		printf("cuda-probe: device %d: cuDeviceGetName: %d, %s\n", i, r, name);
	}
	return 0;
}
