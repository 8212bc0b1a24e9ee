package driver

import (
	"errors"
	"fmt"
	"sync"

	"github.com/drakit/drakit/examples/nvidia/nvml"
	"github.com/drakit/drakit/mig"
	"github.com/drakit/drakit/statefile"
)

// ErrNotOwned is returned (wrapped) when the lifecycle is asked to create
// or destroy a MIG device the driver has no intent record for: a device an
// administrator made (static MIG) is never touched.
var ErrNotOwned = errors.New("MIG device not owned by this driver")

// Key names a MIG device by what is known before it exists and what
// survives a crash: the GPU, the GPU instance profile and the placement
// start. NVML's GPU instance IDs are reused and the MIG UUID is only known
// after the create, so neither can identify a device in an intent record.
//
// The NVML index a Lifecycle works with changes when the set of GPUs NVML
// sees changes (a GPU bound to vfio-pci, lost or reset away), so a key
// that is kept beyond one process's life (an intent record) names the GPU
// by its UUID as well: Same compares by UUID when both keys have one.
type Key struct {
	// GPU is the GPU's NVML index in the process that made the key.
	GPU int `json:"gpu"`
	// UUID is the GPU's UUID ("GPU-..."); empty in keys that only live
	// in one process.
	UUID string `json:"gpuUUID,omitempty"`
	// ProfileID is the GPU instance profile ID (mig.Profile.ID).
	ProfileID int `json:"profileID"`
	// Start is the placement's first memory slice.
	Start int `json:"start"`
	// Whole names the GPU itself, used whole with MIG mode off, instead
	// of a MIG device (ProfileID and Start are then zero): what a
	// driver records before turning MIG mode off for a full-GPU claim
	// on a GPU it slices otherwise (Lifecycle.SetMode).
	Whole bool `json:"whole,omitempty"`
}

// WholeKey is the key of GPU gpu (with its UUID) used whole.
func WholeKey(gpu int, uuid string) Key { return Key{GPU: gpu, UUID: uuid, Whole: true} }

// String prints e.g. "GPU 0 profile 9 at 4", with the GPU's UUID when
// the key has one, or "GPU 0 whole".
func (k Key) String() string {
	if k.Whole {
		if k.UUID != "" {
			return fmt.Sprintf("GPU %d (%s) whole", k.GPU, k.UUID)
		}
		return fmt.Sprintf("GPU %d whole", k.GPU)
	}
	if k.UUID != "" {
		return fmt.Sprintf("GPU %d (%s) profile %d at %d", k.GPU, k.UUID, k.ProfileID, k.Start)
	}
	return fmt.Sprintf("GPU %d profile %d at %d", k.GPU, k.ProfileID, k.Start)
}

// Same reports whether k and o name the same device: the same profile
// and placement start on the same GPU, by UUID when both keys have one
// and by NVML index otherwise.
func (k Key) Same(o Key) bool {
	if k.Whole != o.Whole || k.ProfileID != o.ProfileID || k.Start != o.Start {
		return false
	}
	if k.UUID != "" && o.UUID != "" {
		return k.UUID == o.UUID
	}
	return k.GPU == o.GPU
}

// Owner tells the lifecycle which MIG devices are the driver's own. The
// driver must make Owns true for a key before it creates the device (an
// intent record, written durably) and keep it true until the device is
// destroyed; everything else on the GPUs is an administrator's.
//
// A Journal is an Owner (an intent recorded before Create, forgotten
// after Destroy). The reference driver (examples/nvidia/driver) owns
// instead every MIG device on the GPUs an administrator made dynamic, a
// decision it records, and uses a Journal for which claims hold which
// device; at start it reconciles both with the claims the runtime holds
// (driver.Reconciler).
type Owner interface {
	Owns(k Key) (bool, error)
}

// OwnerFunc adapts a function to Owner.
type OwnerFunc func(k Key) (bool, error)

// Owns calls f.
func (f OwnerFunc) Owns(k Key) (bool, error) { return f(k) }

// MigDevice is a GPU instance as the lifecycle sees it.
type MigDevice struct {
	// Key is where the device sits.
	Key Key `json:"key"`
	// Profile is the GPU instance profile name, e.g. "3g.40gb".
	Profile string `json:"profile"`
	// GPUInstance is the instance with its compute instances.
	GPUInstance nvml.GPUInstance `json:"gpuInstance"`
	// UUID is the MIG device UUID of its first compute instance; empty for
	// a GPU instance without one.
	UUID string `json:"uuid,omitempty"`
	// Owned is true when the Owner claims it; false for a static device.
	Owned bool `json:"owned"`
}

