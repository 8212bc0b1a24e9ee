package driver

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/drakit/drakit/examples/nvidia/nvml"
	"github.com/drakit/drakit/mig"
	"github.com/drakit/drakit/partition/lifecycle"
)

// migTool binds NVML to the partition lifecycle (lifecycle.Tool and
// lifecycle.WholeSwitcher): a partition is a MIG device, a GPU instance
// with one compute instance over all of its compute slices, keyed by its
// GPU's UUID, the profile's name and the placement's start; a GPU used
// whole is one with MIG mode off. The lifecycle (journal, ownership,
// reconcile, admin access, locks) decides what is made and destroyed;
// this is the NVML half.
type migTool struct {
	nv nvml.Interface
	d  *Driver // the GPUs by UUID

	// The profiles NVML reports are the GPU product's and never change
	// while the process runs (SetWhole drops a GPU's when it changes its
	// mode, to be safe): they are asked once, not at every Create.
	profMu     sync.Mutex
	giProfiles map[int][]nvml.GPUInstanceProfile // by GPU index
	// by GPU index and GPU instance profile
	ciProfiles map[ciProfileKey][]nvml.ComputeInstanceProfile

	// made are the GPU instances Create made (or found), by key, until
	// Destroy: what a container's device nodes need (the GPU and compute
	// instance IDs) without asking NVML again.
	mu   sync.Mutex
	made map[lifecycle.Key]nvml.GPUInstance
}

// ciProfileKey names the compute instance profiles of every GPU instance
// of one profile on one GPU.
type ciProfileKey struct{ gpu, giProfile int }

var (
	_ lifecycle.Tool          = (*migTool)(nil)
	_ lifecycle.WholeSwitcher = (*migTool)(nil)
)

// place is where k sits on this node now: the GPU's NVML index and the
// profile's ID. A GPU not on the node is lifecycle.ErrCardGone.
func (t *migTool) place(op string, k lifecycle.Key) (gpu, profile int, err error) {
	g, ok := t.d.gpuByUUID(k.Card)
	if !ok {
		return 0, 0, fmt.Errorf("%s %s: GPU %w", op, k, lifecycle.ErrCardGone)
	}
	if k.Whole {
		return g.Index, 0, nil
	}
	if g.product == nil {
		return 0, 0, fmt.Errorf(
			"%s %s: GPU %d has no MIG profiles (it could not be read)",
			op,
			k,
			g.Index,
		)
	}
	pr, err := g.product.Profile(k.Profile)
	if err != nil {
		return 0, 0, fmt.Errorf("%s %s: %w", op, k, err)
	}
	return g.Index, pr.ID, nil
}

// Find returns the GPU instance at k, with or without a compute
// instance.
func (t *migTool) Find(k lifecycle.Key) (nvml.GPUInstance, bool, error) {
	gpu, profile, err := t.place("find MIG device", k)
	if err != nil {
		return nvml.GPUInstance{}, false, err
	}
	gis, err := t.nv.GPUInstances(gpu)
	if err != nil {
		return nvml.GPUInstance{}, false, fmt.Errorf("find MIG device %s: %w", k, err)
	}
	for _, gi := range gis {
		if gi.ProfileID == profile && gi.Placement.Start == k.Start {
			return gi, true, nil
		}
	}
	return nvml.GPUInstance{}, false, nil
}

// profile returns GPU gpu's GPU instance profile id.
func (t *migTool) profile(gpu, id int) (nvml.GPUInstanceProfile, error) {
	ps, err := cached(&t.profMu, &t.giProfiles, gpu, func() ([]nvml.GPUInstanceProfile, error) {
		return t.nv.GPUInstanceProfiles(gpu)
	})
	if err != nil {
		return nvml.GPUInstanceProfile{}, err
	}
	for _, p := range ps {
		if p.ID == id {
			return p, nil
		}
	}
	return nvml.GPUInstanceProfile{}, nvml.NewError(
		nvml.ErrorInvalidArgument,
		"get GPU instance profile",
		"GPU %d has no profile %d",
		gpu,
		id,
	)
}

