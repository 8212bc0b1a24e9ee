package driver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/drakit/drakit/cdi"
	"github.com/drakit/drakit/device"
	kit "github.com/drakit/drakit/driver"
	"github.com/drakit/drakit/mig"
)

// GPUs shared by memory and compute through MPS (WithSharedGPUs). A
// shared GPU is published in a pool of its own (mig.GPUPoolName) as two
// devices on one counter set: "gpu-<index>" whole, as a full GPU, and
// "gpu-<index>-shared", of TypeShared, which allows multiple allocations
// (consumable capacity): each claim takes a share of its memory and
// compute within the request policies of WithShareMemory and
// WithShareCompute. The two consume the set's one counter, and the
// scheduler charges a shared device's counters once however many shares
// it has: a GPU is either whole or shared, never both, and a whole claim
// waits until the last share goes. On the node the driver refuses the
// same (a GPU held whole gets no share, a shared one is not handed out
// whole), and runs one MPS control daemon per shared GPU for its shares
// (mps.go): each share's container is an MPS client with its share's
// pinned memory limit and thread percentage.

// Names of the shared devices.
const (
	// TypeShared is the type (mig.AttrType) of a shared GPU's device.
	TypeShared = "shared"
	// AttrSharing is a shared device's sharing mode, SharingMPS.
	AttrSharing = "sharing"
	// SharingMPS: the shares are MPS clients of the GPU's daemon.
	SharingMPS = "mps"
	// SharedSuffix ends a shared GPU's device name: "gpu-1-shared".
	SharedSuffix = "-shared"
	// CapCompute is a shared device's compute capacity, in percent of
	// the GPU's streaming multiprocessors (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE).
	CapCompute = "compute"
	// ClassShared selects shared GPUs' devices: a claim of it gets a
	// share (capacity.requests memory and compute; the defaults when it
	// names none).
	ClassShared = "shared.gpu.nvidia.drakit.dev"
	// ExtendedResourceShared is the extended resource of ClassShared: a
	// pod asking "nvidia.com/gpu.shared: 1" gets a share of the default
	// size (the name NVIDIA's device plugin gives its shared GPUs).
	ExtendedResourceShared = "nvidia.com/gpu.shared"
	// MPSPipeDir is where a share's container finds its GPU's MPS pipe
	// folder (CUDA_MPS_PIPE_DIRECTORY).
	MPSPipeDir = "/run/nvidia-mps"
	// EnvMPSPipeDir, EnvMPSMemoryLimit and EnvMPSThreads are the MPS
	// client's variables a share's container gets: its daemon's pipe
	// folder, "0=<MiB>M" (the one GPU it sees) and its percentage.
	EnvMPSPipeDir     = "CUDA_MPS_PIPE_DIRECTORY"
	EnvMPSMemoryLimit = "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"
	EnvMPSThreads     = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"
)

// Defaults of the shares' request policies.
var (
	DefaultShareMemoryStep  = resource.MustParse("1Gi")
	DefaultShareMemory      = resource.MustParse("4Gi")
	DefaultShareComputeStep = int64(1)
	DefaultShareCompute     = int64(10)
)

// WithSharedGPUs offers GPUs as MPS shares too: UUIDs, PCI bus IDs or NVML indexes,
// "all" for every full GPU (MIG off, not a dynamic MIG GPU). Empty (the
// default) shares none. A GPU dropped from the list while shares hold it
// keeps them until they go.
func WithSharedGPUs(gpus ...string) Option {
	return func(o *options) error {
		o.sharedGPUs = slices.DeleteFunc(slices.Clone(gpus),
			func(s string) bool { return s == "" || s == "none" })
		return nil
	}
}

// WithShareMemory sets the memory request policy of shares: a share
// takes at least step and a multiple of it (a request in between is
// rounded up), def when its request names none (default
// DefaultShareMemoryStep, DefaultShareMemory).
func WithShareMemory(step, def resource.Quantity) Option {
	return func(o *options) error {
		if step.Sign() <= 0 || def.Cmp(step) < 0 {
			return fmt.Errorf("share memory: step %s must be positive and the default %s at "+
				"least the step",
				&step, &def)
		}
		o.shareMemStep, o.shareMem = step.DeepCopy(), def.DeepCopy()
		return nil
	}
}

