package nvmlsim

import (
	"errors"
	"fmt"
	"os"

	"github.com/drakit/drakit/examples/nvidia/nvml"
)

// FaultOp names the call a Fault hits.
type FaultOp string

// The calls a fault can hit.
const (
	FaultCreateGPUInstance      FaultOp = "create-gpu-instance"
	FaultCreateComputeInstance  FaultOp = "create-compute-instance"
	FaultDestroyComputeInstance FaultOp = "destroy-compute-instance"
	FaultDestroyGPUInstance     FaultOp = "destroy-gpu-instance"
	// FaultSetMigMode hits SetMigMode before the mode changes.
	FaultSetMigMode FaultOp = "set-mig-mode"
	// FaultResetGPU hits ResetGPU before the pending mode becomes
	// current.
	FaultResetGPU FaultOp = "reset-gpu"
	// FaultRegisterEvents makes the next WatchHealth unable to register
	// the GPU for XID events: the stream reports it Unmonitored (Code
	// and Stall are ignored).
	FaultRegisterEvents FaultOp = "register-events"
)

// Fault is an injected failure: the next call of Op on GPU (any GPU when
// GPU is -1), from any process sharing the state file, fails with Code
// and changes nothing. With Stall, the call instead records a Stall and
// never returns, so that a test can kill the process at that point (for
// FaultCreateComputeInstance: after the GPU instance exists, before its
// compute instance does). Each fault fires once.
type Fault struct {
	// Op is the call the fault hits.
	Op FaultOp `json:"op"`
	// GPU is the GPU index the call must be for; -1 matches any GPU.
	GPU int `json:"gpu"`
	// Code is the return code; zero means ErrorUnknown.
	Code nvml.Return `json:"code,omitempty"`
	// Stall makes the call block instead of failing (see Fault).
	Stall bool `json:"stall,omitempty"`
}

// Stall records a call that a stalling Fault stopped.
type Stall struct {
	// Op is the call that stalled.
	Op FaultOp `json:"op"`
	// GPU is the GPU index it was for.
	GPU int `json:"gpu"`
	// PID is the process that made the call.
	PID int `json:"pid"`
}

// errStall tells change that a fault stalled the call after its state was
// written.
var errStall = errors.New("stalled by an injected fault")

// fault consumes the first fault for op on gpu. It returns the error the
// call must fail with, nil when no fault applies.
func (st *simState) fault(op string, fop FaultOp, gpu int) error {
	for i, f := range st.Faults {
		if f.Op != fop || (f.GPU != -1 && f.GPU != gpu) {
			continue
		}
		st.Faults = append(st.Faults[:i:i], st.Faults[i+1:]...)
		if f.Stall {
			st.Stalls = append(st.Stalls, Stall{Op: fop, GPU: gpu, PID: os.Getpid()})
			return errStall
		}
		code := f.Code
		if code == nvml.Success {
			code = nvml.ErrorUnknown
		}
		return nvml.NewError(code, op, "injected fault")
	}
	return nil
}

// InjectFault arms a fault for the next matching call of any process that
// shares the state.
func (s *Sim) InjectFault(f Fault) error {
	switch f.Op {
	case FaultCreateGPUInstance,
		FaultCreateComputeInstance,
		FaultDestroyComputeInstance,
		FaultDestroyGPUInstance,
		FaultSetMigMode,
		FaultResetGPU,
		FaultRegisterEvents:
	default:
		return fmt.Errorf("inject fault: unknown op %q", f.Op)
	}
	return s.change(func(st *simState) (bool, error) {
		if f.GPU < -1 || f.GPU >= len(st.GPUs) {
			return false, fmt.Errorf("inject fault: no GPU %d", f.GPU)
		}
		st.Faults = append(st.Faults, f)
		return true, nil
	})
}

// Stalls lists the calls that stalling faults stopped, oldest first.
func (s *Sim) Stalls() ([]Stall, error) {
	var out []Stall
	err := s.view(func(st *simState) error {
		out = append(out, st.Stalls...)
		return nil
	})
	return out, err
}
