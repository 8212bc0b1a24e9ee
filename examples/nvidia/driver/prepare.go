package driver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/drakit/drakit/cdi"
	kit "github.com/drakit/drakit/driver"
	"github.com/drakit/drakit/examples/nvidia/nvml"
	"github.com/drakit/drakit/mig"
	"github.com/drakit/drakit/statefile"
)

// preparedData is what the checkpoint keeps of a prepared device.
type preparedData struct {
	// GPU is the (parent) GPU's NVML index at prepare; GPUUUID names it
	// across index changes.
	GPU       int            `json:"gpu"`
	GPUUUID   string         `json:"gpuUUID,omitempty"`
	UUID      string         `json:"uuid"`
	TimeSlice nvml.TimeSlice `json:"timeSlice,omitempty"`
	// MIG is a dynamic MIG device's key, with its GPU's UUID, or a
	// dynamic GPU's WholeKey when the claim has it whole: what
	// Reconcile finds the device by when the journal lost it.
	MIG *Key `json:"mig,omitempty"`
}

// ClaimDevice is one device in a claim's devices file.
type ClaimDevice struct {
	// Request is the claim's request (or "request/subrequest").
	Request string `json:"request"`
	// Device is the device's name in the ResourceSlice.
	Device string `json:"device"`
	// Type is TypeGPU or TypeMIG; Mode is ModeFull, ModeStatic or
	// ModeDynamic.
	Type string `json:"type"`
	Mode string `json:"mode"`
	// GPU is the (parent) GPU's index, ParentUUID its UUID for a MIG
	// device.
	GPU        int    `json:"gpu"`
	UUID       string `json:"uuid"`
	ParentUUID string `json:"parentUUID,omitempty"`
	// Profile and Placement describe a MIG device.
	Profile   string         `json:"profile,omitempty"`
	Placement *mig.Placement `json:"placement,omitempty"`
	// TimeSlice is the GPU's time-slice when the claim configured
	// time-slicing.
	TimeSlice nvml.TimeSlice `json:"timeSlice,omitempty"`
}

// ClaimFile is the devices file a claim's containers get, at
// ClaimFileDir/<namespace>_<claim name>.json.
type ClaimFile struct {
	Namespace string        `json:"namespace"`
	Claim     string        `json:"claim"`
	UID       string        `json:"uid"`
	Devices   []ClaimDevice `json:"devices"`
}

// PrepareClaim runs after the runtime recorded the claim's intent: it
// checks the opaque configuration of every device (nothing is made for a
// claim that cannot be prepared) and makes the claim's dynamic devices,
// each after recording in the MIG journal that the claim holds it
// (Journal.HoldUnless, keyed by the GPU's UUID), so that a crash at any
// point is undone: by UnprepareClaim when the runtime undoes the half-way
// claim, and by Lifecycle.Recover and Reconcile at the next start.
//
// A dynamic MIG device is created (Lifecycle.Create) on a GPU whose
// MIG mode is turned on first if Create finds it off (a GPU that was
// used whole).
// A dynamic GPU claimed whole gets MIG mode off (Lifecycle.SetMode,
// with the GPU reset an A100 needs) after the MIG devices no claim holds
// are destroyed; it is refused while a claim holds one of its MIG devices,
// and a MIG device is refused while a claim holds its GPU whole (the
// scheduler never allocates both: they share the GPU's counter set; the
// refusal covers an unprepare the kubelet has not sent yet). A device
// allocated with admin access is never created or changed: admin access
// changes nothing on the device.
func (d *Driver) PrepareClaim(ctx context.Context, claim kit.Claim, devs []kit.AllocatedDevice) error {
	if err := d.ensureInventory(ctx); err != nil {
		return err
	}
	var create, whole []Key
	for _, dev := range devs {
		info, ok := d.lookup(dev.Device)
		if !ok {
			return fmt.Errorf("device %s is not one of this driver's devices now", dev.ID())
		}
		if _, err := decodeConfig(dev, info.typ); err != nil {
			return err
		}
		if ev, lost := d.health.lostEvent(info.gpu); lost {
			return fmt.Errorf("device %s: GPU %d (%s) is lost (fell off the bus or NVML answers GPU_IS_LOST, seen at %s): it cannot be used until it is reset", dev.ID(), info.gpu, d.gpus[info.gpu].UUID, ev.Time.Format(time.RFC3339))
		}
		switch {
		case info.mode != ModeDynamic || dev.AdminAccess:
		case info.typ == TypeGPU:
			whole = append(whole, info.key)
		default:
			create = append(create, d.withUUID(info.key))
		}
	}
	if len(create) == 0 && len(whole) == 0 {
		return nil
	}
	d.migMu.Lock()
	defer d.migMu.Unlock()
	uid := string(claim.UID)
	for _, k := range whole {
		if err := d.takeWhole(ctx, k, uid); err != nil {
			return err
		}
		klog.FromContext(ctx).V(2).Info("Turned MIG mode off for a whole-GPU claim", "claim", claim.ClaimRef.String(), "gpu", k.String())
	}
	for _, k := range create {
		err := d.journal.HoldUnless(k, uid, func(intents []Intent) error {
			if held := d.holders(intents, k.UUID, true); len(held) > 0 {
				return fmt.Errorf("MIG device %s: its GPU is in use whole by claim %s; it can be sliced once that claim is unprepared", k, strings.Join(held, ", "))
			}
			return nil
		})
		if err != nil {
			return err
		}
		md, err := d.lifecycle.Create(k)
		if errors.Is(err, nvml.ErrNotSupported) {
			// MIG mode is off: the GPU was used whole last (its release
			// could not turn MIG mode on again) or by an earlier process.
			if err := d.lifecycle.SetMode(WholeKey(k.GPU, k.UUID), true); err != nil {
				return err
			}
			md, err = d.lifecycle.Create(k)
		}
		if err != nil {
			return err
		}
		d.remember(k, &md.GPUInstance)
		klog.FromContext(ctx).V(2).Info("Created MIG device", "claim", claim.ClaimRef.String(), "key", k.String(), "profile", md.Profile, "uuid", md.UUID)
	}
	if len(create) > 0 {
		d.changed()
	}
	return nil
}