// WithShareCompute sets the compute request policy of shares in percent
// points of the GPU (default DefaultShareComputeStep,
// DefaultShareCompute).
func WithShareCompute(step, def int64) Option {
	return func(o *options) error {
		if step <= 0 || def < step || def > 100 {
			return fmt.Errorf("share compute: step %d must be positive, the default %d between "+
				"it and 100",
				step, def)
		}
		o.shareComputeStep, o.shareCompute = step, def
		return nil
	}
}

// WithMPSControl sets how the driver runs the MPS control program
// (default DefaultMPSControl; the simulator's stand-in in simulation,
// set by drivercmd).
func WithMPSControl(c MPSControl) Option {
	return func(o *options) error {
		if len(c.Command) == 0 {
			return errors.New("MPS control: no command")
		}
		o.mpsControl = &c
		return nil
	}
}

// shareModel is the consumable-capacity model of GPU g's shares.
func (d *Driver) shareModel(g *gpuInfo) (*device.Shares, error) {
	step := d.o.shareMemStep
	memory := mib(g.MemoryMiB)
	return device.NewShares(
		device.ShareCapacity{Name: mig.CapMemory, Capacity: memory, Default: d.o.shareMem,
			Min: &step, Step: &step},
		device.ShareCapacity{Name: CapCompute, Capacity: *resource.NewQuantity(100,
			resource.DecimalSI),
			Default: *resource.NewQuantity(d.o.shareCompute, resource.DecimalSI),
			Min:     resource.NewQuantity(d.o.shareComputeStep, resource.DecimalSI),
			Step:    resource.NewQuantity(d.o.shareComputeStep, resource.DecimalSI)},
	)
}

// sharedConfigured says whether the administrator shares full GPU g
// ("all" shares every GPU that is not a dynamic MIG GPU).
func (d *Driver) sharedConfigured(g *gpuInfo) bool {
	return (slices.Contains(d.o.sharedGPUs, "all") && !d.dynamic(g)) || d.sharedNamed(g)
}

// sharedNamed says whether WithSharedGPUs names g (by UUID, PCI bus ID
// or NVML index).
func (d *Driver) sharedNamed(g *gpuInfo) bool {
	for _, s := range d.o.sharedGPUs {
		if s == "all" {
			continue
		}
		if h, ok := d.gpuBySelector(s); ok && h.UUID == g.UUID {
			return true
		}
	}
	return false
}

// sharedPool is shared full GPU g's pool: its counter set, the GPU whole
// and its shared device, both consuming the set's one counter.
func (d *Driver) sharedPool(g *gpuInfo, devs map[string]devInfo) (device.Pool, error) {
	model, err := d.shareModel(g)
	if err != nil {
		return device.Pool{}, fmt.Errorf("GPU %d shares: %w", g.Index, err)
	}
	pool := device.Pool{Name: mig.GPUPoolName(d.node, g.Index)}
	set := mig.DeviceRef{GPU: g.Index}.String()
	pool.CounterSets = []device.CounterSet{{Name: set, Counters: map[string]resource.Quantity{
		"gpu": *resource.NewQuantity(1, resource.DecimalSI)}}}
	one := map[string]resource.Quantity{"gpu": *resource.NewQuantity(1, resource.DecimalSI)}
	whole := set
	wd := d.common(device.New(whole), g, TypeGPU, ModeFull).
		StringAttribute(AttrUUID, g.UUID).
		Capacity(mig.CapMemory, mib(g.MemoryMiB), nil).
		ConsumesCounters(set, one)
	name := whole + SharedSuffix
	sd := model.Apply(d.common(device.New(name), g, TypeShared, ModeFull).
		StringAttribute(AttrUUID, g.UUID).
		StringAttribute(AttrSharing, SharingMPS)).
		ConsumesCounters(set, one)
	pool.Devices = []*device.Device{wd, sd}
	devs[whole] = devInfo{pool: pool.Name, gpu: g.Index, mode: ModeFull, typ: TypeGPU, uuid: g.UUID}
	devs[name] = devInfo{pool: pool.Name, gpu: g.Index, mode: ModeFull, typ: TypeShared,
		uuid: g.UUID}
	return pool, nil
}

