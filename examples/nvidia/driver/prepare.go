package driver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
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
	"github.com/drakit/drakit/partition/lifecycle"
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
	// Partition is a dynamic MIG device's key in the lifecycle (its
	// GPU by UUID), or a dynamic GPU's lifecycle.WholeCard when the claim
	// has it whole: what Reconcile finds the device by when the journal
	// lost it, whatever the GPU's NVML index is then.
	Partition *lifecycle.Key `json:"partition,omitempty"`
	// MPS is a share of a shared GPU (shared.go); Whole marks a shared
	// GPU held whole, which its shares wait for.
	MPS   *mpsData `json:"mps,omitempty"`
	Whole bool     `json:"whole,omitempty"`
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
	// TimeSlice is the GPU's time-slice this claim set (its
	// configuration's time-slicing); empty when it set none.
	TimeSlice nvml.TimeSlice `json:"timeSlice,omitempty"`
	// AdminAccess is true for a device the claim holds with admin
	// access: nothing was applied to it (no MIG device made, no
	// time-slice set, no share taken), whatever the claim's
	// configuration asks.
	AdminAccess bool `json:"adminAccess,omitempty"`
	// Share is what a share of a shared GPU (Type TypeShared) took.
	Share *ShareInfo `json:"share,omitempty"`
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
// claim that cannot be prepared) and refuses a device of a lost GPU, then
// hands the claim to the MIG devices' lifecycle
// (lifecycle.Manager.PrepareClaim), which records in its journal that
// the claim holds each dynamic device (by the GPU's UUID) before it makes
// it, so that a crash at any point is undone: by UnprepareClaim when the
// runtime undoes the half-way claim, and by Reconcile at the next start.
//
// A dynamic MIG device is created on a GPU whose MIG mode is turned on
// first if it is off (a GPU that was used whole). A dynamic GPU claimed
// whole (Hopper and later, not a vGPU guest: gpuInfo.wholeOK) gets MIG
// mode off after the MIG devices no claim holds are destroyed; it is
// refused while a claim holds one of its MIG devices, and a MIG device is
// refused while a claim holds its GPU whole (the scheduler never
// allocates both: they share the GPU's counter set; the refusal covers an
// unprepare the kubelet has not sent yet). A mode change that other NVML
// clients block fails the prepare with an error that says so, which the
// kubelet shows in the pod's events. A device allocated with admin access
// is never created or changed: admin access changes nothing on the
// device.
func (d *Driver) PrepareClaim(
	ctx context.Context,
	claim kit.Claim,
	devs []kit.AllocatedDevice,
) error {
	if err := d.ensureInventory(ctx); err != nil {
		return err
	}
	for _, dev := range devs {
		if g, whole := d.dynamicWhole(dev); whole && !dev.AdminAccess {
			d.readOthers(g) // what holds it now, not at the last heartbeat
		}
		info, ok := d.lookup(dev.Device)
		if !ok {
			return d.notOffered(dev)
		}
		if _, err := decodeConfig(dev, info.typ); err != nil {
			return err
		}
		if ev, lost := d.health.lostEvent(info.gpu); lost {
			return fmt.Errorf(
				"device %s: GPU %d (%s) is lost (fell off the bus or NVML answers GPU_IS_LOST, "+
					"seen at %s): it cannot be used until it is reset",
				dev.ID(),
				info.gpu,
				d.hw()[info.gpu].UUID,
				ev.Time.Format(time.RFC3339),
			)
		}
	}
	info := func(dev kit.AllocatedDevice) devInfo { i, _ := d.lookup(dev.Device); return i }
	if err := checkShares(devs, info); err != nil {
		return err
	}
	if err := d.holdWhole(claim.ClaimRef, devs); err != nil {
		return err
	}
	return d.lc.PrepareClaim(ctx, claim, devs)
}