// Complete reports whether the GPU instance has a compute instance, i.e.
// is a usable MIG device; false is the state a crash between the two
// create calls leaves.
func (d MigDevice) Complete() bool { return len(d.GPUInstance.ComputeInstances) > 0 }

// Static reports whether the device is not the driver's: an
// administrator's, to be published as is and never destroyed.
func (d MigDevice) Static() bool { return !d.Owned }

// Lifecycle creates and destroys MIG devices on an Interface, crash-safely:
// a device is a GPU instance plus one compute instance covering all of its
// compute slices; a failed create leaves nothing behind; destroy is
// idempotent; devices are found by Key; and only devices the Owner claims
// are ever created or destroyed.
type Lifecycle struct {
	nv       nvml.Interface
	owner    Owner
	lockPath string

	// The profiles NVML reports are the GPU product's and never change
	// while the process runs (SetMode drops a GPU's when it changes its
	// mode, to be safe): they are asked once, not at every Create.
	profMu     sync.Mutex
	giProfiles map[int][]nvml.GPUInstanceProfile              // by GPU index
	ciProfiles map[ciProfileKey][]nvml.ComputeInstanceProfile // by GPU index and GPU instance profile
}

// ciProfileKey names the compute instance profiles of every GPU instance
// of one profile on one GPU.
type ciProfileKey struct{ gpu, giProfile int }

// LifecycleOption configures NewLifecycle.
type LifecycleOption func(*Lifecycle) error

// WithLockFile makes every Create, Destroy and Recover, of all processes
// that name the same file, hold an exclusive flock on it for the whole
// operation. Without it, a Recover in a new driver process (a rolling
// update) could take another live process's create in progress, between
// its two calls, for a crash's leftovers and destroy it. The kernel
// releases the lock of a killed process, so its leftovers are recovered.
func WithLockFile(path string) LifecycleOption {
	return func(l *Lifecycle) error {
		if path == "" {
			return errors.New("lock file path is empty")
		}
		l.lockPath = path
		return nil
	}
}

// NewLifecycle returns a lifecycle on nv that consults owner.
func NewLifecycle(nv nvml.Interface, owner Owner, opts ...LifecycleOption) (*Lifecycle, error) {
	if nv == nil || owner == nil {
		return nil, errors.New("new MIG lifecycle: NVML interface and owner are required")
	}
	l := &Lifecycle{nv: nv, owner: owner}
	for _, opt := range opts {
		if err := opt(l); err != nil {
			return nil, fmt.Errorf("new MIG lifecycle: %w", err)
		}
	}
	return l, nil
}

// lock takes the WithLockFile lock; a no-op without one.
func (l *Lifecycle) lock(op string) (func(), error) {
	if l.lockPath == "" {
		return func() {}, nil
	}
	lk, err := statefile.Acquire(l.lockPath)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	return func() { _ = lk.Release() }, nil
}

func (l *Lifecycle) owned(op string, k Key) error {
	ok, err := l.owner.Owns(k)
	if err != nil {
		return fmt.Errorf("%s %s: check ownership: %w", op, k, err)
	}
	if !ok {
		return fmt.Errorf("%s %s: %w (record the intent before creating it)", op, k, ErrNotOwned)
	}
	return nil
}

// Find returns the GPU instance at k, if one exists (with or without a
// compute instance).
func (l *Lifecycle) Find(k Key) (nvml.GPUInstance, bool, error) {
	gis, err := l.nv.GPUInstances(k.GPU)
	if err != nil {
		return nvml.GPUInstance{}, false, fmt.Errorf("find MIG device %s: %w", k, err)
	}
	for _, gi := range gis {
		if gi.ProfileID == k.ProfileID && gi.Placement.Start == k.Start {
			return gi, true, nil
		}
	}
	return nvml.GPUInstance{}, false, nil
}