// Create makes the MIG device at k: the GPU instance at the placement,
// then a compute instance over all its compute slices. When the compute
// instance fails, the GPU instance is destroyed again. A complete device
// at k is returned as is, and a GPU instance left without its compute
// instance (a crash between the two calls) is completed. The GPU
// instance is created first and looked for only when NVML refuses the
// placement as taken, so the common case costs NVML the two creates.
// NVML's errors come through wrapped: errors.Is(err,
// nvml.ErrInsufficientResources) tells a full GPU; a GPU with MIG mode
// off is lifecycle.ErrWholeMode.
func (t *migTool) Create(_ context.Context, k lifecycle.Key) (lifecycle.Partition, error) {
	const op = "create MIG device"
	gpu, id, err := t.place(op, k)
	if err != nil {
		return lifecycle.Partition{}, err
	}
	prof, err := t.profile(gpu, id)
	if err != nil {
		return lifecycle.Partition{}, fmt.Errorf("%s %s: %w", op, k, err)
	}
	size := 0
	if len(prof.Placements) > 0 {
		size = prof.Placements[0].Size
	}
	gi, err := t.nv.CreateGPUInstance(gpu, id, mig.Placement{Start: k.Start, Size: size})
	if errors.Is(err, nvml.ErrInsufficientResources) {
		// Taken: by this device (an earlier Create, complete or cut
		// short by a crash) or by another, which is the error.
		found, ok, ferr := t.Find(k)
		switch {
		case ferr != nil:
			return lifecycle.Partition{}, errors.Join(fmt.Errorf("%s %s: %w", op, k, err), ferr)
		case ok && len(found.ComputeInstances) > 0:
			return t.remember(k, found), nil
		case ok:
			gi, err = found, nil
		}
	}
	if errors.Is(err, nvml.ErrNotSupported) {
		if m, merr := t.nv.MigMode(gpu); merr == nil && !m.Current {
			err = fmt.Errorf("%w (MIG mode is off): %w", lifecycle.ErrWholeMode, err)
		}
	}
	if err != nil {
		return lifecycle.Partition{}, fmt.Errorf("%s %s: %w", op, k, err)
	}
	ci, err := t.createCI(gi, prof)
	if err != nil {
		if rerr := t.nv.DestroyGPUInstance(gpu, gi.ID); rerr != nil &&
			!errors.Is(rerr, nvml.ErrNotFound) {
			return lifecycle.Partition{}, fmt.Errorf(
				"%s %s: %w; roll back GPU instance %d: %w (the next release or start undoes it)",
				op,
				k,
				err,
				gi.ID,
				rerr,
			)
		}
		return lifecycle.Partition{}, fmt.Errorf("%s %s (GPU instance rolled back): %w", op, k, err)
	}
	gi.ComputeInstances = append(gi.ComputeInstances, ci)
	return t.remember(k, gi), nil
}

// remember keeps gi as the device at k and returns it as a partition.
func (t *migTool) remember(k lifecycle.Key, gi nvml.GPUInstance) lifecycle.Partition {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.made == nil {
		t.made = map[lifecycle.Key]nvml.GPUInstance{}
	}
	t.made[k] = gi
	return lifecycle.Partition{Key: k, ID: gi.ComputeInstances[0].UUID, Complete: true}
}

// madeDevice is the GPU instance Create made at k, until its Destroy.
func (t *migTool) madeDevice(k lifecycle.Key) (nvml.GPUInstance, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	gi, ok := t.made[k]
	return gi, ok
}

// createCI creates the compute instance that covers all of gi's compute
// slices: of the compute instance profiles with the GPU instance's slice
// count, the lowest ID (what "nvidia-smi mig -cgi ... -C" creates).
func (t *migTool) createCI(
	gi nvml.GPUInstance,
	prof nvml.GPUInstanceProfile,
) (nvml.ComputeInstance, error) {
	cps, err := cached(
		&t.profMu,
		&t.ciProfiles,
		ciProfileKey{gpu: gi.GPU, giProfile: gi.ProfileID},
		func() ([]nvml.ComputeInstanceProfile, error) {
			return t.nv.ComputeInstanceProfiles(gi.GPU, gi.ID)
		},
	)
	if err != nil {
		return nvml.ComputeInstance{}, err
	}
	best := -1
	for _, c := range cps {
		if c.SliceCount == prof.SliceCount && (best < 0 || c.ID < best) {
			best = c.ID
		}
	}
	if best < 0 {
		return nvml.ComputeInstance{}, nvml.NewError(
			nvml.ErrorNotSupported,
			fmt.Sprintf("create compute instance in GPU instance %d on GPU %d", gi.ID, gi.GPU),
			"no compute instance profile with %d slices",
			prof.SliceCount,
		)
	}
	return t.nv.CreateComputeInstance(gi.GPU, gi.ID, best)
}