// notOffered is the error for a device this driver does not offer now;
// for a dynamic GPU whole where MIG mode cannot be left, it says why.
func (d *Driver) notOffered(dev kit.AllocatedDevice) error {
	if ref, err := mig.ParseDeviceName(dev.Device); err == nil && ref.Profile == "" {
		if gpus := d.hw(); ref.GPU >= 0 && ref.GPU < len(gpus) && d.dynamic(&gpus[ref.GPU]) {
			if ok, why := d.wholeNow(&gpus[ref.GPU]); !ok {
				return fmt.Errorf(
					"device %s: dynamic MIG GPU %d is not offered whole: %s; ask for one of its "+
						"MIG devices",
					dev.ID(),
					ref.GPU,
					why,
				)
			}
		}
	}
	return fmt.Errorf("device %s is not one of this driver's devices now", dev.ID())
}

// PrepareDevice applies the device's configuration (a full GPU's
// time-slice; not for a device allocated with admin access, which gets
// its container edits only and changes nothing) and returns its container
// edits: the device's UUID in
// EnvDevicePrefix+<device>, the time-slice in EnvTimeSlicePrefix+<device>
// and, on real hardware, the ContainerEditor's DeviceEdits (by default its
// device nodes: /dev/nvidia<minor>, and the MIG capability nodes of a MIG
// device).
func (d *Driver) PrepareDevice(
	ctx context.Context,
	claim kit.Claim,
	dev kit.AllocatedDevice,
) (kit.PreparedDevice, error) {
	cd, info, err := d.describe(dev)
	if err != nil {
		return kit.PreparedDevice{}, err
	}
	cfg, err := decodeConfig(dev, info.typ)
	if err != nil {
		return kit.PreparedDevice{}, err
	}
	if info.typ == TypeShared {
		return d.prepareShare(ctx, claim, dev, info)
	}
	suffix := envSuffix(dev.Device)
	edits := (&cdi.Edits{}).Env(EnvDevicePrefix+suffix, cd.UUID)
	data := preparedData{GPU: cd.GPU, GPUUUID: d.hw()[cd.GPU].UUID, UUID: cd.UUID}
	if info.mode == ModeDynamic && !dev.AdminAccess {
		k := info.part // a MIG device, or the GPU whole
		data.Partition = &k
	}
	data.Whole = d.wholeOfShared(info, dev)
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
	meta := &kit.DeviceMetadata{
		Attributes: map[string]resourceapi.DeviceAttribute{
			AttrUUID: {StringValue: ptr.To(cd.UUID)},
		},
	}
	return kit.PreparedDevice{Edits: edits, Data: raw, Metadata: meta}, nil
}

