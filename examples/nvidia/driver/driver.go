package driver

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/klog/v2"

	"github.com/drakit/drakit/device"
	kit "github.com/drakit/drakit/driver"
	"github.com/drakit/drakit/examples/nvidia/nvml"
	"github.com/drakit/drakit/mig"
	"github.com/drakit/drakit/partition/ledger"
	"github.com/drakit/drakit/partition/lifecycle"
	"github.com/drakit/drakit/topology"
)

// Driver is the NVIDIA vendor logic that the drakit runtime runs: it
// discovers the GPUs (kit.Discoverer), creates and destroys dynamic MIG
// devices around a claim (kit.ClaimPreparer), hands containers their
// devices (kit.Preparer, kit.ClaimEditor) and turns NVML's XID events into
// device health. Create it with New and run it with Options:
//
//	d, err := driver.New(nv, node, driver.WithStateDir(dir))
//	k, err := kit.New(driver.DriverName, append(d.Options(), moreOptions...)...)
//	err = k.Run(ctx)
type Driver struct {
	nv       nvml.Interface
	node     string
	o        options
	versions versions
	// lc is the lifecycle of the dynamic MIG devices (package
	// partition/lifecycle) on tool, the NVML binding.
	lc   *lifecycle.Manager
	tool *migTool

	// gpus are the GPUs (read through hw): replaced, never changed in
	// place, when a GPU unreadable at start answers again.
	gpuMu sync.Mutex
	gpus  []gpuInfo

	kick chan struct{} // inventory changed; capacity 1
	stop chan struct{} // closed by Close

	health monitor

	// warnings are the problems New confined to one GPU (Warnings).
	warnings []Warning

	// layoutLog is what the layout publication (WithMIGLayout) last logged.
	layoutLog ledger.SyncLog

	// mps runs the shared GPUs' MPS control daemons (mps.go).
	mps       *mpsManager
	mpsCancel context.CancelFunc

	mu   sync.Mutex
	devs map[string]devInfo // the last inventory's devices by name
	last *device.Inventory  // the last inventory, for the devices of a GPU lost since
}

var (
	_ kit.Discoverer    = (*Driver)(nil)
	_ kit.Preparer      = (*Driver)(nil)
	_ kit.ClaimPreparer = (*Driver)(nil)
	_ kit.ClaimEditor   = (*Driver)(nil)
)

// versions are the host's NVIDIA software versions in semver form.
type versions struct{ driver, cuda string }

// gpuInfo is what does not change about a GPU while the driver runs.
type gpuInfo struct {
	nvml.GPU
	cc string // compute capability, semver
	// product is the GPU's MIG geometry from NVML; nil without MIG.
	product  *mig.Product
	profiles []string // advertised profiles (dynamic MIG)
	topo     *topology.PCIDevice
	// vgpuGuest is set for a vGPU guest's GPU, which cannot change its
	// MIG mode (see wholeOK).
	vgpuGuest bool
	// others is what NVML last said of the processes holding it (a
	// GPU with MIG; Driver.wholeNow).
	others *others
	// broken is why the GPU could not be read at start: it is published
	// whole from what NVML did say, with the health taint of a lost GPU,
	// and read again until it answers (lostgpu.go).
	broken error
}

// devInfo is what the driver needs to know of a published device.
type devInfo struct {
	pool    string // the pool it is published in
	gpu     int
	mode    string        // ModeFull, ModeStatic, ModeDynamic
	typ     string        // TypeGPU, TypeMIG
	uuid    string        // full GPU and static MIG
	profile string        // MIG
	key     Key           // a MIG device's place, by NVML index (the health book's)
	part    lifecycle.Key // a dynamic device's key in the lifecycle
	gi, ci  int           // NVML's GPU and compute instance IDs of a MIG device that exists
}

// Key is a MIG device's place on a GPU by this process's NVML index, as
// an XID confined to a GPU instance names it (the health monitor's
// book).
type Key struct {
	// GPU is the GPU's NVML index.
	GPU int `json:"gpu"`
	// UUID is the GPU's UUID; the health book's keys have none.
	UUID string `json:"gpuUUID,omitempty"`
	// ProfileID is the GPU instance profile ID (mig.Profile.ID).
	ProfileID int `json:"profileID"`
	// Start is the placement's first memory slice.
	Start int `json:"start"`
}

