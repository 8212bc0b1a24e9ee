/*
 * A stand-in libcuda.so.1 for machines without a GPU: cuInit succeeds
 * where /dev/nvidiactl exists (else CUDA_ERROR_NO_DEVICE), the devices
 * are the /dev/nvidia<N> nodes it finds, and a device's name says which
 * node it is and lists the MIG capability nodes in /dev/nvidia-caps: what
 * a container's device nodes are, told through the CUDA driver API.
 */
#include <ctype.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { SUCCESS = 0, INVALID_VALUE = 1, NOT_INITIALIZED = 3, NO_DEVICE = 100, INVALID_DEVICE = 101 };

static int minors[64];
static int ngpus = -1;

static int cmp(const void *a, const void *b) { return *(const int *)a - *(const int *)b; }

static int scan(const char *dir, const char *prefix, int *out, int max) {
	DIR *d = opendir(dir);
	int n = 0;
	if (!d) {
		return 0;
	}
	size_t pl = strlen(prefix);
	for (struct dirent *e; (e = readdir(d)) != NULL && n < max;) {
		const char *s = e->d_name;
		if (strncmp(s, prefix, pl) != 0 || s[pl] == 0) {
			continue;
		}
		int digits = 1;
		for (const char *p = s + pl; *p; p++) {
			digits &= isdigit((unsigned char)*p) != 0;
		}
		if (digits) {
			out[n++] = atoi(s + pl);
		}
	}
	closedir(d);
	qsort(out, n, sizeof out[0], cmp);
	return n;
}

int cuInit(unsigned int flags) {
	if (flags != 0) {
		return INVALID_VALUE;
	}
	if (access("/dev/nvidiactl", F_OK) != 0) {
		return NO_DEVICE;
	}
	ngpus = scan("/dev", "nvidia", minors, 64);
	return SUCCESS;
}

int cuDriverGetVersion(int *v) {
	*v = 13000;
	return SUCCESS;
}

int cuDeviceGetCount(int *n) {
	if (ngpus < 0) {
		return NOT_INITIALIZED;
	}
	*n = ngpus;
	return SUCCESS;
}

int cuDeviceGet(int *dev, int ordinal) {
	if (ngpus < 0) {
		return NOT_INITIALIZED;
	}
	if (ordinal < 0 || ordinal >= ngpus) {
		return INVALID_DEVICE;
	}
	*dev = ordinal;
	return SUCCESS;
}

int cuDeviceGetName(char *name, int len, int dev) {
	if (ngpus < 0) {
		return NOT_INITIALIZED;
	}
	if (dev < 0 || dev >= ngpus || len <= 0) {
		return INVALID_DEVICE;
	}
	int caps[64];
	int n = scan("/dev/nvidia-caps", "nvidia-cap", caps, 64);
	int w = snprintf(name, len, "drakit stand-in GPU /dev/nvidia%d", minors[dev]);
	for (int i = 0; i < n && w < len; i++) {
		w += snprintf(name + w, len - w, "%s nvidia-cap%d", i == 0 ? " with" : "", caps[i]);
	}
	return SUCCESS;
}
