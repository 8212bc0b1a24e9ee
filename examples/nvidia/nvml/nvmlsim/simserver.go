package nvmlsim

import (
	"fmt"
	"strings"
)

// Server is a server model the simulator can play: eight GPUs of one
// product from the mig catalog.
type Server struct {
	// Name is what Open takes, e.g. "dgx-h100".
	Name string
	// Product is the mig catalog product, e.g. "H100-80GB".
	Product string
	// ProductName is what NVML reports as the GPU name.
	ProductName string
	// Architecture and ComputeCapability are as NVML reports them.
	Architecture, ComputeCapability string
	// MemoryMiB is the GPU memory NVML reports.
	MemoryMiB int64
	// PCIBusIDs are the eight GPUs' PCI addresses.
	PCIBusIDs [8]string
	// ModeChangeNeedsReset is true where a MIG mode change only becomes
	// current after a GPU reset (A100); Hopper and later apply it at once.
	ModeChangeNeedsReset bool
}

var (
	dgxA100Bus = [8]string{
		"0000:07:00.0",
		"0000:0f:00.0",
		"0000:47:00.0",
		"0000:4e:00.0",
		"0000:87:00.0",
		"0000:90:00.0",
		"0000:b7:00.0",
		"0000:bd:00.0",
	}
	dgxH100Bus = [8]string{
		"0000:1b:00.0",
		"0000:43:00.0",
		"0000:52:00.0",
		"0000:61:00.0",
		"0000:9d:00.0",
		"0000:c3:00.0",
		"0000:d1:00.0",
		"0000:df:00.0",
	}
)

var simServers = []Server{
	{
		"dgx-a100-40gb",
		"A100-40GB",
		"NVIDIA A100-SXM4-40GB",
		"Ampere",
		"8.0",
		40960,
		dgxA100Bus,
		true,
	},
	{
		"dgx-a100-80gb",
		"A100-80GB",
		"NVIDIA A100-SXM4-80GB",
		"Ampere",
		"8.0",
		81920,
		dgxA100Bus,
		true,
	},
	{"dgx-h100", "H100-80GB", "NVIDIA H100 80GB HBM3", "Hopper", "9.0", 81559, dgxH100Bus, false},
	{"dgx-h200", "H200-141GB", "NVIDIA H200", "Hopper", "9.0", 143771, dgxH100Bus, false},
	{"dgx-b200", "B200-180GB", "NVIDIA B200", "Blackwell", "10.0", 183359, dgxH100Bus, false},
}

// Servers returns the server models the simulator knows, in a fixed
// order.
func Servers() []Server { return append([]Server(nil), simServers...) }

// ServerNames returns the names Open accepts.
func ServerNames() []string {
	var out []string
	for _, s := range simServers {
		out = append(out, s.Name)
	}
	return out
}

func simServer(name string) (Server, error) {
	for _, s := range simServers {
		if s.Name == name {
			return s, nil
		}
	}
	return Server{}, fmt.Errorf(
		"unknown simulated server %q (known: %s)",
		name,
		strings.Join(ServerNames(), ", "),
	)
}

// Simulated driver and CUDA versions.
const (
	DriverVersion = "580.95.05"
	CUDAVersion   = "13.0"
)

// WriteSysfs writes the fake sysfs tree of the simulated server into dir,
// as Server.WriteSysfs does: a driver that finds this method on its NVML
// backend knows the machine is simulated.
func (s *Sim) WriteSysfs(dir string) error { return s.server.WriteSysfs(dir) }