// Destroy removes the MIG device at k: its compute instances, then its
// GPU instance. A device that is already gone, wholly or in part, is
// success; so is a GPU with MIG mode off (it holds none).
func (t *migTool) Destroy(_ context.Context, k lifecycle.Key) error {
	const op = "destroy MIG device"
	gi, found, err := t.Find(k)
	if errors.Is(err, nvml.ErrNotSupported) {
		return nil // MIG mode off: no MIG device
	}
	if err != nil || !found {
		return err
	}
	for _, ci := range gi.ComputeInstances {
		if err := t.nv.DestroyComputeInstance(gi.GPU, gi.ID, ci.ID); err != nil &&
			!errors.Is(err, nvml.ErrNotFound) {
			return fmt.Errorf("%s %s: %w", op, k, err)
		}
	}
	if err := t.nv.DestroyGPUInstance(gi.GPU, gi.ID); err != nil &&
		!errors.Is(err, nvml.ErrNotFound) {
		return fmt.Errorf("%s %s: %w", op, k, err)
	}
	t.mu.Lock()
	delete(t.made, k)
	t.mu.Unlock()
	return nil
}

// List returns the GPU's GPU instances, complete or not; none while its
// MIG mode is off.
func (t *migTool) List(_ context.Context, card string) ([]lifecycle.Partition, error) {
	g, ok := t.d.gpuByUUID(card)
	if !ok {
		return nil, fmt.Errorf("list MIG devices of %s: GPU %w", card, lifecycle.ErrCardGone)
	}
	gis, err := t.nv.GPUInstances(g.Index)
	if errors.Is(err, nvml.ErrNotSupported) {
		return nil, nil // MIG mode off
	}
	if err != nil {
		return nil, fmt.Errorf("list MIG devices of GPU %d: %w", g.Index, err)
	}
	var out []lifecycle.Partition
	for _, gi := range gis {
		p := lifecycle.Partition{
			Key: lifecycle.Key{
				Card:    card,
				Profile: g.profileName(gi.ProfileID),
				Start:   gi.Placement.Start,
			},
		}
		if len(gi.ComputeInstances) > 0 {
			p.ID, p.Complete = gi.ComputeInstances[0].UUID, true
		}
		out = append(out, p)
	}
	return out, nil
}

// SetWhole makes MIG mode off (whole) or on current on the GPU, by the
// product's rules: a GPU already in that mode is left alone; the mode
// changes only while the GPU has no GPU instance; a change that stays
// pending (NVML could not activate it) is made current by a GPU reset.
// Each step reads the GPU's mode afresh, so a crash between the request
// and the reset is finished by the next call. A change that other NVML
// clients block (ErrInUse with no GPU instance left: DCGM,
// dcgm-exporter, a monitoring agent) says so: that message is what the
// kubelet shows in the pod's events.
func (t *migTool) SetWhole(_ context.Context, card string, whole bool) error {
	enabled := !whole
	g, ok := t.d.gpuByUUID(card)
	if !ok {
		return fmt.Errorf(
			"turn MIG mode %s on %s: GPU %w",
			onOff(enabled),
			card,
			lifecycle.ErrCardGone,
		)
	}
	op := fmt.Sprintf("turn MIG mode %s on GPU %d (%s)", onOff(enabled), g.Index, card)
	m, err := t.nv.MigMode(g.Index)
	if err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	if m.Current == enabled && m.Pending == enabled {
		return nil
	}
	ms, ok := t.nv.(nvml.ModeSetter)
	if !ok {
		return fmt.Errorf(
			"%s: %w: this NVML backend cannot change MIG mode",
			op,
			nvml.ErrNotSupported,
		)
	}
	t.forgetProfiles(g.Index)
	if m.Pending != enabled {
		if m, err = ms.SetMigMode(g.Index, enabled); err != nil {
			return fmt.Errorf("%s: %w", op, t.inUse(g.Index, err))
		}
	}
	if m.Current != enabled {
		if err := ms.ResetGPU(g.Index); err != nil {
			return fmt.Errorf(
				"%s: the change is pending until a GPU reset: %w",
				op,
				t.inUse(g.Index, err),
			)
		}
		if m, err = t.nv.MigMode(g.Index); err != nil {
			return fmt.Errorf("%s: %w", op, err)
		}
		if m.Current != enabled {
			return fmt.Errorf("%s: still %+v after the GPU reset", op, m)
		}
	}
	return nil
}