// mpsData is what the checkpoint keeps of a share.
type mpsData struct {
	// Key names the share in the MPS records ("<claim UID>/<share ID>").
	Key string `json:"key"`
	// MemoryMiB and Threads are its pinned memory limit and thread
	// percentage.
	MemoryMiB int64 `json:"memoryMiB"`
	Threads   int   `json:"threads"`
}

// ShareInfo is a share in a claim's devices file.
type ShareInfo struct {
	// ShareID is the allocation's share ID.
	ShareID string `json:"shareID"`
	// MemoryMiB is its pinned device memory limit, ComputePercent its
	// active thread percentage.
	MemoryMiB      int64 `json:"memoryMiB"`
	ComputePercent int   `json:"computePercent"`
}

// shareOf is what share dev took of GPU g.
func (d *Driver) shareOf(g *gpuInfo, dev kit.AllocatedDevice) (ShareInfo, error) {
	model, err := d.shareModel(g)
	if err != nil {
		return ShareInfo{}, err
	}
	sh, err := model.Of(dev.ConsumedCapacity)
	if err != nil {
		return ShareInfo{}, fmt.Errorf("share of %s: %w", dev.ID(), err)
	}
	mem := sh[mig.CapMemory]
	out := ShareInfo{MemoryMiB: mem.Value() >> 20, ComputePercent: model.Percent(sh, CapCompute)}
	if dev.ShareID != nil {
		out.ShareID = string(*dev.ShareID)
	}
	return out, nil
}

// checkShares refuses what a claim's shares cannot be: a container is
// one MPS client of one daemon, so a claim takes one share (a shared GPU
// is not time-sliced either: decodeConfig). Admin access is no share.
func checkShares(devs []kit.AllocatedDevice, info func(kit.AllocatedDevice) devInfo) error {
	var shares []string
	for _, dev := range devs {
		if info(dev).typ != TypeShared || dev.AdminAccess {
			continue
		}
		shares = append(shares, dev.Request)
	}
	if len(shares) > 1 {
		return fmt.Errorf("requests %s each ask for an MPS share: a container is the MPS client "+
			"of one "+
			"GPU's daemon with one memory limit, so a claim takes one share; ask for a larger one",
			strings.Join(shares, ", "))
	}
	return nil
}

// prepareShare makes share dev of GPU info.gpu ready: the GPU's daemon
// runs (started for its first share), and the container gets the MPS
// client's variables and the daemon's pipe folder.
func (d *Driver) prepareShare(ctx context.Context, claim kit.Claim, dev kit.AllocatedDevice,
	info devInfo) (kit.PreparedDevice, error) {
	g := d.hw()[info.gpu]
	if dev.AdminAccess {
		return d.adminShare(dev, info, g)
	}
	sh, err := d.shareOf(&g, dev)
	if err != nil {
		return kit.PreparedDevice{}, err
	}
	key := shareKey(claim.ClaimRef, dev)
	pipe, err := d.mps.acquireShare(ctx, g.UUID, key)
	if err != nil {
		return kit.PreparedDevice{}, err
	}
	edits := (&cdi.Edits{}).
		Env(EnvDevicePrefix+envSuffix(dev.ShareName()), g.UUID).
		Env(EnvMPSPipeDir, MPSPipeDir).
		Env(EnvMPSMemoryLimit, "0="+strconv.FormatInt(sh.MemoryMiB, 10)+"M").
		Env(EnvMPSThreads, strconv.Itoa(sh.ComputePercent)).
		Mount(pipe, MPSPipeDir, "rw", "nosuid", "nodev", "bind")
	if !*d.o.simulated {
		e, err := d.o.editor.DeviceEdits(d.containerDevice(info, g.UUID))
		if err != nil {
			return kit.PreparedDevice{}, err
		}
		// MPS clients and their server share memory through /dev/shm:
		// the daemon runs in the driver's pod on the host's IPC
		// namespace, and so the host's /dev/shm.
		edits.Append(e).Mount("/dev/shm", "/dev/shm", "rw", "nosuid", "nodev", "bind")
	}
	data := preparedData{GPU: g.Index, GPUUUID: g.UUID, UUID: g.UUID,
		MPS: &mpsData{Key: key, MemoryMiB: sh.MemoryMiB, Threads: sh.ComputePercent}}
	raw, err := json.Marshal(data)
	if err != nil {
		return kit.PreparedDevice{}, err
	}
	meta := &kit.DeviceMetadata{Attributes: map[string]resourceapi.DeviceAttribute{
		AttrUUID: {StringValue: ptr.To(g.UUID)}}}
	klog.FromContext(ctx).V(3).Info("Prepared MPS share", "claim", claim.ClaimRef.String(), "gpu",
		g.Index,
		"memoryMiB", sh.MemoryMiB, "threads", sh.ComputePercent)
	return kit.PreparedDevice{Edits: edits, Data: raw, Metadata: meta}, nil
}

