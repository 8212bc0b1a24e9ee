package nvmlflag

import (
	"errors"
	"strings"
	"testing"

	"github.com/drakit/drakit/examples/nvidia/nvml"
)

// TestOpen: the real backend without a library is one clear error, the
// simulator opens by server name, and an unknown name lists the known.
func TestOpen(t *testing.T) {
	f := Flags{Library: "/nonexistent/libnvidia-ml.so.1"}
	nv, err := f.Open()
	if nv != nil || !errors.Is(err, nvml.ErrLibraryNotFound) {
		t.Fatalf("Flags.Open: %v, %v; want a nil Interface and nvml.ErrLibraryNotFound", nv, err)
	}
	f = Flags{Sim: "dgx-a100-40gb"}
	if nv, err = f.Open(); err != nil || nv == nil {
		t.Fatalf("Flags.Open with -nvml-sim: %v", err)
	}
	f = Flags{Sim: "dgx-x"}
	if _, err := f.Open(); err == nil || !strings.Contains(err.Error(), "dgx-h200") {
		t.Fatalf("unknown server: %v, want the known names", err)
	}
}