// profile returns the GPU instance profile k names.
func (l *Lifecycle) profile(op string, k Key) (nvml.GPUInstanceProfile, error) {
	ps, err := cached(&l.profMu, &l.giProfiles, k.GPU, func() ([]nvml.GPUInstanceProfile, error) {
		return l.nv.GPUInstanceProfiles(k.GPU)
	})
	if err != nil {
		return nvml.GPUInstanceProfile{}, fmt.Errorf("%s %s: %w", op, k, err)
	}
	for _, p := range ps {
		if p.ID == k.ProfileID {
			return p, nil
		}
	}
	return nvml.GPUInstanceProfile{}, fmt.Errorf("%s %s: %w", op, k, nvml.NewError(nvml.ErrorInvalidArgument, "get GPU instance profile", "GPU %d has no profile %d", k.GPU, k.ProfileID))
}

// Create makes the MIG device at k: the GPU instance at the placement,
// then a compute instance over all its compute slices. The Owner must
// already claim k (ErrNotOwned otherwise). When the compute instance
// fails, the GPU instance is destroyed again, so a failed Create leaves
// nothing. Create is idempotent: a complete device at k is returned as
// is, and a GPU instance left without its compute instance (a crash in an
// earlier Create) is completed. NVML's errors come through wrapped, so
// errors.Is(err, ErrInsufficientResources) tells a full GPU and
// errors.Is(err, ErrNotSupported) a GPU with MIG mode off.
//
// The GPU instance is created first and looked for only when NVML
// refuses the placement as taken (ErrInsufficientResources), so the
// common case costs NVML the two creates.
func (l *Lifecycle) Create(k Key) (MigDevice, error) {
	const op = "create MIG device"
	unlock, err := l.lock(op)
	if err != nil {
		return MigDevice{}, err
	}
	defer unlock()
	if k.Whole {
		return MigDevice{}, fmt.Errorf("%s %s: %w: a whole GPU is no MIG device (SetMode)", op, k, nvml.ErrInvalidArgument)
	}
	if err := l.owned(op, k); err != nil {
		return MigDevice{}, err
	}
	prof, err := l.profile(op, k)
	if err != nil {
		return MigDevice{}, err
	}
	dev := MigDevice{Key: k, Profile: prof.Name, Owned: true}
	size := 0
	if len(prof.Placements) > 0 {
		size = prof.Placements[0].Size
	}
	gi, err := l.nv.CreateGPUInstance(k.GPU, k.ProfileID, mig.Placement{Start: k.Start, Size: size})
	if errors.Is(err, nvml.ErrInsufficientResources) {
		// Taken: by this device (an earlier Create, complete or cut
		// short by a crash) or by another, which is the error.
		found, ok, ferr := l.Find(k)
		switch {
		case ferr != nil:
			return MigDevice{}, errors.Join(fmt.Errorf("%s %s: %w", op, k, err), ferr)
		case ok && len(found.ComputeInstances) > 0:
			dev.GPUInstance, dev.UUID = found, found.ComputeInstances[0].UUID
			return dev, nil
		case ok:
			gi, err = found, nil
		}
	}
	if err != nil {
		return MigDevice{}, fmt.Errorf("%s %s: %w", op, k, err)
	}
	ci, err := l.createCI(gi, prof)
	if err != nil {
		if rerr := l.nv.DestroyGPUInstance(k.GPU, gi.ID); rerr != nil && !errors.Is(rerr, nvml.ErrNotFound) {
			return MigDevice{}, fmt.Errorf("%s %s: %w; roll back GPU instance %d: %w (Recover undoes it)", op, k, err, gi.ID, rerr)
		}
		return MigDevice{}, fmt.Errorf("%s %s (GPU instance rolled back): %w", op, k, err)
	}
	gi.ComputeInstances = append(gi.ComputeInstances, ci)
	dev.GPUInstance, dev.UUID = gi, ci.UUID
	return dev, nil
}

// createCI creates the compute instance that covers all of gi's compute
// slices: of the compute instance profiles with the GPU instance's slice
// count, the lowest ID (what "nvidia-smi mig -cgi ... -C" creates).
func (l *Lifecycle) createCI(gi nvml.GPUInstance, prof nvml.GPUInstanceProfile) (nvml.ComputeInstance, error) {
	ck := ciProfileKey{gpu: gi.GPU, giProfile: gi.ProfileID}
	cps, err := cached(&l.profMu, &l.ciProfiles, ck, func() ([]nvml.ComputeInstanceProfile, error) {
		return l.nv.ComputeInstanceProfiles(gi.GPU, gi.ID)
	})
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
		return nvml.ComputeInstance{}, nvml.NewError(nvml.ErrorNotSupported, fmt.Sprintf("create compute instance in GPU instance %d on GPU %d", gi.ID, gi.GPU), "no compute instance profile with %d slices", prof.SliceCount)
	}
	return l.nv.CreateComputeInstance(gi.GPU, gi.ID, best)
}