// holders lists the claims that hold the GPU with the UUID whole (whole)
// or one of its MIG devices (!whole), from the journal's intents.
func (d *Driver) holders(intents []Intent, uuid string, whole bool) []string {
	var out []string
	for _, in := range intents {
		if in.Whole != whole || d.withUUIDIfMissing(in.Key).UUID != uuid {
			continue
		}
		for _, c := range in.Claims {
			if !slices.Contains(out, c) {
				out = append(out, c)
			}
		}
	}
	slices.Sort(out)
	return out
}

// takeWhole gives claim uid the dynamic GPU of k whole: the hold is
// recorded first, then the GPU's MIG devices that no claim holds (an
// earlier destroy that failed) are destroyed, then MIG mode is turned
// off. Every step is idempotent; a crash between them is undone by the
// runtime's unprepare of the half-prepared claim (release turns MIG mode
// on again).
func (d *Driver) takeWhole(ctx context.Context, k Key, uid string) error {
	err := d.journal.HoldUnless(k, uid, func(intents []Intent) error {
		if held := d.holders(intents, k.UUID, false); len(held) > 0 {
			return fmt.Errorf("%s: MIG devices of the GPU are held by claim %s; it can be used whole once they are unprepared", k, strings.Join(held, ", "))
		}
		return nil
	})
	if err != nil {
		return err
	}
	m, err := d.nv.MigMode(k.GPU)
	if err != nil {
		return fmt.Errorf("%s: %w", k, err)
	}
	if m.Current {
		gis, err := d.nv.GPUInstances(k.GPU)
		if err != nil {
			return fmt.Errorf("%s: %w", k, err)
		}
		for _, gi := range gis {
			mk := Key{GPU: k.GPU, UUID: k.UUID, ProfileID: gi.ProfileID, Start: gi.Placement.Start}
			if err := d.lifecycle.Destroy(mk); err != nil {
				return err
			}
			d.remember(mk, nil)
			if err := d.journal.Forget(mk); err != nil {
				return err
			}
			klog.FromContext(ctx).Info("Destroyed a MIG device no claim holds before using its GPU whole", "key", mk.String())
		}
	}
	return d.lifecycle.SetMode(k, false)
}

