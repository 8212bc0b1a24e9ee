//go:build cgo

package nvml

import (
	"errors"
	"strings"
	"testing"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh200"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
)

// One GPU that NVML cannot read (fallen off the bus: GPU_IS_LOST from a
// query; or no handle at all) is listed with GPU.Err while the others
// are read whole, on go-nvml's mock of a DGX H200: GPUs does not fail as
// a whole (it did, and the node's driver could not start).
func TestRealGPUsReportsAnUnreadableGPU(t *testing.T) {
	for _, tc := range []struct {
		name    string
		breakIt func(s *server.Server)
		want    error
	}{
		{"lost at a query", func(s *server.Server) {
			s.Devices[3].(*server.Device).GetMemoryInfoFunc = func() (
				gonvml.Memory, gonvml.Return,
			) {
				return gonvml.Memory{}, gonvml.ERROR_GPU_IS_LOST
			}
		}, ErrGPULost},
		{"no handle (its device node not accessible)", func(s *server.Server) {
			handle := s.DeviceGetHandleByIndexFunc
			s.DeviceGetHandleByIndexFunc = func(n int) (gonvml.Device, gonvml.Return) {
				if n == 3 {
					return nil, gonvml.ERROR_NO_PERMISSION
				}
				return handle(n)
			}
		}, ErrNoPermission},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := dgxh200.New()
			tc.breakIt(s)
			r := &Real{lib: s}
			gpus, err := r.GPUs()
			if err != nil {
				t.Fatalf("GPUs with GPU 3 unreadable: %v", err)
			}
			if len(gpus) != 8 {
				t.Fatalf("%d GPUs, want all 8", len(gpus))
			}
			for _, g := range gpus {
				if g.Index == 3 {
					if !errors.Is(g.Err, tc.want) || !strings.Contains(g.Err.Error(), "GPU 3") {
						t.Errorf("GPU 3: Err %v, want %v naming GPU 3", g.Err, tc.want)
					}
					continue
				}
				if g.Err != nil || !strings.HasPrefix(g.UUID, "GPU-") || g.MemoryMiB <= 0 ||
					g.ProductName == "" {
					t.Errorf("GPU %d beside an unreadable one: %+v", g.Index, g)
				}
			}
		})
	}
}
