package nvmlsim

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/drakit/drakit/mig"
)

// Setup is the initial state of a new simulated server, what an
// administrator did before the driver first started: which GPUs have MIG
// mode enabled and which MIG devices (GPU instance plus a compute instance
// over all of its slices) exist on them. It applies only when the state is
// created; an existing state file keeps its own. Every instance is made
// through the simulator's own create calls, so a setup the real rules
// refuse is refused with NVML's error.
type Setup struct {
	// MIGGPUs lists the GPUs with MIG mode enabled; the others have it
	// disabled. nil keeps the WithMIGEnabled default for every GPU.
	MIGGPUs []int
	// Instances are the administrator's MIG devices, made in this order.
	Instances []Instance
}

// Instance is one MIG device of a Setup.
type Instance struct {
	// GPU is the GPU's index.
	GPU int
	// Profile is the GPU instance profile name, e.g. "3g.71gb".
	Profile string
	// Start is the placement's first memory slice.
	Start int
}

// String prints "gpu:profile@start", the form ParseInstances reads.
func (in Instance) String() string {
	return fmt.Sprintf("%d:%s@%d", in.GPU, in.Profile, in.Start)
}

// ParseGPUList reads a GPU list as the -nvml-sim-mig-gpus flag takes it:
// "all" or "" (nil), "none" (empty, not nil), or indices and ranges such as
// "2-7" or "0,2,4-5". Indices come back sorted and unique.
func ParseGPUList(s string) ([]int, error) {
	switch strings.TrimSpace(s) {
	case "all", "":
		return nil, nil
	case "none":
		return []int{}, nil
	}
	seen := map[int]bool{}
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(strings.TrimSpace(part), "-")
		a, err := strconv.Atoi(lo)
		if err != nil || a < 0 {
			return nil, fmt.Errorf("parse GPU list %q: %q is not a GPU index or range", s, part)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil || b < a {
				return nil, fmt.Errorf("parse GPU list %q: %q is not a GPU index or range", s, part)
			}
		}
		for i := a; i <= b; i++ {
			seen[i] = true
		}
	}
	out := make([]int, 0, len(seen))
	for i := range seen {
		out = append(out, i)
	}
	sort.Ints(out)
	return out, nil
}

// ParseInstances reads MIG devices as the -nvml-sim-instances flag
// takes them: comma-separated "gpu:profile@start", e.g.
// "2:4g.71gb@0,2:3g.71gb@4". The empty string is no instances.
func ParseInstances(s string) ([]Instance, error) {
	var out []Instance
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		g, rest, ok1 := strings.Cut(part, ":")
		prof, start, ok2 := strings.Cut(rest, "@")
		gpu, err1 := strconv.Atoi(g)
		st, err2 := strconv.Atoi(start)
		if !ok1 || !ok2 || err1 != nil || err2 != nil || gpu < 0 || st < 0 {
			return nil, fmt.Errorf(
				"parse MIG instances %q: %q is not gpu:profile@start (e.g. 2:3g.71gb@4)",
				s,
				part,
			)
		}
		name, err := mig.ParseProfileName(prof)
		if err != nil {
			return nil, fmt.Errorf("parse MIG instances %q: %w", s, err)
		}
		out = append(out, Instance{GPU: gpu, Profile: name.String(), Start: st})
	}
	return out, nil
}

// apply makes the setup on a fresh in-memory simulator: MIG modes first
// (with a reset where the model needs one), then the instances.
func (su Setup) apply(s *Sim) error {
	if su.MIGGPUs != nil {
		on := map[int]bool{}
		for _, g := range su.MIGGPUs {
			if g >= len(s.mem.GPUs) {
				return fmt.Errorf(
					"set up simulated NVML: no GPU %d (have 0..%d)",
					g,
					len(s.mem.GPUs)-1,
				)
			}
			on[g] = true
		}
		for i := range s.mem.GPUs {
			if _, err := s.SetMigMode(i, on[i]); err != nil {
				return fmt.Errorf("set up simulated NVML: %w", err)
			}
			if err := s.ResetGPU(i); err != nil {
				return fmt.Errorf("set up simulated NVML: %w", err)
			}
		}
	}
	for _, in := range su.Instances {
		pr, err := s.product.Profile(in.Profile)
		if err != nil {
			return fmt.Errorf("set up simulated NVML: instance %s: %w", in, err)
		}
		gi, err := s.CreateGPUInstance(
			in.GPU,
			pr.ID,
			mig.Placement{Start: in.Start, Size: pr.MemorySlices},
		)
		if err != nil {
			return fmt.Errorf("set up simulated NVML: instance %s: %w", in, err)
		}
		cps, err := s.ComputeInstanceProfiles(in.GPU, gi.ID)
		if err != nil {
			return fmt.Errorf("set up simulated NVML: instance %s: %w", in, err)
		}
		ci := -1
		for _, c := range cps {
			if c.SliceCount == pr.ComputeSlices && (ci < 0 || c.ID < ci) {
				ci = c.ID
			}
		}
		if ci < 0 {
			return errors.New(
				"set up simulated NVML: instance " + in.String() +
					": no compute instance profile over all slices",
			)
		}
		if _, err := s.CreateComputeInstance(in.GPU, gi.ID, ci); err != nil {
			return fmt.Errorf("set up simulated NVML: instance %s: %w", in, err)
		}
	}
	return nil
}