// PrepareDevice applies the device's configuration (a full GPU's
// time-slice; not for a device allocated with admin access, which gets
// its container edits only and changes nothing) and returns its container
// edits: the device's UUID in
// EnvDevicePrefix+<device>, the time-slice in EnvTimeSlicePrefix+<device>
// and, on real hardware, the ContainerEditor's DeviceEdits (by default its
// device nodes: /dev/nvidia<minor>, and the MIG capability nodes of a MIG
// device).
func (d *Driver) PrepareDevice(ctx context.Context, claim kit.Claim, dev kit.AllocatedDevice) (kit.PreparedDevice, error) {
	cd, info, err := d.describe(dev)
	if err != nil {
		return kit.PreparedDevice{}, err
	}
	cfg, err := decodeConfig(dev, info.typ)
	if err != nil {
		return kit.PreparedDevice{}, err
	}
	suffix := envSuffix(dev.Device)
	edits := (&cdi.Edits{}).Env(EnvDevicePrefix+suffix, cd.UUID)
	data := preparedData{GPU: cd.GPU, GPUUUID: d.gpus[cd.GPU].UUID, UUID: cd.UUID}
	if info.mode == ModeDynamic && !dev.AdminAccess {
		k := d.withUUID(info.key) // a MIG device, or the GPU whole
		data.MIG = &k
	}
	if ts := cfg.timeSlice(); ts != "" && !dev.AdminAccess {
		if err := d.setTimeSlice(cd.GPU, ts); err != nil {
			return kit.PreparedDevice{}, err
		}
		data.TimeSlice = ts
		edits.Env(EnvTimeSlicePrefix+suffix, string(ts))
	}
	if !*d.o.simulated {
		e, err := d.o.editor.DeviceEdits(d.containerDevice(info, cd.UUID))
		if err != nil {
			return kit.PreparedDevice{}, err
		}
		edits.Append(e)
	}
	raw, err := json.Marshal(data)
	if err != nil {
		return kit.PreparedDevice{}, err
	}
	meta := &kit.DeviceMetadata{Attributes: map[string]resourceapi.DeviceAttribute{AttrUUID: {StringValue: ptr.To(cd.UUID)}}}
	return kit.PreparedDevice{Edits: edits, Data: raw, Metadata: meta}, nil
}

// ClaimEdits gives every container of the claim EnvVisibleDevices=
// VisibleDevicesVoid, the claim's devices file (ClaimFile) mounted
// read-only in ClaimFileDir with the folder in EnvClaimFileDir, and on
// real hardware the ContainerEditor's CommonEdits (by default the control
// nodes /dev/nvidiactl, /dev/nvidia-uvm and /dev/nvidia-uvm-tools). It
// sets no variable to a value of its own claim: a container with two
// claims gets both claims' edits, and would see one value only.
func (d *Driver) ClaimEdits(ctx context.Context, claim kit.Claim, devs []kit.AllocatedDevice) (*cdi.Edits, error) {
	f := ClaimFile{Namespace: claim.Namespace, Claim: claim.Name, UID: string(claim.UID)}
	for _, dev := range devs {
		cd, info, err := d.describe(dev)
		if err != nil {
			return nil, err
		}
		cfg, err := decodeConfig(dev, info.typ)
		if err != nil {
			return nil, err
		}
		cd.TimeSlice = cfg.timeSlice()
		f.Devices = append(f.Devices, cd)
	}
	host := d.claimFile(string(claim.UID))
	if err := writeJSON(host, f); err != nil {
		return nil, err
	}
	in := filepath.Join(ClaimFileDir, claim.Namespace+"_"+claim.Name+".json")
	edits := (&cdi.Edits{}).
		Env(EnvVisibleDevices, VisibleDevicesVoid).
		Env(EnvClaimFileDir, ClaimFileDir).
		Mount(host, in, "ro", "nosuid", "nodev", "bind")
	if !*d.o.simulated {
		e, err := d.o.editor.CommonEdits()
		if err != nil {
			return nil, err
		}
		edits.Append(e)
	}
	return edits, nil
}

// UnprepareDevice puts a time-sliced GPU back to the default time-slice.
// It is idempotent.
func (d *Driver) UnprepareDevice(ctx context.Context, claim kit.ClaimRef, dev kit.AllocatedDevice, data json.RawMessage) error {
	if len(data) == 0 {
		return nil
	}
	var pd preparedData
	if err := json.Unmarshal(data, &pd); err != nil {
		return fmt.Errorf("read prepared data of %s: %w", dev.ID(), err)
	}
	if pd.TimeSlice != "" && pd.TimeSlice != nvml.TimeSliceDefault {
		gpu := pd.GPU
		if pd.GPUUUID != "" {
			g := d.gpuByUUID(pd.GPUUUID)
			if g == nil {
				klog.FromContext(ctx).Info("GPU of a time-sliced device is gone; nothing to reset", "claim", claim.String(), "device", dev.Device, "gpuUUID", pd.GPUUUID)
				return nil
			}
			gpu = g.Index
		}
		return d.setTimeSlice(gpu, nvml.TimeSliceDefault)
	}
	return nil
}

