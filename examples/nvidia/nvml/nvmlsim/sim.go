package nvmlsim

import (
	"crypto/rand"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/drakit/drakit/examples/nvidia/nvml"
	"github.com/drakit/drakit/mig"
	"github.com/drakit/drakit/statefile"
)

// simState is the simulated hardware: what outlives any process.
type simState struct {
	Server string `json:"server"`
	// Product replaces the server's catalog product (WithProduct).
	Product *productSpec `json:"product,omitempty"`
	GPUs    []simGPU     `json:"gpus"`
	// Gone are the GPUs NVML no longer enumerates (RemoveGPU).
	Gone      []simGPU   `json:"gone,omitempty"`
	Faults    []Fault    `json:"faults,omitempty"`
	Stalls    []Stall    `json:"stalls,omitempty"`
	NextEvent uint64     `json:"nextEvent"`
	Events    []simEvent `json:"events,omitempty"`
}

// productSpec is a mig.Product as the state file keeps it.
type productSpec struct {
	Name          string        `json:"name"`
	MemorySlices  int           `json:"memorySlices"`
	ComputeSlices int           `json:"computeSlices"`
	Profiles      []mig.Profile `json:"profiles"`
}

func (ps *productSpec) product() (*mig.Product, error) {
	return mig.NewProduct(ps.Name, ps.MemorySlices, ps.ComputeSlices, ps.Profiles)
}

type simGPU struct {
	UUID string `json:"uuid"`
	// Slot is the GPU's place on the server (its PCI bus ID is the
	// server's PCIBusIDs[Slot]); nil is its position in the state's
	// GPUs, as every GPU has until one is removed (RemoveGPU).
	Slot *int `json:"slot,omitempty"`
	// Lost is set by XID 79 (fallen off the bus) and cleared by
	// RecoverGPU: a lost GPU answers every query with ErrGPULost.
	Lost      bool               `json:"lost,omitempty"`
	Mig       nvml.MigMode       `json:"mig"`
	Instances []nvml.GPUInstance `json:"instances,omitempty"`
	TimeSlice nvml.TimeSlice     `json:"timeSlice,omitempty"`
	// Clients are the other processes holding the GPU (AttachClient).
	Clients []nvml.Process `json:"clients,omitempty"`
	// ComputeMode is the GPU's compute mode ("" is Default).
	ComputeMode nvml.ComputeMode `json:"computeMode,omitempty"`
	// MPS is the MPS control daemon serving the GPU (simmps.go), nil
	// when none registered.
	MPS *simMPS `json:"mps,omitempty"`
}

// Sim is the simulated backend: an 8-GPU server whose MIG state lives in a
// state file (or in memory), with the placement rules of real NVML
// enforced on every create. Several Sims, in one process or many, may
// share a state file: every call is a read-modify-write under an flock,
// written atomically, as one GPU serves many processes. A Sim is safe for
// concurrent use.
type Sim struct {
	server  Server
	product *mig.Product
	file    statefile.Document // path "" keeps the state in memory
	poll    time.Duration

	mu  sync.Mutex // guards mem
	mem *simState
}

var (
	_ nvml.Interface         = (*Sim)(nil)
	_ nvml.ModeSetter        = (*Sim)(nil)
	_ nvml.ComputeModeSetter = (*Sim)(nil)
)

// Option configures Open.
type Option func(*simOptions) error

type simOptions struct {
	server     string
	product    *mig.Product
	migEnabled bool
	poll       time.Duration
	setup      *Setup
}

// WithServer selects the server model for a new state (default
// "dgx-h100"). An existing state file keeps its model; naming a different
// one is an error.
func WithServer(name string) Option {
	return func(o *simOptions) error {
		if _, err := simServer(name); err != nil {
			return err
		}
		o.server = name
		return nil
	}
}

// WithProduct makes the GPUs of a new state the given product instead of
// the server's catalog product: another GPU's profiles (e.g. mig.FromNVML
// of what a real GPU reported) or a made-up geometry for tests. The state
// file keeps it.
func WithProduct(p *mig.Product) Option {
	return func(o *simOptions) error {
		if p == nil {
			return errors.New("product is nil")
		}
		o.product = p
		return nil
	}
}