// Option configures New.
type Option func(*options) error

// hostProc is where this process reads the kernel's view of the node's
// NVIDIA devices (/proc/devices, /proc/driver/nvidia/capabilities):
// kernel-global files, the same in every container; tests set a fake
// one.
var hostProc = "/proc"

type options struct {
	profiles []string
	stateDir string
	// updateOwner: the state folder is shared with the other pod of a
	// rolling update of this owner (WithRollingUpdate); empty: alone.
	updateOwner string
	sysfsRoot   string
	simulated   *bool

	republishDelay    time.Duration
	republishInterval time.Duration
	heartbeat         time.Duration
	fullMIG           bool
	noWholeDynamic    bool
	procRoot          string // hostProc
	dynamicGPUs       []string
	ignoredXIDs       map[uint64]bool
	root              DriverRoot
	warn              func(Warning)   // WithWarnings
	editor            ContainerEditor // nil: nodeEditor
	layoutSrc         LayoutLedger    // WithMIGLayout; nil: every placement

	// Shared GPUs (shared.go).
	sharedGPUs       []string
	shareMemStep     resource.Quantity
	shareMem         resource.Quantity
	shareComputeStep int64
	shareCompute     int64
	mpsControl       *MPSControl
	mpsPoll          time.Duration // how often dead daemons are looked for; 0: a second
}

// WithFullMIGAttributes publishes dynamic MIG devices with every GPU fact
// that full GPUs and static MIG devices carry (brand, architecture,
// compute capability, driver and CUDA versions, the PCI bus ID and NUMA
// node, profileID and placementSize): 17 attributes instead of the
// default 8. At fleet scale that doubles the slices and costs the
// scheduler CPU on every node for every pod (package mig's doc: 16
// attributes per device cost 1.24x the CPU of 8); take it only when claims
// select dynamic MIG devices on those facts.
func WithFullMIGAttributes() Option {
	return func(o *options) error { o.fullMIG = true; return nil }
}

// WithLeanMIGAttributes is the default now and changes nothing.
//
// Deprecated: dynamic MIG devices carry the lean set by default (see
// Driver.Inventory), migMode and pcieRoot included; WithFullMIGAttributes
// is the opposite choice.
func WithLeanMIGAttributes() Option {
	return func(o *options) error { o.fullMIG = false; return nil }
}

// DefaultRepublishDelay is how long after a MIG device was made or
// destroyed the slices are republished (WithRepublishDelay).
const DefaultRepublishDelay = lifecycle.DefaultRepublishDelay

// WithRepublishDelay sets how long after a MIG device was made or
// destroyed the driver republishes its slices in the planner's new order
// (default DefaultRepublishDelay): the republish then runs after the
// prepare or unprepare that caused it has answered the kubelet rather
// than beside it, and changes within the delay share one republish. The
// order is only the scheduler's preference; which devices are free the
// scheduler knows from the claims, so a late republish costs placement
// quality for a moment, never correctness.
func WithRepublishDelay(d time.Duration) Option {
	return func(o *options) error {
		if d < 0 {
			return fmt.Errorf("republish delay %v is negative", d)
		}
		o.republishDelay = d
		return nil
	}
}

// DefaultRepublishInterval is the least time between two republishes
// that MIG changes cause (WithRepublishInterval).
const DefaultRepublishInterval = lifecycle.DefaultRepublishInterval

// WithRepublishInterval sets the least time between two republishes
// that MIG changes cause (default DefaultRepublishInterval; zero: no
// bound beyond the republish delay). The first change after a quiet
// interval is republished after the republish delay; under sustained
// churn the changes of one interval share one republish. Each republish
// reads every GPU, rewrites the changed GPU's slice through the API
// server and reaches every watcher of ResourceSlices, the scheduler
// included: at 150 MIG prepare+unprepare cycles a second on one node,
// the delay alone made ten slice writes a second. A device a change
// frees is allocatable when its republish comes (fit-only publishing),
// so the interval bounds that wait under churn.
func WithRepublishInterval(d time.Duration) Option {
	return func(o *options) error {
		if d < 0 {
			return fmt.Errorf("republish interval %v is negative", d)
		}
		o.republishInterval = d
		return nil
	}
}

