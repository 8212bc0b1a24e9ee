package nvmlsim

import (
	"fmt"
	"slices"

	"github.com/drakit/drakit/examples/nvidia/nvml"
)

// slot is g's place on the server, i its position in the state's GPUs.
func (g simGPU) slot(i int) int {
	if g.Slot != nil {
		return *g.Slot
	}
	return i
}

// RemoveGPU takes GPU gpu off the simulated server as a node sees it
// after the GPU fell off the bus (XID 79) and the node rebooted: NVML
// no longer enumerates it, so every later GPU's index and device minor
// move down by one, while each GPU keeps its UUID and PCI bus ID. The
// MIG devices and MIG mode of the other GPUs stay as they are (an
// administrator's tooling makes its own again at boot); the removed
// GPU's are gone with it. RestoreGPU puts it back.
func (s *Sim) RemoveGPU(gpu int) error {
	op := fmt.Sprintf("remove GPU %d", gpu)
	return s.change(func(st *simState) (bool, error) {
		if gpu < 0 || gpu >= len(st.GPUs) {
			return false, nvml.NewError(
				nvml.ErrorInvalidArgument,
				op,
				"no GPU %d (have 0..%d)",
				gpu,
				len(st.GPUs)-1,
			)
		}
		for i := range st.GPUs {
			slot := st.GPUs[i].slot(i)
			st.GPUs[i].Slot = &slot
		}
		g := st.GPUs[gpu]
		g.Instances, g.Lost = nil, false
		st.Gone = append(st.Gone, g)
		st.GPUs = slices.Delete(st.GPUs, gpu, gpu+1)
		st.renumber()
		return true, nil
	})
}

// RestoreGPU puts a GPU that RemoveGPU took off back in its slot (a
// reseated or replaced card, after the next reboot): the GPUs after it
// move up by one again. It comes back without MIG devices, in the MIG
// mode it had.
func (s *Sim) RestoreGPU(uuid string) error {
	op := "restore GPU " + uuid
	return s.change(func(st *simState) (bool, error) {
		i := slices.IndexFunc(st.Gone, func(g simGPU) bool { return g.UUID == uuid })
		if i < 0 {
			return false, nvml.NewError(nvml.ErrorNotFound, op, "no GPU %s was removed", uuid)
		}
		g := st.Gone[i]
		st.Gone = slices.Delete(st.Gone, i, i+1)
		at := 0
		for at < len(st.GPUs) && st.GPUs[at].slot(at) < *g.Slot {
			at++
		}
		st.GPUs = slices.Insert(st.GPUs, at, g)
		st.renumber()
		return true, nil
	})
}

// renumber gives every GPU instance the index its GPU has now (as NVML
// reports the parent of an instance by the GPU's current index).
func (st *simState) renumber() {
	for i := range st.GPUs {
		for j := range st.GPUs[i].Instances {
			st.GPUs[i].Instances[j].GPU = i
		}
	}
}
