//go:build !cgo

package nvml

import "fmt"

// Real is the backend on the host's NVIDIA driver. This binary was built
// without cgo, which go-nvml needs, so OpenReal always fails.
type Real struct{ Interface }

// RealOption configures OpenReal.
type RealOption func(*realOptions)

type realOptions struct{ libraryPath string }

// WithLibraryPath loads NVML from path instead of "libnvidia-ml.so.1".
func WithLibraryPath(path string) RealOption {
	return func(o *realOptions) { o.libraryPath = path }
}

// OpenReal fails: NVML needs a binary built with CGO_ENABLED=1. The error
// wraps ErrLibraryNotFound and says how to run the simulator instead.
func OpenReal(opts ...RealOption) (*Real, error) {
	return nil, fmt.Errorf(
		"open NVML: this binary was built without cgo, which NVML needs: %w; %s",
		ErrLibraryNotFound,
		simulatorHint,
	)
}