// ClaimEdits gives every container of the claim EnvVisibleDevices=
// VisibleDevicesVoid, the claim's devices file (ClaimFile: what
// PrepareClaim and PrepareDevice applied; Reconcile writes it again from
// the runtime's checkpoint when it is lost) mounted read-only in
// ClaimFileDir with the folder in EnvClaimFileDir, and on
// real hardware the ContainerEditor's CommonEdits (by default the control
// nodes /dev/nvidiactl, /dev/nvidia-uvm and /dev/nvidia-uvm-tools). It
// sets no variable to a value of its own claim: a container with two
// claims gets both claims' edits, and would see one value only.
func (d *Driver) ClaimEdits(
	ctx context.Context,
	claim kit.Claim,
	devs []kit.AllocatedDevice,
) (*cdi.Edits, error) {
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
		// What PrepareDevice applied: nothing with admin access.
		if cd.AdminAccess = dev.AdminAccess; !dev.AdminAccess {
			cd.TimeSlice = cfg.timeSlice()
		}
		if info.typ == TypeShared && !dev.AdminAccess {
			g := d.hw()[info.gpu]
			sh, err := d.shareOf(&g, dev)
			if err != nil {
				return nil, err
			}
			cd.Share = &sh
		}
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
func (d *Driver) UnprepareDevice(
	ctx context.Context,
	claim kit.ClaimRef,
	dev kit.AllocatedDevice,
	data json.RawMessage,
) error {
	if len(data) == 0 {
		if isShared(dev) { // a prepare that did not finish
			return d.unprepareShare(ctx, claim, dev, nil)
		}
		return nil
	}
	var pd preparedData
	if err := json.Unmarshal(data, &pd); err != nil {
		return fmt.Errorf("read prepared data of %s: %w", dev.ID(), err)
	}
	if isShared(dev) {
		return d.unprepareShare(ctx, claim, dev, &pd)
	}
	if pd.TimeSlice != "" && pd.TimeSlice != nvml.TimeSliceDefault {
		gpu := pd.GPU
		if pd.GPUUUID != "" {
			g, ok := d.gpuByUUID(pd.GPUUUID)
			if !ok {
				klog.FromContext(ctx).
					Info(
						"GPU of a time-sliced device is gone; nothing to reset",
						"claim",
						claim.String(),
						"device",
						dev.Device,
						"gpuUUID",
						pd.GPUUUID,
					)
				return nil
			}
			gpu = g.Index
		}
		return d.setTimeSlice(gpu, nvml.TimeSliceDefault)
	}
	return nil
}

// UnprepareClaim releases the claim's hold on the dynamic MIG devices
// and whole GPUs the lifecycle's journal says it holds
// (lifecycle.Manager.UnprepareClaim, by claim UID: the devices' names are
// not needed, so a lost claim whose devices are unknown is released too):
// each MIG device whose last holder went is destroyed, and a GPU it held
// whole gets MIG mode on again (a failure is logged, not returned: the
// GPU's next MIG prepare tries again). It then removes the claim's
// devices file. A static device, or one held with admin access, is never
// touched. A lost GPU fails the unprepare of its own MIG devices only. It
// is idempotent.
func (d *Driver) UnprepareClaim(
	ctx context.Context,
	claim kit.ClaimRef,
	devs []kit.AllocatedDevice,
) error {
	if err := d.lc.UnprepareClaim(ctx, claim, devs); err != nil {
		return err
	}
	if err := d.mps.releaseWhole(ctx, string(claim.UID)); err != nil {
		return err
	}
	// Look before removing: on a read-only folder the removal of a file
	// that was never written fails with EROFS, which would fail the
	// rollback of a prepare that could not write it.
	if _, err := os.Lstat(d.claimFile(string(claim.UID))); err == nil {
		if err := os.Remove(d.claimFile(string(claim.UID))); err != nil &&
			!errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("remove devices file of claim %s: %w", claim, err)
		}
	}
	return nil
}