// adminShare is admin access to a shared GPU (monitoring): the GPU's
// UUID and, on real hardware, its device nodes, for NVML; no share is
// taken and no MPS client made (its programs are no MPS clients, and
// the GPU's ExclusiveProcess mode refuses them a CUDA context).
func (d *Driver) adminShare(dev kit.AllocatedDevice, info devInfo, g gpuInfo) (kit.PreparedDevice,
	error) {
	edits := (&cdi.Edits{}).Env(EnvDevicePrefix+envSuffix(dev.ShareName()), g.UUID)
	if !*d.o.simulated {
		e, err := d.o.editor.DeviceEdits(d.containerDevice(info, g.UUID))
		if err != nil {
			return kit.PreparedDevice{}, err
		}
		edits.Append(e)
	}
	return kit.PreparedDevice{Edits: edits}, nil
}

// unprepareShare releases share dev: from its recorded data, or for a
// prepare that did not finish from its name and the claim.
func (d *Driver) unprepareShare(ctx context.Context, claim kit.ClaimRef, dev kit.AllocatedDevice,
	pd *preparedData) error {
	if pd != nil && pd.MPS != nil {
		return d.mps.releaseShare(ctx, pd.GPUUUID, pd.MPS.Key)
	}
	ref, err := mig.ParseDeviceName(strings.TrimSuffix(dev.Device, SharedSuffix))
	gpus := d.hw()
	if err != nil || ref.GPU < 0 || ref.GPU >= len(gpus) {
		return nil // no GPU of this node: nothing was started for it
	}
	return d.mps.releaseShare(ctx, gpus[ref.GPU].UUID, shareKey(claim, dev))
}

// isShared says whether dev is a shared GPU's device (by its name: a
// device no longer published has it too).
func isShared(dev kit.AllocatedDevice) bool { return strings.HasSuffix(dev.Device, SharedSuffix) }

// heldShares is what the runtime's held claims hold of the shared GPUs,
// from their recorded data: the shares, and the claims holding a GPU
// whole.
func (d *Driver) heldShares(held []kit.HeldClaim) heldMPS {
	out := heldMPS{shares: map[string][]string{}, whole: map[string][]string{}}
	for _, h := range held {
		for _, dev := range h.Devices {
			var pd preparedData
			if len(dev.Data) == 0 || json.Unmarshal(dev.Data, &pd) != nil || pd.GPUUUID == "" {
				continue
			}
			switch {
			case pd.MPS != nil:
				out.shares[pd.GPUUUID] = append(out.shares[pd.GPUUUID], pd.MPS.Key)
			case pd.Whole && !dev.AdminAccess:
				out.whole[pd.GPUUUID] = append(out.whole[pd.GPUUUID], string(h.UID))
			}
		}
	}
	return out
}