// UnprepareClaim releases the claim's hold on the dynamic MIG devices
// and whole GPUs the journal says it holds (Journal.Drop, by claim UID:
// the devices' names are not needed, so a lost claim whose devices are
// unknown is released too), destroys each MIG device whose last holder
// went (Lifecycle.Destroy; the journal forgets it after, in the same
// write as the release) and turns MIG mode on again on a GPU it held
// whole (Lifecycle.SetMode; a failure is logged, not returned, and the
// GPU's next MIG prepare tries again), then removes the claim's devices
// file and republishes. A static device, or one held with admin access,
// is never touched. It is idempotent.
func (d *Driver) UnprepareClaim(ctx context.Context, claim kit.ClaimRef, devs []kit.AllocatedDevice) error {
	destroyed, err := d.release(ctx, claim)
	if err != nil {
		return err
	}
	// Look before removing: on a read-only folder the removal of a file
	// that was never written fails with EROFS, which would fail the
	// rollback of a prepare that could not write it.
	if _, err := os.Lstat(d.claimFile(string(claim.UID))); err == nil {
		if err := os.Remove(d.claimFile(string(claim.UID))); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("remove devices file of claim %s: %w", claim, err)
		}
	}
	if destroyed {
		d.changed()
	}
	return nil
}

// release drops the claim from the journal and destroys the devices left
// without a holder; true when one was destroyed.
func (d *Driver) release(ctx context.Context, claim kit.ClaimRef) (bool, error) {
	d.migMu.Lock()
	defer d.migMu.Unlock()
	destroyed := false
	_, err := d.journal.Drop(string(claim.UID), func(k Key) error {
		at, ok := d.locate(k)
		if ok && k.Whole {
			// The GPU is sliced again now, while it is known idle (the
			// kubelet unprepares after the claim's containers are gone),
			// so the next MIG claim pays no mode change. A failure (an A100
			// NVML cannot reset) must not keep the claim: the next MIG
			// prepare and the next start try again.
			if err := d.lifecycle.SetMode(at, true); err != nil {
				klog.FromContext(ctx).Error(err, "Could not turn MIG mode on again after a whole-GPU claim; the next MIG claim on the GPU tries again", "claim", claim.String(), "gpu", at.String())
			}
			return nil
		}
		if !ok {
			// The GPU is not on the node now (unbound, lost): its MIG
			// devices went with it.
			klog.FromContext(ctx).Info("MIG device's GPU is gone; forgetting it", "claim", claim.String(), "key", k.String())
		} else if err := d.lifecycle.Destroy(at); err != nil {
			return err
		}
		d.remember(at, nil)
		destroyed = true
		klog.FromContext(ctx).V(2).Info("Destroyed MIG device", "claim", claim.String(), "key", at.String())
		return nil
	})
	return destroyed, err
}

// remember records the MIG device at k that PrepareClaim made (gi), or
// that it is destroyed (nil), for describe. migMu must be held.
func (d *Driver) remember(k Key, gi *nvml.GPUInstance) {
	at := Key{GPU: k.GPU, ProfileID: k.ProfileID, Start: k.Start}
	d.mu.Lock()
	defer d.mu.Unlock()
	if gi == nil {
		delete(d.made, at)
		return
	}
	if d.made == nil {
		d.made = map[Key]nvml.GPUInstance{}
	}
	d.made[at] = *gi
}

// madeDevice is the MIG device at k as PrepareClaim made it, if it has
// not been destroyed since.
func (d *Driver) madeDevice(k Key) (nvml.GPUInstance, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	gi, ok := d.made[Key{GPU: k.GPU, ProfileID: k.ProfileID, Start: k.Start}]
	return gi, ok
}

// keyOf maps a MIG device name to its key; false for a full GPU or a
// name that is not a MIG device of this node.
func (d *Driver) keyOf(name string) (Key, bool) {
	ref, err := mig.ParseDeviceName(name)
	if err != nil || ref.Profile == "" || ref.GPU < 0 || ref.GPU >= len(d.gpus) || d.gpus[ref.GPU].product == nil {
		return Key{}, false
	}
	pr, err := d.gpus[ref.GPU].product.Profile(ref.Profile)
	if err != nil {
		return Key{}, false
	}
	return Key{GPU: ref.GPU, ProfileID: pr.ID, Start: ref.Start}, true
}

