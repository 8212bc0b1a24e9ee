package nvml

// ComputeMode is a GPU's compute mode, who may hold a CUDA context on it
// ("nvidia-smi -c"). An MPS control daemon needs ExclusiveProcess: its
// server is then the one process on the GPU, and a CUDA program that is
// not its client gets "all CUDA-capable devices are busy or
// unavailable".
type ComputeMode string

// The compute modes NVML knows.
const (
	// ComputeModeDefault lets any process create contexts.
	ComputeModeDefault ComputeMode = "Default"
	// ComputeModeExclusiveProcess lets one process (an MPS server, for
	// its clients) hold contexts.
	ComputeModeExclusiveProcess ComputeMode = "ExclusiveProcess"
	// ComputeModeProhibited lets no process create contexts.
	ComputeModeProhibited ComputeMode = "Prohibited"
)

// Valid reports whether m is one of the modes (the zero value counts as
// Default).
func (m ComputeMode) Valid() bool {
	switch m {
	case "", ComputeModeDefault, ComputeModeExclusiveProcess, ComputeModeProhibited:
		return true
	}
	return false
}

// ComputeModeSetter is implemented by a backend that reads and sets a
// GPU's compute mode (nvmlDeviceGetComputeMode, nvmlDeviceSetComputeMode;
// root). The setting lasts until the GPU is reset or the driver reloads.
type ComputeModeSetter interface {
	ComputeMode(gpu int) (ComputeMode, error)
	SetComputeMode(gpu int, m ComputeMode) error
}