// holdWhole records, for each whole device of a full GPU that is or was
// shared in devs, that the claim holds it whole (refused while shares
// hold it).
func (d *Driver) holdWhole(claim kit.ClaimRef, devs []kit.AllocatedDevice) error {
	for _, dev := range devs {
		info, ok := d.lookup(dev.Device)
		if !ok || !d.wholeOfShared(info, dev) {
			continue
		}
		if err := d.mps.holdWhole(info.uuid, string(claim.UID)); err != nil {
			return fmt.Errorf("device %s: %w", dev.ID(), err)
		}
	}
	return nil
}

// wholeOfShared says whether dev is a full GPU whole whose holders the
// MPS records keep: a GPU shared now, or one with a record (shares it
// had when it was dropped from the shared GPUs). Admin access holds
// nothing.
func (d *Driver) wholeOfShared(info devInfo, dev kit.AllocatedDevice) bool {
	if info.typ != TypeGPU || info.mode != ModeFull || dev.AdminAccess || info.uuid == "" {
		return false
	}
	g, ok := d.gpuByUUID(info.uuid)
	return ok && (d.sharedConfigured(&g) || d.mps.has(info.uuid))
}

// mpsControl is the MPS control program of the options, or the default.
func (o *options) mpsControlOrDefault() MPSControl {
	if o.mpsControl != nil {
		return *o.mpsControl
	}
	return DefaultMPSControl
}

// mpsIndex finds a GPU's NVML index by UUID for the MPS manager.
func (d *Driver) mpsIndex(uuid string) (int, bool) {
	g, ok := d.gpuByUUID(uuid)
	return g.Index, ok
}

// gpuBySelector finds a GPU by UUID, PCI bus ID or NVML index, as
// WithSharedGPUs names it.
func (d *Driver) gpuBySelector(s string) (gpuInfo, bool) {
	kind, norm, err := selectorKind(s)
	if err != nil {
		return gpuInfo{}, false
	}
	switch kind {
	case "uuid":
		return d.gpuByUUID(norm)
	case "pci":
		return d.gpuByBusID(norm)
	}
	i, _ := strconv.Atoi(norm)
	return d.gpuByIndex(i)
}

// openMPS opens the MPS manager in the state folder and starts its
// watch of the daemons; the shared GPUs must be full GPUs of this node,
// none of them one of the dynamic MIG GPUs (their UUIDs).
func (d *Driver) openMPS(dynamic []string) error {
	for _, s := range d.o.sharedGPUs {
		if s == "all" {
			continue
		}
		g, ok := d.gpuBySelector(s)
		if !ok {
			return fmt.Errorf("shared GPU %q: no such GPU on this node", s)
		}
		if _, err := d.shareModel(&g); err != nil {
			return fmt.Errorf("shared GPU %q: %w", s, err)
		}
	}
	m, err := newMPSManager(filepath.Join(d.o.stateDir, "mps"), d.o.mpsControlOrDefault(), d.nv,
		d.mpsIndex)
	if err != nil {
		return err
	}
	if d.o.mpsPoll > 0 {
		m.poll = d.o.mpsPoll
	}
	// A dynamic MIG GPU is re-partitioned at will: never while shares
	// hold it, and it is not offered as shares.
	for _, uuid := range dynamic {
		g, found := d.gpuByUUID(uuid)
		if !found {
			continue // not on the node now: nothing of it is served
		}
		if d.sharedNamed(&g) {
			return fmt.Errorf("GPU %d is both a dynamic MIG GPU and a shared one: choose one",
				g.Index)
		}
		if r, err := m.read(uuid); err == nil && len(r.Shares) > 0 {
			return fmt.Errorf("GPU %d is named a dynamic MIG GPU while %d MPS shares hold it: "+
				"it is re-partitioned only once they are gone", g.Index, len(r.Shares))
		}
	}
	d.mps = m
	ctx, cancel := context.WithCancel(context.Background())
	d.mpsCancel = cancel
	go m.watch(klog.NewContext(ctx, klog.Background()))
	return nil
}