// inUse explains an ErrInUse of a mode change: GPU instances left, or
// other processes holding the GPU.
func (t *migTool) inUse(gpu int, err error) error {
	if !errors.Is(err, nvml.ErrInUse) {
		return err
	}
	if gis, lerr := t.nv.GPUInstances(gpu); lerr == nil && len(gis) > 0 {
		return fmt.Errorf("%w (its %d GPU instances must be destroyed first)", err, len(gis))
	}
	return fmt.Errorf(
		"%w: other NVML clients hold the GPU (DCGM or dcgm-exporter of the GPU Operator, "+
			"nvidia-persistenced, a monitoring agent, a process on the host): stop them on this "+
			"node, or use a MIG device of the GPU instead of the GPU whole",
		err,
	)
}

func onOff(on bool) string { return map[bool]string{true: "on", false: "off"}[on] }

// cached returns (*m)[k], asking fetch and keeping its answer when there
// is none; mu guards *m, and is not held while fetch runs.
func cached[K comparable, V any](
	mu *sync.Mutex,
	m *map[K]V,
	k K,
	fetch func() (V, error),
) (V, error) {
	mu.Lock()
	v, ok := (*m)[k]
	mu.Unlock()
	if ok {
		return v, nil
	}
	v, err := fetch()
	if err != nil {
		return v, err
	}
	mu.Lock()
	defer mu.Unlock()
	if *m == nil {
		*m = map[K]V{}
	}
	(*m)[k] = v
	return v, nil
}

// forgetProfiles drops what NVML said of the GPU's profiles: its MIG
// mode changes.
func (t *migTool) forgetProfiles(gpu int) {
	t.profMu.Lock()
	defer t.profMu.Unlock()
	delete(t.giProfiles, gpu)
	for ck := range t.ciProfiles {
		if ck.gpu == gpu {
			delete(t.ciProfiles, ck)
		}
	}
}

// profileName is the catalog name of GPU instance profile id on g ("" if
// g has none of that ID).
func (g *gpuInfo) profileName(id int) string {
	if g.product == nil {
		return ""
	}
	for _, pr := range g.product.Profiles {
		if pr.ID == id {
			return pr.Name
		}
	}
	return ""
}

// wholeOK says whether g can be served whole with MIG mode off, and why
// not: leaving MIG mode needs a GPU reset on Ampere (A100, A30), which a
// driver cannot do while other processes hold the GPU, and a vGPU guest
// cannot change MIG mode at all. NVIDIA's driver offers it on Hopper and
// later only, as this one does.
func (g *gpuInfo) wholeOK() (bool, string) {
	switch {
	case g.vgpuGuest:
		return false, "it is a vGPU guest's, which cannot change MIG mode"
	case g.cc == "" || strings.HasPrefix(g.cc, "8.") || strings.HasPrefix(g.cc, "7."):
		return false, fmt.Sprintf(
			"it is %s (compute capability %s): leaving MIG mode needs a GPU reset, which needs "+
				"the GPU idle of every other process; only Hopper and later GPUs are offered whole",
			g.Architecture,
			g.CUDAComputeCapability,
		)
	}
	return true, ""
}