// Destroy removes the MIG device at k: its compute instances, then its
// GPU instance. A device that is already gone, wholly or in part, is
// success. The Owner must claim k (ErrNotOwned otherwise), so an
// administrator's device is never destroyed; forget the intent only after
// Destroy returned nil.
func (l *Lifecycle) Destroy(k Key) error {
	const op = "destroy MIG device"
	unlock, err := l.lock(op)
	if err != nil {
		return err
	}
	defer unlock()
	if k.Whole {
		return fmt.Errorf("%s %s: %w: a whole GPU is no MIG device (SetMode)", op, k, nvml.ErrInvalidArgument)
	}
	if err := l.owned(op, k); err != nil {
		return err
	}
	gi, found, err := l.Find(k)
	if err != nil || !found {
		return err
	}
	return l.destroy(op, gi)
}

// SetMode makes MIG mode enabled current on the GPU of k (a WholeKey the
// Owner claims; ErrNotOwned otherwise), obeying the product's rules:
// a GPU that already is in that mode is left alone (SetMode is
// idempotent, so a driver that crashed half-way runs it again); the mode
// changes only while the GPU has no GPU instance (ErrInUse, naming
// them); and a change that stays pending (A100, or a GPU NVML could not
// activate) is made current by a GPU reset. The backend must be a
// ModeSetter (ErrNotSupported otherwise). Each step reads the GPU's
// mode afresh, so a crash between the request and the reset is finished
// by the next call.
func (l *Lifecycle) SetMode(k Key, enabled bool) error {
	op := fmt.Sprintf("turn MIG mode %s", map[bool]string{true: "on", false: "off"}[enabled])
	unlock, err := l.lock(op)
	if err != nil {
		return err
	}
	defer unlock()
	if err := l.owned(op, k); err != nil {
		return err
	}
	m, err := l.nv.MigMode(k.GPU)
	if err != nil {
		return fmt.Errorf("%s on %s: %w", op, k, err)
	}
	if m.Current == enabled && m.Pending == enabled {
		return nil
	}
	ms, ok := l.nv.(nvml.ModeSetter)
	if !ok {
		return fmt.Errorf("%s on %s: %w: this NVML backend cannot change MIG mode", op, k, nvml.ErrNotSupported)
	}
	l.forgetProfiles(k.GPU)
	if m.Pending != enabled {
		if m, err = ms.SetMigMode(k.GPU, enabled); err != nil {
			if errors.Is(err, nvml.ErrInUse) {
				if gis, lerr := l.nv.GPUInstances(k.GPU); lerr == nil && len(gis) > 0 {
					return fmt.Errorf("%s on %s: %w (its %d GPU instances must be destroyed first)", op, k, err, len(gis))
				}
			}
			return fmt.Errorf("%s on %s: %w", op, k, err)
		}
	}
	if m.Current != enabled {
		if err := ms.ResetGPU(k.GPU); err != nil {
			return fmt.Errorf("%s on %s: the change is pending until a GPU reset: %w", op, k, err)
		}
		if m, err = l.nv.MigMode(k.GPU); err != nil {
			return fmt.Errorf("%s on %s: %w", op, k, err)
		}
		if m.Current != enabled {
			return fmt.Errorf("%s on %s: still %+v after the GPU reset", op, k, m)
		}
	}
	return nil
}