// WithMIGEnabled sets the MIG mode of every GPU of a new state (default
// enabled, the state a MIG driver works on; DGX systems ship with MIG
// disabled).
func WithMIGEnabled(enabled bool) Option {
	return func(o *simOptions) error { o.migEnabled = enabled; return nil }
}

// WithSetup makes a new state start as su says (MIG modes and an
// administrator's MIG devices); an existing state is left as it is.
func WithSetup(su Setup) Option {
	return func(o *simOptions) error { o.setup = &su; return nil }
}

// WithPollInterval sets how often WatchHealth reads the state for new
// events (default 100ms).
func WithPollInterval(d time.Duration) Option {
	return func(o *simOptions) error {
		if d <= 0 {
			return fmt.Errorf("poll interval %v must be positive", d)
		}
		o.poll = d
		return nil
	}
}

// Open opens the simulated server whose state is in the file at path,
// creating a fresh one (all GPUs empty) when the file does not exist. An
// empty path keeps the state in memory, for one process only. The state
// file's folder must exist.
func Open(path string, opts ...Option) (*Sim, error) {
	o := simOptions{migEnabled: true, poll: 100 * time.Millisecond}
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return nil, fmt.Errorf("open simulated NVML: %w", err)
		}
	}
	s := &Sim{file: statefile.Document{Path: path, Volatile: true}, poll: o.poll}
	fresh := func(server string) (*simState, error) {
		if server == "" {
			server = "dgx-h100"
		}
		srv, err := simServer(server)
		if err != nil {
			return nil, err
		}
		st := &simState{Server: srv.Name}
		if p := o.product; p != nil {
			st.Product = &productSpec{
				Name:          p.Name,
				MemorySlices:  p.MemorySlices,
				ComputeSlices: p.ComputeSlices,
				Profiles:      p.Profiles,
			}
		}
		for range 8 {
			u, err := newUUID()
			if err != nil {
				return nil, err
			}
			st.GPUs = append(
				st.GPUs,
				simGPU{
					UUID: "GPU-" + u,
					Mig:  nvml.MigMode{Current: o.migEnabled, Pending: o.migEnabled},
				},
			)
		}
		if o.setup != nil {
			p := o.product
			if p == nil {
				if p, err = mig.Lookup(srv.Product); err != nil {
					return nil, err
				}
			}
			if err := o.setup.apply(&Sim{server: srv, product: p, mem: st}); err != nil {
				return nil, err
			}
		}
		return st, nil
	}
	var server string
	var spec *productSpec
	if path == "" {
		st, err := fresh(o.server)
		if err != nil {
			return nil, fmt.Errorf("open simulated NVML: %w", err)
		}
		s.mem, server, spec = st, st.Server, st.Product
	} else {
		var st simState
		err := s.file.Update(&st, func(exists bool) (bool, error) {
			if exists {
				if err := st.check(); err != nil {
					return false, err
				}
				if o.server != "" && o.server != st.Server {
					return false, fmt.Errorf("state is a %s, not a %s", st.Server, o.server)
				}
				server, spec = st.Server, st.Product
				return false, nil
			}
			f, err := fresh(o.server)
			if err != nil {
				return false, err
			}
			st, server, spec = *f, f.Server, f.Product
			return true, nil
		})
		if err != nil {
			return nil, fmt.Errorf("open simulated NVML %s: %w", path, s.corrupt(err))
		}
	}
	s.server, _ = simServer(server)
	var p *mig.Product
	var err error
	if spec != nil {
		p, err = spec.product()
	} else {
		p, err = mig.Lookup(s.server.Product)
	}
	if err != nil {
		return nil, fmt.Errorf("open simulated NVML: %w", err)
	}
	if spec != nil {
		s.server.Product, s.server.ProductName = p.Name, p.Name
	}
	s.product = p
	return s, nil
}

// check rejects a state file that does not describe a known server.
func (st *simState) check() error {
	if _, err := simServer(st.Server); err != nil {
		return fmt.Errorf("corrupt state: %w", err)
	}
	if n := len(st.GPUs) + len(st.Gone); n != 8 {
		return fmt.Errorf("corrupt state: %d GPUs and %d gone, want 8 in all",
			len(st.GPUs), len(st.Gone))
	}
	seen := map[int]bool{}
	for i, g := range append(slices.Clone(st.GPUs), st.Gone...) {
		slot := g.slot(i)
		if slot < 0 || slot >= 8 || seen[slot] {
			return fmt.Errorf("corrupt state: GPU %s in slot %d", g.UUID, slot)
		}
		seen[slot] = true
	}
	return nil
}