// WithHealthHeartbeat sets how often Watch reports every device's health
// again while NVML's event stream is alive (default
// DefaultHealthHeartbeat). Keep it well under the runtime's health timeout
// (driver.WithHealthTimeout), or healthy devices decay to Unknown between
// reports.
func WithHealthHeartbeat(d time.Duration) Option {
	return func(o *options) error {
		if d <= 0 {
			return fmt.Errorf("health heartbeat %v is not positive", d)
		}
		o.heartbeat = d
		return nil
	}
}

// WithProfiles sets the MIG profiles advertised on dynamic-MIG GPUs
// (default: mig.DefaultProfiles of the GPU's product). Names a GPU does
// not have are skipped on that GPU; none of them on any MIG GPU is an
// error.
func WithProfiles(names []string) Option {
	return func(o *options) error {
		for _, n := range names {
			if _, err := mig.ParseProfileName(n); err != nil {
				return err
			}
		}
		o.profiles = append([]string(nil), names...)
		return nil
	}
}

// WithStateDir sets the driver's own folder (required): the state of the
// MIG devices' lifecycle (package partition/lifecycle: the intent
// journal, the dynamic GPUs recorded, the lock that refuses a second
// driver process on the folder), the devices files mounted into
// containers and, in simulation, the fake sysfs. It must be on the host
// (containers mount files from it) and survive driver restarts.
func WithStateDir(dir string) Option {
	return func(o *options) error {
		if dir == "" {
			return errors.New("state folder is empty")
		}
		o.stateDir = dir
		return nil
	}
}

// WithRollingUpdate lets this driver share its state folder with the
// other pod of its rolling update: the DaemonSet named owner (its
// namespace/name, the chart's --rolling-update-owner), whose pods run the
// runtime with driver.WithRollingUpdate and the same
// driver.WithRollingUpdateOwner. The lifecycle's instance lock then admits
// the two pods of the update, refuses a third process and a process of
// another owner (a second release of the driver on the node), and the work
// on each GPU is serialized between the two (lifecycle.WithRollingUpdate).
// Without it, the new pod of a surge update fails at start while the old
// one holds the folder.
func WithRollingUpdate(owner string) Option {
	return func(o *options) error {
		if owner == "" {
			return errors.New("rolling update: empty owner")
		}
		o.updateOwner = owner
		return nil
	}
}

// WithSysfsRoot reads the GPUs' PCI topology from dir instead of /sys.
// In simulation the default is a fake sysfs of the simulated server
// written into the state folder.
func WithSysfsRoot(dir string) Option {
	return func(o *options) error { o.sysfsRoot = dir; return nil }
}

// simulatedMachine is an NVML backend that models a whole machine, the
// simulator (nvmlsim.Sim): the driver writes the machine's fake sysfs
// from it and, by default, runs containers without real device files.
type simulatedMachine interface {
	WriteSysfs(dir string) error
}

// WithSimulatedContainers chooses the container edits: true gives
// containers only environment variables and the devices file (no device
// nodes, which do not exist); false adds /dev/nvidia* nodes. The default
// is true exactly for a simulated NVML (one with a WriteSysfs method, as
// nvmlsim.Sim has).
func WithSimulatedContainers(simulated bool) Option {
	return func(o *options) error { o.simulated = &simulated; return nil }
}

