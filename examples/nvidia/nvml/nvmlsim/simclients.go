package nvmlsim

import (
	"fmt"
	"slices"

	"github.com/drakit/drakit/examples/nvidia/nvml"
)

var _ nvml.ProcessLister = (*Sim)(nil)

// AttachClient makes process p hold GPU gpu, as a CUDA application, an
// MPS server or a monitoring agent with a context on it does, for every
// process sharing the state, until DetachClient: Processes lists it, and
// the GPU's MIG mode cannot change (SetMigMode and ResetGPU fail with
// ErrInUse), as on hardware. A PID already attached is replaced.
func (s *Sim) AttachClient(gpu int, p nvml.Process) error {
	op := fmt.Sprintf("attach process %d to GPU %d", p.PID, gpu)
	if p.Kind == "" {
		p.Kind = "compute"
	}
	return s.change(func(st *simState) (bool, error) {
		g, err := st.gpu(op, gpu)
		if err != nil {
			return false, err
		}
		g.Clients = slices.DeleteFunc(
			g.Clients,
			func(c nvml.Process) bool { return c.PID == p.PID },
		)
		g.Clients = append(g.Clients, p)
		return true, nil
	})
}

// DetachClient ends process pid's hold on GPU gpu; ErrNotFound when it
// held none.
func (s *Sim) DetachClient(gpu int, pid uint32) error {
	op := fmt.Sprintf("detach process %d from GPU %d", pid, gpu)
	return s.change(func(st *simState) (bool, error) {
		g, err := st.gpu(op, gpu)
		if err != nil {
			return false, err
		}
		n := len(g.Clients)
		g.Clients = slices.DeleteFunc(g.Clients, func(c nvml.Process) bool { return c.PID == pid })
		if len(g.Clients) == n {
			return false, nvml.NewError(
				nvml.ErrorNotFound,
				op,
				"process %d holds no context on GPU %d",
				pid,
				gpu,
			)
		}
		return true, nil
	})
}

// Processes lists the processes holding GPU gpu (AttachClient), as NVML's
// running processes do.
func (s *Sim) Processes(gpu int) ([]nvml.Process, error) {
	var out []nvml.Process
	err := s.view(func(st *simState) error {
		g, err := st.gpu(fmt.Sprintf("list the processes of GPU %d", gpu), gpu)
		if err == nil {
			out = slices.Clone(g.Clients)
		}
		return err
	})
	return out, err
}

// held refuses a MIG mode change while other clients hold the GPU.
func (g *simGPU) held(op string) error {
	if len(g.Clients) == 0 {
		return nil
	}
	pids := make([]string, len(g.Clients))
	for i, c := range g.Clients {
		pids[i] = fmt.Sprint(c.PID)
	}
	return nvml.NewError(nvml.ErrorInUse, op, "in use by other clients (processes %v)", pids)
}
