package nvml

import "fmt"

// Process is a process that holds a GPU through the NVIDIA driver: a
// CUDA or graphics context, or an MPS server's.
type Process struct {
	// PID is the process ID as the host sees it.
	PID uint32 `json:"pid"`
	// Kind is how it holds the GPU: "compute", "graphics" or "mps".
	Kind string `json:"kind"`
	// UsedMemoryMiB is the GPU memory it uses; 0 where NVML cannot say
	// (a process in another container of a restricted host).
	UsedMemoryMiB int64 `json:"usedMemoryMiB,omitempty"`
}

// ProcessLister is implemented by a backend that lists the processes
// holding a GPU (the real NVML's running processes, the simulator's
// clients): what a driver checks before it changes a GPU's MIG mode,
// which the NVIDIA driver refuses (ErrInUse) while other clients hold the
// GPU.
type ProcessLister interface {
	// Processes lists the processes with a compute, graphics or MPS
	// context on the GPU (NVML's running processes), each once.
	Processes(gpu int) ([]Process, error)
}

// Processes lists the processes the inner backend lists; a backend
// without ProcessLister is ErrNotSupported. Listing changes nothing.
func (r readOnly) Processes(gpu int) ([]Process, error) {
	if p, ok := r.Interface.(ProcessLister); ok {
		return p.Processes(gpu)
	}
	return nil, fmt.Errorf("list the processes of GPU %d: %w", gpu, ErrNotSupported)
}