// New reads the GPUs from nv, opens the MIG devices' lifecycle in the
// state folder with the dynamic GPUs (WithDynamicGPUs; a second driver
// process on the folder is refused with lifecycle.ErrStateInUse) and
// returns the driver for node. MIG devices on the dynamic GPUs are the
// driver's: once the runtime has recovered its checkpoint, Reconcile
// destroys those no held claim names, half-made ones included. The driver
// never touches a MIG device on another GPU, except those it made on a
// GPU dropped from the list (see WithDynamicGPUs). Close releases the
// state folder.
func New(nv nvml.Interface, node string, opts ...Option) (*Driver, error) {
	o := options{procRoot: hostProc, root: DriverRoot{Host: "/", Container: "/"},
		republishDelay: DefaultRepublishDelay, republishInterval: DefaultRepublishInterval,
		heartbeat:    DefaultHealthHeartbeat,
		shareMemStep: DefaultShareMemoryStep, shareMem: DefaultShareMemory,
		shareComputeStep: DefaultShareComputeStep, shareCompute: DefaultShareCompute}
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return nil, fmt.Errorf("new NVIDIA driver: %w", err)
		}
	}
	if o.ignoredXIDs == nil {
		_ = WithIgnoredXIDs(DefaultIgnoredXIDs()...)(&o)
	}
	switch {
	case nv == nil:
		return nil, errors.New("new NVIDIA driver: no NVML")
	case node == "":
		return nil, errors.New("new NVIDIA driver: node name is empty")
	case o.stateDir == "":
		return nil, errors.New("new NVIDIA driver: WithStateDir is required")
	}
	sim, isSim := nv.(simulatedMachine)
	if o.simulated == nil {
		o.simulated = &isSim
	}
	if err := os.MkdirAll(filepath.Join(o.stateDir, "claims"), 0o755); err != nil {
		return nil, fmt.Errorf("new NVIDIA driver: %w", err)
	}
	if o.sysfsRoot == "" && isSim {
		o.sysfsRoot = filepath.Join(o.stateDir, "sim-sysfs")
		err := os.RemoveAll(o.sysfsRoot)
		if err == nil {
			err = sim.WriteSysfs(o.sysfsRoot)
		}
		if err != nil {
			if _, serr := os.Stat(o.sysfsRoot); serr != nil {
				return nil, fmt.Errorf("new NVIDIA driver: write the simulated sysfs: %w", err)
			}
			// A read-only state folder: the one written before serves.
			klog.Background().
				Error(
					err,
					"Could not rewrite the simulated sysfs; using the one there",
					"path",
					o.sysfsRoot,
				)
		}
	}
	d := &Driver{
		nv:   nv,
		node: node,
		o:    o,
		kick: make(chan struct{}, 1),
		stop: make(chan struct{}),
		devs: map[string]devInfo{},
	}
	if d.o.editor == nil {
		d.o.editor = nodeEditor{d}
	}
	if err := d.readHardware(); err != nil {
		return nil, fmt.Errorf("new NVIDIA driver: %w", err)
	}
	dynamic, record, err := d.resolveDynamic()
	if err != nil {
		return nil, fmt.Errorf("new NVIDIA driver: %w", err)
	}
	d.tool = &migTool{nv: nv, d: d}
	// The journal is not fsynced: a power loss destroys MIG devices too
	// (a GPU comes up from a reset without them).
	lopts := []lifecycle.Option{lifecycle.WithDynamicCards(dynamic...), lifecycle.WithoutFsync(),
		lifecycle.WithRepublish(d.kickWatch, o.republishDelay, o.republishInterval)}
	if o.updateOwner != "" {
		lopts = append(lopts, lifecycle.WithRollingUpdate(DriverName, o.updateOwner))
	}
	d.lc, err = lifecycle.Open(o.stateDir, d.tool, d.keyOf, lopts...)
	if err != nil {
		return nil, fmt.Errorf("new NVIDIA driver: %w", err)
	}
	// Under the state folder's lock: what each index named stays
	// recorded beside the lifecycle's record of the dynamic GPUs.
	if err := writeSelectors(o.stateDir, record); err != nil {
		// The next start resolves the indexes not recorded again.
		klog.Background().Error(err, "Could not record which GPU each dynamic MIG GPU index names")
	}
	if err := d.openMPS(dynamic); err != nil {
		_ = d.lc.Close()
		return nil, fmt.Errorf("new NVIDIA driver: %w", err)
	}
	d.watchBroken()
	if n, ok := o.layoutSrc.(changeNotifier); ok {
		n.OnChange(d.changed)
	}
	return d, nil
}

