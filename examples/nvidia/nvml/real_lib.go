package nvml

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// libraryDirs are the folders, relative to a driver root, where NVIDIA's
// installers and distributions' packages put libnvidia-ml.so.1.
var libraryDirs = []string{
	"usr/lib/x86_64-linux-gnu", "usr/lib/aarch64-linux-gnu", "usr/lib64", "usr/lib",
	"lib/x86_64-linux-gnu", "lib/aarch64-linux-gnu", "lib64", "lib",
	"usr/lib/x86_64-linux-gnu/nvidia/current", // Debian's nvidia-driver packages
}

// LibraryPaths returns the paths under root (a driver root as this
// process sees it) where FindLibrary looks for libnvidia-ml.so.1, in its
// order; for root "/" they are the host's own folders.
func LibraryPaths(root string) []string {
	out := make([]string, 0, len(libraryDirs))
	for _, d := range libraryDirs {
		out = append(out, filepath.Join(root, d, "libnvidia-ml.so.1"))
	}
	return out
}

// FindLibrary returns the path of libnvidia-ml.so.1 under root, a driver
// root as this process sees it (e.g. /driver-root, where the chart mounts
// the node's /run/nvidia/driver). For root "/" (or "") it returns "": the
// dynamic loader's own search finds the host's library. Otherwise a
// missing library is an error that wraps ErrLibraryNotFound and names
// the folders looked in.
func FindLibrary(root string) (string, error) {
	if root == "" || filepath.Clean(root) == "/" {
		return "", nil
	}
	for _, d := range libraryDirs {
		p := filepath.Join(root, d, "libnvidia-ml.so.1")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf(
		"find NVML under driver root %s: no libnvidia-ml.so.1 in %s: %w; is the NVIDIA driver "+
			"installed there?",
		root,
		strings.Join(libraryDirs, ", "),
		ErrLibraryNotFound,
	)
}