func newUUID() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("make UUID: %w", err)
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16]), nil
}

// Server returns the simulated server model (with Product and
// ProductName of the WithProduct product, if one was given).
func (s *Sim) Server() Server { return s.server }

// Product returns the product the simulated GPUs are: the server's
// catalog product or the WithProduct one.
func (s *Sim) Product() *mig.Product { return s.product }

// view runs fn on the current state.
func (s *Sim) view(fn func(st *simState) error) error {
	if s.file.Path == "" {
		s.mu.Lock()
		defer s.mu.Unlock()
		return fn(s.mem)
	}
	var st simState
	exists, err := s.file.Read(&st)
	if err != nil {
		return s.corrupt(err)
	}
	if !exists {
		return fmt.Errorf("simulated NVML state %s is gone", s.file.Path)
	}
	return fn(&st)
}

// ErrCorruptState is wrapped by the simulator's errors when its state
// file exists but cannot be decoded.
var ErrCorruptState = errors.New("simulated NVML state is corrupt")

// corrupt wraps a decode error of the state file with ErrCorruptState,
// what the file is, and what to do.
func (s *Sim) corrupt(err error) error {
	var de *statefile.DecodeError
	if !errors.As(err, &de) {
		return err
	}
	return fmt.Errorf(
		"%w: %s holds the simulated GPUs and their MIG devices (no real GPU's state) and cannot "+
			"be decoded: %v; restore it, or delete it to start again from the simulator's setup "+
			"(its simulated MIG devices are then gone, so restart the driver after deleting it)",
		ErrCorruptState,
		s.file.Path,
		de.Err,
	)
}

// change runs fn on the current state and keeps its changes when fn says
// so; fn must leave the state untouched when it returns false. A call a
// stalling fault hit blocks here forever, its lock released.
func (s *Sim) change(fn func(st *simState) (bool, error)) error {
	var err error
	if s.file.Path == "" {
		s.mu.Lock()
		_, err = fn(s.mem)
		s.mu.Unlock()
	} else {
		var st simState
		err = s.file.Update(&st, func(exists bool) (bool, error) {
			if !exists {
				return false, fmt.Errorf("simulated NVML state %s is gone", s.file.Path)
			}
			return fn(&st)
		})
		err = s.corrupt(err)
	}
	if errors.Is(err, errStall) {
		for {
			time.Sleep(time.Hour) // until the test kills this process
		}
	}
	return err
}

func (st *simState) gpu(op string, i int) (*simGPU, error) {
	if i < 0 || i >= len(st.GPUs) {
		return nil, nvml.NewError(
			nvml.ErrorInvalidArgument,
			op,
			"no GPU %d (have 0..%d)",
			i,
			len(st.GPUs)-1,
		)
	}
	if st.GPUs[i].Lost {
		return nil, nvml.NewError(
			nvml.ErrorGPUIsLost,
			op,
			"GPU %d fell off the bus (XID 79); it answers after a reset (Sim.RecoverGPU)",
			i,
		)
	}
	return &st.GPUs[i], nil
}

// enter starts a MIG call: the GPU must exist, an armed fault for fop
// fires (commit is then true: the consumed fault must be kept), and with
// needMIG the GPU's MIG mode must be current (ErrNotSupported).
func (st *simState) enter(
	op string,
	fop FaultOp,
	gpu int,
	needMIG bool,
) (g *simGPU, commit bool, err error) {
	if g, err = st.gpu(op, gpu); err != nil {
		return nil, false, err
	}
	if err := st.fault(op, fop, gpu); err != nil {
		return nil, true, err
	}
	if needMIG && !g.Mig.Current {
		return nil, false, nvml.NewError(nvml.ErrorNotSupported, op, "MIG mode is disabled")
	}
	return g, false, nil
}

// System reports the simulated driver and CUDA versions.
func (s *Sim) System() (nvml.System, error) {
	return nvml.System{DriverVersion: DriverVersion, CUDAVersion: CUDAVersion}, nil
}