// Close stops the driver's background work and releases its state
// folder; the driver must not be used after.
func (d *Driver) Close() error {
	select {
	case <-d.stop:
		return nil
	default:
		close(d.stop)
	}
	// The MPS daemons keep serving their shares' containers: only their
	// watch stops.
	d.mpsCancel()
	return d.lc.Close()
}

// readHardware reads what does not change: versions, GPUs, MIG
// geometries and PCI topology.
func (d *Driver) readHardware() error {
	sys, err := d.nv.System()
	if err != nil {
		return err
	}
	if d.versions.driver, err = device.NormalizeVersion(sys.DriverVersion); err != nil {
		return fmt.Errorf("driver version: %w", err)
	}
	if d.versions.cuda, err = device.NormalizeVersion(sys.CUDAVersion); err != nil {
		return fmt.Errorf("CUDA version: %w", err)
	}
	gpus, err := d.nv.GPUs()
	if err != nil {
		return err
	}
	anyMIG, anyProfile := false, false
	for _, g := range gpus {
		gi := gpuInfo{GPU: g}
		err := g.Err // NVML could not read it
		if err == nil {
			err = d.readGPU(&gi, &anyMIG, &anyProfile)
		}
		if err != nil {
			// One unreadable GPU must not stop the node's driver (pods on
			// the others could not even be unprepared): it is published
			// tainted and read again until it answers.
			gi = gpuInfo{GPU: g, broken: err}
			klog.Background().
				Error(
					err,
					"GPU cannot be read: published tainted until it answers",
					"gpu",
					g.Index,
					"uuid",
					g.UUID,
				)
		}
		d.gpus = append(d.gpus, gi)
	}
	if anyMIG && d.o.profiles != nil && !anyProfile {
		return fmt.Errorf("none of the MIG profiles %v exists on this node's GPUs", d.o.profiles)
	}
	return nil
}

// readGPU reads what does not change about one GPU.
func (d *Driver) readGPU(gi *gpuInfo, anyMIG, anyProfile *bool) error {
	g := gi.GPU
	var err error
	if gi.cc, err = device.NormalizeVersion(g.CUDAComputeCapability); err != nil {
		return fmt.Errorf("GPU %d compute capability: %w", g.Index, err)
	}
	if d.o.sysfsRoot != "" || d.o.simulated == nil || !*d.o.simulated {
		var ropts []topology.ReadOption
		if d.o.sysfsRoot != "" {
			ropts = append(ropts, topology.WithSysfsRoot(d.o.sysfsRoot))
		}
		if t, err := topology.ReadPCIDevice(g.PCIBusID, ropts...); err == nil {
			gi.topo = &t
		} else {
			klog.Background().Error(
				err, "GPU published without PCI topology attributes", "gpu", g.Index,
			)
		}
	}
	_, err = d.nv.MigMode(g.Index)
	switch {
	case errors.Is(err, nvml.ErrNotSupported):
	case err != nil:
		return fmt.Errorf("GPU %d MIG mode: %w", g.Index, err)
	default:
		profs, err := d.nv.GPUInstanceProfiles(g.Index)
		if err != nil {
			return fmt.Errorf("GPU %d MIG profiles: %w", g.Index, err)
		}
		if gi.product, err = nvml.MigProduct(g.ProductName, profs); err != nil {
			return fmt.Errorf("GPU %d: %w", g.Index, err)
		}
		if v, ok := d.nv.(vgpuProbe); ok {
			if gi.vgpuGuest, err = v.VGPUGuest(g.Index); err != nil {
				return fmt.Errorf("GPU %d: %w", g.Index, err)
			}
		}
		*anyMIG = true
		gi.others = &others{}
		gi.profiles = advertised(gi.product, d.o.profiles)
		*anyProfile = *anyProfile || len(gi.profiles) > 0
	}
	return nil
}

// advertised is the profiles of p to publish: want's that p has, or by
// default mig.DefaultProfiles(p).
func advertised(p *mig.Product, want []string) []string {
	if want == nil {
		return mig.DefaultProfiles(p)
	}
	var out []string
	for _, w := range want {
		if pr, err := p.Profile(w); err == nil {
			out = append(out, pr.Name)
		}
	}
	return out
}