// describe is the device as its container sees it; a dynamic MIG device
// must exist (PrepareClaim made it); a dynamic GPU whole is its GPU.
func (d *Driver) describe(dev kit.AllocatedDevice) (ClaimDevice, devInfo, error) {
	info, ok := d.lookup(dev.Device)
	if !ok {
		return ClaimDevice{}, info, fmt.Errorf("device %s is not one of this driver's devices now", dev.ID())
	}
	g := d.gpus[info.gpu]
	cd := ClaimDevice{Request: dev.Request, Device: dev.Device, Type: info.typ, Mode: info.mode, GPU: info.gpu, UUID: info.uuid}
	if info.typ == TypeMIG {
		pr, err := g.product.Profile(info.profile)
		if err != nil {
			return cd, info, err
		}
		cd.ParentUUID, cd.Profile = g.UUID, pr.Name
		cd.Placement = &mig.Placement{Start: info.key.Start, Size: pr.MemorySlices}
	}
	if info.mode == ModeDynamic && info.typ == TypeMIG {
		// The device PrepareClaim just made for this claim, or for an
		// admin-access claim (which makes nothing) what NVML says now.
		gi, found := d.madeDevice(info.key)
		if !found || dev.AdminAccess {
			var err error
			if gi, found, err = d.lifecycle.Find(info.key); err != nil {
				return cd, info, err
			}
		}
		if !found || len(gi.ComputeInstances) == 0 {
			if dev.AdminAccess {
				return cd, info, fmt.Errorf("MIG device %s (%s) does not exist: admin access never creates one, and no claim holds it now", dev.Device, info.key)
			}
			return cd, info, fmt.Errorf("MIG device %s (%s) does not exist", dev.Device, info.key)
		}
		cd.UUID = gi.ComputeInstances[0].UUID
		info.gi, info.ci = gi.ID, gi.ComputeInstances[0].ID
	}
	return cd, info, nil
}

// timeSlicer is a backend that can set a GPU's time-slice (the simulator;
// real NVML through nvidia-smi is not wired up).
type timeSlicer interface {
	SetTimeSlice(gpu int, t nvml.TimeSlice) error
}

func (d *Driver) setTimeSlice(gpu int, t nvml.TimeSlice) error {
	ts, ok := d.nv.(timeSlicer)
	if !ok {
		return fmt.Errorf("%w: time-slicing GPU %d: only the simulated NVML (-nvml-sim) sets time-slices; on real GPUs this driver does not (NVIDIA's sets them with nvidia-smi compute-policy --set-timeslice)", kit.ErrInvalidConfig, gpu)
	}
	return ts.SetTimeSlice(gpu, t)
}

// claimFile is the host path of a claim's devices file.
func (d *Driver) claimFile(uid string) string {
	return filepath.Join(d.claimDir(), uid+".json")
}

// claimDir is the host folder of the claims' devices files.
func (d *Driver) claimDir() string { return filepath.Join(d.o.stateDir, "claims") }

// deviceNodes are a device's nodes on real hardware: the GPU's
// /dev/nvidia<minor> and, for a MIG device, the capability nodes of its
// GPU and compute instance (/dev/nvidia-caps/nvidia-cap<N>, N read from
// /proc/driver/nvidia/capabilities).
func (d *Driver) deviceNodes(info devInfo) ([]string, error) {
	g := d.gpus[info.gpu]
	nodes := []string{"/dev/nvidia" + strconv.Itoa(g.Minor)}
	if info.typ != TypeMIG {
		return nodes, nil
	}
	gi, ci := info.gi, info.ci
	base := filepath.Join(d.o.procRoot, fmt.Sprintf("driver/nvidia/capabilities/gpu%d/mig/gi%d", g.Minor, gi))
	for _, p := range []string{base + "/access", fmt.Sprintf("%s/ci%d/access", base, ci)} {
		minor, err := capMinor(p)
		if err != nil {
			return nil, err
		}
		nodes = append(nodes, "/dev/nvidia-caps/nvidia-cap"+strconv.Itoa(minor))
	}
	return nodes, nil
}

// capMinor reads "DeviceFileMinor: N" from a MIG capability file.
func capMinor(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("read MIG capability: %w", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "DeviceFileMinor:"); ok {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil {
				return 0, fmt.Errorf("read MIG capability %s: %q is not a number", path, v)
			}
			return n, nil
		}
	}
	return 0, fmt.Errorf("read MIG capability %s: no DeviceFileMinor", path)
}

// writeJSON writes v to path atomically (mode 0644: containers of the
// claim read it through a bind mount).
func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encode %s: %w", path, err)
	}
	return statefile.WriteFile(path, append(b, '\n'), statefile.WithMode(0o644))
}