// describe is the device as its container sees it; a dynamic MIG device
// must exist (PrepareClaim made it); a dynamic GPU whole is its GPU.
func (d *Driver) describe(dev kit.AllocatedDevice) (ClaimDevice, devInfo, error) {
	info, ok := d.lookup(dev.Device)
	if !ok {
		return ClaimDevice{}, info, fmt.Errorf(
			"device %s is not one of this driver's devices now",
			dev.ID(),
		)
	}
	g := d.hw()[info.gpu]
	cd := ClaimDevice{
		Request: dev.Request,
		Device:  dev.Device,
		Type:    info.typ,
		Mode:    info.mode,
		GPU:     info.gpu,
		UUID:    info.uuid,
	}
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
		gi, found := d.tool.madeDevice(info.part)
		if !found || dev.AdminAccess {
			var err error
			if gi, found, err = d.tool.Find(info.part); err != nil {
				return cd, info, err
			}
		}
		if !found || len(gi.ComputeInstances) == 0 {
			if dev.AdminAccess {
				return cd, info, fmt.Errorf(
					"MIG device %s (%s) does not exist: admin access never creates one, and no "+
						"claim holds it now",
					dev.Device,
					info.part,
				)
			}
			return cd, info, fmt.Errorf("MIG device %s (%s) does not exist", dev.Device, info.part)
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
		return fmt.Errorf(
			"%w: time-slicing GPU %d: only the simulated NVML (-nvml-sim) sets time-slices; on "+
				"real GPUs this driver does not (NVIDIA's sets them with nvidia-smi "+
				"compute-policy --set-timeslice)",
			kit.ErrInvalidConfig,
			gpu,
		)
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
// GPU and compute instance (MIGCapabilityNodes).
func (d *Driver) deviceNodes(info devInfo) ([]cdi.DeviceNode, error) {
	g := d.hw()[info.gpu]
	nodes := []cdi.DeviceNode{{Path: "/dev/nvidia" + strconv.Itoa(g.Minor)}}
	if info.typ != TypeMIG {
		return nodes, nil
	}
	caps, err := MIGCapabilityNodes(d.o.procRoot, g.Minor, info.gi, info.ci)
	if err != nil {
		return nil, err
	}
	return append(nodes, caps...), nil
}

// MIGCapabilityNodes returns the two capability device nodes a container
// needs to use MIG device (gi, ci) of the GPU with device minor gpuMinor,
// as character devices with their numbers and file mode: the GPU
// instance's and the compute instance's /dev/nvidia-caps/nvidia-cap<N>,
// N and the mode read from
// <procRoot>/driver/nvidia/capabilities/gpu<minor>/mig/gi<G>/access and
// .../ci<C>/access ("DeviceFileMinor: N", "DeviceFileMode: M", M the
// decimal permission bits the kernel module gives the node, 292 for
// 0444), the major from the "nvidia-caps" line of <procRoot>/devices.
// procRoot is "/proc" on a node: these files are the kernel's, the same
// in every container, whatever the driver root. The nodes need not exist
// on the host (they seldom do for a MIG device made after the node
// booted): with its type and numbers given, the container runtime makes
// the node in the container without looking for it, with the mode the
// kernel module would have given it. A missing or unreadable file is an
// error that names it.
func MIGCapabilityNodes(procRoot string, gpuMinor, gi, ci int) ([]cdi.DeviceNode, error) {
	major, err := capsMajor(filepath.Join(procRoot, "devices"))
	if err != nil {
		return nil, err
	}
	base := filepath.Join(
		procRoot,
		fmt.Sprintf("driver/nvidia/capabilities/gpu%d/mig/gi%d", gpuMinor, gi),
	)
	var nodes []cdi.DeviceNode
	for _, p := range []string{base + "/access", fmt.Sprintf("%s/ci%d/access", base, ci)} {
		c, err := readCapability(p)
		if err != nil {
			return nil, err
		}
		path := "/dev/nvidia-caps/nvidia-cap" + strconv.Itoa(c.minor)
		nodes = append(nodes, cdi.DeviceNode{Path: path, Type: "c", Major: major,
			Minor: int64(c.minor), FileMode: &c.mode})
	}
	return nodes, nil
}

// capsMajor reads the major number of the nvidia-caps character devices
// from /proc/devices ("236 nvidia-caps" among the character devices).
func capsMajor(path string) (int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("read the nvidia-caps device major: %w", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "Block devices:") {
			break // a block device of that name is not the caps' major
		}
		f := strings.Fields(line)
		if len(f) == 2 && f[1] == "nvidia-caps" {
			n, err := strconv.ParseInt(f[0], 10, 32)
			if err != nil || n <= 0 {
				return 0, fmt.Errorf(
					"read the nvidia-caps device major from %s: %q is not a major number",
					path,
					f[0],
				)
			}
			return n, nil
		}
	}
	return 0, fmt.Errorf(
		"read the nvidia-caps device major: %s has no nvidia-caps line; is the NVIDIA kernel "+
			"driver (with MIG support) loaded?",
		path,
	)
}

// capability is what a MIG capability file says of its device node.
type capability struct {
	minor int
	mode  os.FileMode
}

// readCapability reads "DeviceFileMinor: N" and "DeviceFileMode: M"
// (decimal) from a MIG capability file.
func readCapability(path string) (capability, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return capability{}, fmt.Errorf("read MIG capability: %w", err)
	}
	c, minor, mode := capability{}, false, false
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		v = strings.TrimSpace(v)
		switch strings.TrimSpace(k) {
		case "DeviceFileMinor":
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				return c, fmt.Errorf("read MIG capability %s: DeviceFileMinor %q is not a number",
					path, v)
			}
			c.minor, minor = n, true
		case "DeviceFileMode":
			n, err := strconv.ParseUint(v, 10, 32)
			if err != nil || n > 0o777 {
				return c, fmt.Errorf("read MIG capability %s: DeviceFileMode %q is not a decimal "+
					"permission", path, v)
			}
			c.mode, mode = os.FileMode(n), true
		}
	}
	switch {
	case !minor:
		return c, fmt.Errorf("read MIG capability %s: no DeviceFileMinor", path)
	case !mode:
		return c, fmt.Errorf("read MIG capability %s: no DeviceFileMode", path)
	}
	return c, nil
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