// GPUs lists the simulated GPUs NVML enumerates: the eight, less those
// removed (RemoveGPU), in slot order, indexed and numbered (device minor)
// by their place in that order.
func (s *Sim) GPUs() ([]nvml.GPU, error) {
	var out []nvml.GPU
	err := s.view(func(st *simState) error {
		for i, g := range st.GPUs {
			out = append(out, nvml.GPU{
				Index:                 i,
				UUID:                  g.UUID,
				ProductName:           s.server.ProductName,
				Brand:                 "NVIDIA",
				Architecture:          s.server.Architecture,
				CUDAComputeCapability: s.server.ComputeCapability,
				MemoryMiB:             s.server.MemoryMiB,
				PCIBusID:              s.server.PCIBusIDs[g.slot(i)],
				Minor:                 i,
			})
		}
		return nil
	})
	return out, err
}

// MigMode reports the GPU's MIG mode.
func (s *Sim) MigMode(gpu int) (nvml.MigMode, error) {
	var m nvml.MigMode
	err := s.view(func(st *simState) error {
		g, err := st.gpu("get MIG mode", gpu)
		if err == nil {
			m = g.Mig
		}
		return err
	})
	return m, err
}

// SetMigMode requests a MIG mode, as an administrator does with
// nvidia-smi or the reference driver on a dynamic GPU (ModeSetter): it
// becomes pending, and current at once unless the model needs a GPU
// reset (Server.ModeChangeNeedsReset: A100; then ResetGPU). It fails
// with ErrInUse while GPU instances exist or other clients hold the GPU
// (AttachClient), changing nothing, and returns the mode after the call.
func (s *Sim) SetMigMode(gpu int, enabled bool) (nvml.MigMode, error) {
	op := fmt.Sprintf("set MIG mode on GPU %d", gpu)
	var m nvml.MigMode
	err := s.change(func(st *simState) (bool, error) {
		g, commit, err := st.enter(op, FaultSetMigMode, gpu, false)
		if err != nil {
			return commit, err
		}
		if len(g.Instances) > 0 {
			return false, nvml.NewError(
				nvml.ErrorInUse,
				op,
				"%d GPU instances exist",
				len(g.Instances),
			)
		}
		if err := g.held(op); err != nil {
			return false, err
		}
		g.Mig.Pending = enabled
		if !s.server.ModeChangeNeedsReset {
			g.Mig.Current = enabled
		}
		m = g.Mig
		return true, nil
	})
	return m, err
}

// ResetGPU resets the GPU, which makes a pending MIG mode current. It
// fails with ErrInUse while GPU instances exist or other clients hold
// the GPU.
func (s *Sim) ResetGPU(gpu int) error {
	op := fmt.Sprintf("reset GPU %d", gpu)
	return s.change(func(st *simState) (bool, error) {
		g, commit, err := st.enter(op, FaultResetGPU, gpu, false)
		if err != nil {
			return commit, err
		}
		if len(g.Instances) > 0 {
			return false, nvml.NewError(
				nvml.ErrorInUse,
				op,
				"%d GPU instances exist",
				len(g.Instances),
			)
		}
		if err := g.held(op); err != nil {
			return false, err
		}
		g.Mig.Current = g.Mig.Pending
		return true, nil
	})
}