// cached returns (*m)[k], asking fetch and keeping its answer when there
// is none; mu guards *m, and is not held while fetch runs.
func cached[K comparable, V any](mu *sync.Mutex, m *map[K]V, k K, fetch func() (V, error)) (V, error) {
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
func (l *Lifecycle) forgetProfiles(gpu int) {
	l.profMu.Lock()
	defer l.profMu.Unlock()
	delete(l.giProfiles, gpu)
	for ck := range l.ciProfiles {
		if ck.gpu == gpu {
			delete(l.ciProfiles, ck)
		}
	}
}

func (l *Lifecycle) destroy(op string, gi nvml.GPUInstance) error {
	k := Key{GPU: gi.GPU, ProfileID: gi.ProfileID, Start: gi.Placement.Start}
	for _, ci := range gi.ComputeInstances {
		if err := l.nv.DestroyComputeInstance(gi.GPU, gi.ID, ci.ID); err != nil && !errors.Is(err, nvml.ErrNotFound) {
			return fmt.Errorf("%s %s: %w", op, k, err)
		}
	}
	if err := l.nv.DestroyGPUInstance(gi.GPU, gi.ID); err != nil && !errors.Is(err, nvml.ErrNotFound) {
		return fmt.Errorf("%s %s: %w", op, k, err)
	}
	return nil
}

// List returns every GPU instance on every GPU in MIG mode, each marked
// owned or static by the Owner, by GPU and placement. A GPU that cannot
// be read is left out and its error returned, joined, with the devices of
// the others.
func (l *Lifecycle) List() ([]MigDevice, error) {
	gpus, err := l.nv.GPUs()
	if err != nil {
		return nil, fmt.Errorf("list MIG devices: %w", err)
	}
	var out []MigDevice
	var unread error
	for _, g := range gpus {
		if g.Err != nil {
			unread = errors.Join(unread, fmt.Errorf("list MIG devices of GPU %d: %w", g.Index, g.Err))
			continue
		}
		mode, err := l.nv.MigMode(g.Index)
		if errors.Is(err, nvml.ErrNotSupported) || (err == nil && !mode.Current) {
			continue
		}
		if err != nil {
			unread = errors.Join(unread, fmt.Errorf("list MIG devices of GPU %d: %w", g.Index, err))
			continue
		}
		gis, err := l.nv.GPUInstances(g.Index)
		if err != nil {
			unread = errors.Join(unread, fmt.Errorf("list MIG devices of GPU %d: %w", g.Index, err))
			continue
		}
		if len(gis) == 0 {
			continue
		}
		profs, err := l.nv.GPUInstanceProfiles(g.Index)
		if err != nil {
			return nil, fmt.Errorf("list MIG devices: %w", err)
		}
		names := map[int]string{}
		for _, p := range profs {
			names[p.ID] = p.Name
		}
		for _, gi := range gis {
			k := Key{GPU: g.Index, ProfileID: gi.ProfileID, Start: gi.Placement.Start}
			owned, err := l.owner.Owns(k)
			if err != nil {
				return nil, fmt.Errorf("list MIG devices: check ownership of %s: %w", k, err)
			}
			d := MigDevice{Key: k, Profile: names[gi.ProfileID], GPUInstance: gi, Owned: owned}
			if len(gi.ComputeInstances) > 0 {
				d.UUID = gi.ComputeInstances[0].UUID
			}
			out = append(out, d)
		}
	}
	return out, unread
}

// Recovery is what Recover found and did.
type Recovery struct {
	// Undone are the driver's half-made devices (GPU instance without a
	// compute instance) that Recover destroyed.
	Undone []Key `json:"undone,omitempty"`
	// Owned are the driver's complete devices, left for the driver's
	// checkpoint to keep or undo.
	Owned []MigDevice `json:"owned,omitempty"`
	// Static are the administrator's devices, complete or not, untouched.
	Static []MigDevice `json:"static,omitempty"`
}

// Recover runs at driver start, before any Create: it destroys the
// driver's own GPU instances that lack a compute instance (a crash between
// the two create calls; the claim's prepare will run again) and leaves
// everything else. A GPU that cannot be read does not stop the others'
// recovery; its error is returned after it. It never touches a static device. Where two driver
// processes can overlap, give both WithLockFile.
func (l *Lifecycle) Recover() (Recovery, error) {
	var r Recovery
	unlock, err := l.lock("recover MIG devices")
	if err != nil {
		return r, err
	}
	defer unlock()
	devs, unread := l.List() // the GPUs that can be read are recovered
	for _, d := range devs {
		switch {
		case d.Static():
			r.Static = append(r.Static, d)
		case d.Complete():
			r.Owned = append(r.Owned, d)
		default:
			if err := l.destroy("recover MIG devices: undo half-made", d.GPUInstance); err != nil {
				return r, err
			}
			r.Undone = append(r.Undone, d.Key)
		}
	}
	if unread != nil {
		return r, fmt.Errorf("recover MIG devices: %w", unread)
	}
	return r, nil
}