// Options returns the drakit runtime options that make it run this
// driver on its node: discoverer, preparer, node name, device kinds
// (DeviceKind) and its own metrics (Collector). Add the
// client, folders and anything else (driverflag's Options, a test's).
func (d *Driver) Options() []kit.Option {
	return []kit.Option{kit.WithDiscoverer(d), kit.WithPreparer(d), kit.WithNodeName(d.node),
		kit.WithDeviceKind(DeviceKind), kit.WithCollectors(d.Collector())}
}

// vgpuProbe is a backend that tells a vGPU guest's GPU (nvml.Real).
type vgpuProbe interface {
	VGPUGuest(gpu int) (bool, error)
}

// changed makes Watch report an inventory change after the republish
// delay, no sooner than the republish interval after the last one; the
// changes until then share one republish (lifecycle.WithRepublish, which
// also republishes after every MIG device made or destroyed: the slices'
// order follows mig.Preference).
func (d *Driver) changed() { d.lc.Changed() }

// kickWatch makes Watch read the inventory and report it now.
func (d *Driver) kickWatch() {
	select {
	case d.kick <- struct{}{}:
	default:
	}
}

// deviceInfo returns what the last inventory said about a device.
func (d *Driver) deviceInfo(name string) (devInfo, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	i, ok := d.devs[name]
	return i, ok
}

// lookup is the one judge of whether a device is this driver's: what the
// last inventory said, or for a device of a dynamic GPU its name alone
// (the GPU whole, or an advertised profile at one of its placements). Fit-only
// publishing withdraws and restores dynamic MIG devices on every create
// and destroy, and the runtime counts a device withdrawn a moment ago as
// published (the scheduler allocates from the slices it last saw): such a
// device is not refused here. Whether it can be made NVML says at
// Create (ErrInsufficientResources when another device overlaps it).
func (d *Driver) lookup(name string) (devInfo, bool) {
	if i, ok := d.deviceInfo(name); ok {
		return i, true
	}
	ref, err := mig.ParseDeviceName(name)
	gpus := d.hw()
	if err != nil || ref.GPU < 0 || ref.GPU >= len(gpus) {
		return devInfo{}, false
	}
	g := &gpus[ref.GPU]
	if !d.dynamic(g) || g.product == nil || g.broken != nil {
		return devInfo{}, false
	}
	if ref.Profile == "" {
		if ok, _ := d.wholeNow(g); !ok {
			return devInfo{}, false
		}
		return d.wholeInfo(g), true
	}
	pr, err := g.product.Profile(ref.Profile)
	if err != nil || !slices.Contains(g.profiles, pr.Name) ||
		!slices.Contains(pr.Starts, ref.Start) {
		return devInfo{}, false
	}
	return devInfo{
		gpu:     g.Index,
		mode:    ModeDynamic,
		typ:     TypeMIG,
		profile: pr.Name,
		key:     Key{GPU: g.Index, UUID: g.UUID, ProfileID: pr.ID, Start: ref.Start},
		part:    lifecycle.Key{Card: g.UUID, Profile: pr.Name, Start: ref.Start},
	}, true
}

// wholeInfo is the device of dynamic GPU g used whole (MIG mode off).
func (d *Driver) wholeInfo(g *gpuInfo) devInfo {
	return devInfo{
		pool: mig.GPUPoolName(d.node, g.Index),
		gpu:  g.Index,
		mode: ModeDynamic,
		typ:  TypeGPU,
		uuid: g.UUID,
		part: lifecycle.WholeCard(g.UUID),
	}
}

// ensureInventory makes sure deviceInfo knows the devices (a prepare may
// come before the runtime's first Inventory call returns here).
func (d *Driver) ensureInventory(ctx context.Context) error {
	d.mu.Lock()
	empty := len(d.devs) == 0
	d.mu.Unlock()
	if !empty {
		return nil
	}
	_, err := d.Inventory(ctx)
	return err
}