func (s *Sim) giProfiles() []nvml.GPUInstanceProfile {
	var out []nvml.GPUInstanceProfile
	for _, pr := range s.product.Profiles {
		out = append(
			out,
			nvml.GPUInstanceProfile{
				ID:            pr.ID,
				Name:          pr.Name,
				SliceCount:    pr.ComputeSlices,
				InstanceCount: pr.MaxCount,
				MemoryMiB:     pr.MemoryMiB,
				Placements:    pr.Placements(),
				Engines:       pr.Engines,
			},
		)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

func (s *Sim) giProfile(id int) (mig.Profile, bool) {
	for _, pr := range s.product.Profiles {
		if pr.ID == id {
			return pr, true
		}
	}
	return mig.Profile{}, false
}

// GPUInstanceProfiles lists the catalog's profiles of the simulated
// product, as NVML reports them whatever the MIG mode.
func (s *Sim) GPUInstanceProfiles(gpu int) ([]nvml.GPUInstanceProfile, error) {
	err := s.view(func(st *simState) error {
		_, err := st.gpu("get GPU instance profiles", gpu)
		return err
	})
	if err != nil {
		return nil, err
	}
	return s.giProfiles(), nil
}

// ciSizes are the compute instance sizes NVML offers, by profile ID
// (COMPUTE_INSTANCE_PROFILE_1_SLICE = 0 ... _7_SLICE = 4).
var ciSizes = []int{1, 2, 3, 4, 7}

// ciProfiles returns the compute instance profiles of a GPU instance of pr:
// every size up to its compute slices.
func ciProfiles(pr mig.Profile) []nvml.ComputeInstanceProfile {
	var out []nvml.ComputeInstanceProfile
	for id, n := range ciSizes {
		if n > pr.ComputeSlices {
			break
		}
		name := pr.Name
		if n < pr.ComputeSlices {
			name = fmt.Sprintf("%dc.%s", n, pr.Name)
		}
		out = append(
			out,
			nvml.ComputeInstanceProfile{
				ID:            id,
				Name:          name,
				SliceCount:    n,
				InstanceCount: pr.ComputeSlices / n,
			},
		)
	}
	return out
}

// ComputeInstanceProfiles lists the compute instance profiles of a GPU
// instance: one per size up to the instance's compute slices.
func (s *Sim) ComputeInstanceProfiles(gpu, gpuInstance int) ([]nvml.ComputeInstanceProfile, error) {
	op := fmt.Sprintf(
		"get compute instance profiles of GPU instance %d on GPU %d",
		gpuInstance,
		gpu,
	)
	var out []nvml.ComputeInstanceProfile
	err := s.view(func(st *simState) error {
		g, err := st.gpu(op, gpu)
		if err != nil {
			return err
		}
		gi := findGI(g, gpuInstance)
		if gi == nil {
			return nvml.NewError(nvml.ErrorNotFound, op, "no such GPU instance")
		}
		pr, _ := s.giProfile(gi.ProfileID)
		out = ciProfiles(pr)
		return nil
	})
	return out, err
}

func findGI(g *simGPU, id int) *nvml.GPUInstance {
	for i := range g.Instances {
		if g.Instances[i].ID == id {
			return &g.Instances[i]
		}
	}
	return nil
}

func cloneGI(gi nvml.GPUInstance) nvml.GPUInstance {
	gi.ComputeInstances = append([]nvml.ComputeInstance(nil), gi.ComputeInstances...)
	return gi
}

// GPUInstances lists the GPU instances on the GPU, by placement start.
func (s *Sim) GPUInstances(gpu int) ([]nvml.GPUInstance, error) {
	var out []nvml.GPUInstance
	err := s.view(func(st *simState) error {
		g, err := st.gpu("get GPU instances", gpu)
		if err != nil {
			return err
		}
		for _, gi := range g.Instances {
			out = append(out, cloneGI(gi))
		}
		return nil
	})
	return out, err
}

// CreateGPUInstance creates a GPU instance after checking, in this order:
// the GPU exists, no injected fault, MIG mode is on (else
// ErrNotSupported), the profile exists and allows the placement (else
// ErrInvalidArgument), and (else ErrInsufficientResources) the placement
// shares no memory slice with another instance, the profile's instance
// count stays within its maximum, at most one "+me" instance exists, and
// the compute slices suffice. The new instance gets the lowest free ID.
func (s *Sim) CreateGPUInstance(gpu, profileID int, at mig.Placement) (nvml.GPUInstance, error) {
	op := fmt.Sprintf(
		"create GPU instance of profile %d at %d:%d on GPU %d",
		profileID,
		at.Start,
		at.Size,
		gpu,
	)
	var out nvml.GPUInstance
	err := s.change(func(st *simState) (bool, error) {
		g, commit, err := st.enter(op, FaultCreateGPUInstance, gpu, true)
		if err != nil {
			return commit, err
		}
		pr, ok := s.giProfile(profileID)
		if !ok {
			return false, nvml.NewError(
				nvml.ErrorInvalidArgument,
				op,
				"no GPU instance profile %d on %s",
				profileID,
				s.product.Name,
			)
		}
		if at.Size != pr.MemorySlices || !containsInt(pr.Starts, at.Start) {
			return false, nvml.NewError(
				nvml.ErrorInvalidArgument,
				op,
				"%s may be placed at %s",
				pr.Name,
				placementsString(pr.Placements()),
			)
		}
		if err := s.fits(g, pr, at); err != nil {
			return false, nvml.NewError(nvml.ErrorInsufficientResources, op, "%s", err)
		}
		out = nvml.GPUInstance{
			GPU:       gpu,
			ID:        lowestFree(g.Instances, func(gi nvml.GPUInstance) int { return gi.ID }, 1),
			ProfileID: profileID,
			Placement: at,
		}
		g.Instances = append(g.Instances, out)
		sort.Slice(
			g.Instances,
			func(i, j int) bool {
				return g.Instances[i].Placement.Start < g.Instances[j].Placement.Start
			},
		)
		return true, nil
	})
	return out, err
}

// fits applies the placement rules to a new instance of pr at at on g. It
// is written independently of mig.Product.Validate, so that tests that
// compare the two compare two implementations.
func (s *Sim) fits(g *simGPU, pr mig.Profile, at mig.Placement) error {
	count, compute := 0, 0
	for _, gi := range g.Instances {
		other, _ := s.giProfile(gi.ProfileID)
		if gi.Placement.Start < at.Start+at.Size &&
			at.Start < gi.Placement.Start+gi.Placement.Size {
			return fmt.Errorf(
				"memory slices %d-%d overlap GPU instance %d (%s at %d:%d)",
				at.Start,
				at.Start+at.Size-1,
				gi.ID,
				other.Name,
				gi.Placement.Start,
				gi.Placement.Size,
			)
		}
		if gi.ProfileID == pr.ID {
			count++
		}
		if pr.MediaExtensions && other.MediaExtensions {
			return fmt.Errorf(
				"GPU instance %d (%s) already holds the media extensions",
				gi.ID,
				other.Name,
			)
		}
		compute += other.ComputeSlices
	}
	if count >= pr.MaxCount {
		return fmt.Errorf("%d instances of %s exist, the most the GPU holds", count, pr.Name)
	}
	if compute+pr.ComputeSlices > s.product.ComputeSlices {
		return fmt.Errorf(
			"%d compute slices in use, %s needs %d of %d",
			compute,
			pr.Name,
			pr.ComputeSlices,
			s.product.ComputeSlices,
		)
	}
	return nil
}

func containsInt(xs []int, x int) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

func placementsString(ps []mig.Placement) string {
	parts := make([]string, len(ps))
	for i, p := range ps {
		parts[i] = fmt.Sprintf("%d:%d", p.Start, p.Size)
	}
	return strings.Join(parts, ", ")
}

// lowestFree returns the lowest ID >= from that no element has.
func lowestFree[T any](xs []T, id func(T) int, from int) int {
	used := map[int]bool{}
	for _, x := range xs {
		used[id(x)] = true
	}
	for used[from] {
		from++
	}
	return from
}

// CreateComputeInstance creates a compute instance with a new MIG UUID.
// It fails with ErrNotFound for a missing GPU instance, ErrNotSupported
// for a profile the GPU instance lacks, and ErrInsufficientResources when
// the profile's count or the GPU instance's compute slices are used up.
func (s *Sim) CreateComputeInstance(gpu, gpuInstance, profileID int) (nvml.ComputeInstance, error) {
	op := fmt.Sprintf(
		"create compute instance of profile %d in GPU instance %d on GPU %d",
		profileID,
		gpuInstance,
		gpu,
	)
	uuid, err := newUUID()
	if err != nil {
		return nvml.ComputeInstance{}, err
	}
	var out nvml.ComputeInstance
	err = s.change(func(st *simState) (bool, error) {
		g, commit, err := st.enter(op, FaultCreateComputeInstance, gpu, true)
		if err != nil {
			return commit, err
		}
		gi := findGI(g, gpuInstance)
		if gi == nil {
			return false, nvml.NewError(nvml.ErrorNotFound, op, "no such GPU instance")
		}
		if profileID < 0 || profileID >= 9 {
			return false, nvml.NewError(
				nvml.ErrorInvalidArgument,
				op,
				"no compute instance profile %d",
				profileID,
			)
		}
		pr, _ := s.giProfile(gi.ProfileID)
		var cp *nvml.ComputeInstanceProfile
		for _, c := range ciProfiles(pr) {
			if c.ID == profileID {
				cp = &c
			}
		}
		if cp == nil {
			return false, nvml.NewError(
				nvml.ErrorNotSupported,
				op,
				"%s has no compute instance profile %d",
				pr.Name,
				profileID,
			)
		}
		var used uint32
		count := 0
		for _, ci := range gi.ComputeInstances {
			used |= ((1 << ci.Placement.Size) - 1) << ci.Placement.Start
			if ci.ProfileID == profileID {
				count++
			}
		}
		if count >= cp.InstanceCount {
			return false, nvml.NewError(
				nvml.ErrorInsufficientResources,
				op,
				"%d compute instances of profile %d exist, the most %s holds",
				count,
				profileID,
				pr.Name,
			)
		}
		start := -1
		mask := uint32(1)<<cp.SliceCount - 1
		for off := 0; off+cp.SliceCount <= pr.ComputeSlices; off += cp.SliceCount {
			if used&(mask<<off) == 0 {
				start = off
				break
			}
		}
		if start < 0 {
			return false, nvml.NewError(
				nvml.ErrorInsufficientResources,
				op,
				"no %d free compute slices in %s",
				cp.SliceCount,
				pr.Name,
			)
		}
		out = nvml.ComputeInstance{
			ID: lowestFree(
				gi.ComputeInstances,
				func(c nvml.ComputeInstance) int { return c.ID },
				0,
			),
			ProfileID: profileID,
			Placement: mig.Placement{Start: start, Size: cp.SliceCount},
			UUID:      "MIG-" + uuid,
		}
		gi.ComputeInstances = append(gi.ComputeInstances, out)
		sort.Slice(
			gi.ComputeInstances,
			func(i, j int) bool { return gi.ComputeInstances[i].ID < gi.ComputeInstances[j].ID },
		)
		return true, nil
	})
	return out, err
}

// DestroyComputeInstance destroys a compute instance; ErrNotFound when it
// or its GPU instance does not exist.
func (s *Sim) DestroyComputeInstance(gpu, gpuInstance, computeInstance int) error {
	op := fmt.Sprintf(
		"destroy compute instance %d of GPU instance %d on GPU %d",
		computeInstance,
		gpuInstance,
		gpu,
	)
	return s.change(func(st *simState) (bool, error) {
		g, commit, err := st.enter(op, FaultDestroyComputeInstance, gpu, false)
		if err != nil {
			return commit, err
		}
		gi := findGI(g, gpuInstance)
		if gi == nil {
			return false, nvml.NewError(nvml.ErrorNotFound, op, "no such GPU instance")
		}
		for i, ci := range gi.ComputeInstances {
			if ci.ID == computeInstance {
				gi.ComputeInstances = append(
					gi.ComputeInstances[:i:i],
					gi.ComputeInstances[i+1:]...)
				return true, nil
			}
		}
		return false, nvml.NewError(nvml.ErrorNotFound, op, "no such compute instance")
	})
}

// DestroyGPUInstance destroys a GPU instance; ErrInUse while it has a
// compute instance, ErrNotFound when it does not exist.
func (s *Sim) DestroyGPUInstance(gpu, gpuInstance int) error {
	op := fmt.Sprintf("destroy GPU instance %d on GPU %d", gpuInstance, gpu)
	return s.change(func(st *simState) (bool, error) {
		g, commit, err := st.enter(op, FaultDestroyGPUInstance, gpu, false)
		if err != nil {
			return commit, err
		}
		for i, gi := range g.Instances {
			if gi.ID != gpuInstance {
				continue
			}
			if n := len(gi.ComputeInstances); n > 0 {
				return false, nvml.NewError(
					nvml.ErrorInUse,
					op,
					"%d compute instances exist in it",
					n,
				)
			}
			g.Instances = append(g.Instances[:i:i], g.Instances[i+1:]...)
			return true, nil
		}
		return false, nvml.NewError(nvml.ErrorNotFound, op, "no such GPU instance")
	})
}

// Close releases nothing: the state stays, as a GPU outlives its driver.
func (s *Sim) Close() error { return nil }
