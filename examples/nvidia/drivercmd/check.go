package drivercmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"

	"github.com/drakit/drakit/cdi"
	kit "github.com/drakit/drakit/driver"
	nvdriver "github.com/drakit/drakit/examples/nvidia/driver"
	"github.com/drakit/drakit/examples/nvidia/nvml"
	"github.com/drakit/drakit/examples/nvidia/nvml/nvmlflag"
	"github.com/drakit/drakit/mig"
	"github.com/drakit/drakit/partition/lifecycle"
)

// checkRun is one -check: the driver runs on a temporary state folder
// (with a copy of the node's MIG lifecycle state, so that GPUs are
// published as the running driver publishes them: without
// -dynamic-mig-gpus, the GPUs it recorded dynamic are), a copy of the
// simulator's state, and a read-only NVML.
type checkRun struct {
	node, tmp, stateDir string
	// keep is true with -check-cdi-dir: tmp is that folder, where the
	// specs are written, and it stays.
	keep bool
	// ids are the CDI device IDs of the specs written, a line each.
	ids []string
}

// CheckDevicesFile is the file of a -check-cdi-dir folder that lists the
// CDI device IDs of the specs -check wrote, "<GPU index> <ID>" a line.
const CheckDevicesFile = "devices.txt"

// newCheck prepares a -check of node (the host name when empty) whose
// driver keeps its state in dir; it points nv's simulator state, if any,
// at a copy. With keep (-check-cdi-dir) its folder is keep, which stays.
func newCheck(node, dir, keep string, nv *nvmlflag.Flags) (*checkRun, error) {
	if node == "" {
		h, err := os.Hostname()
		if err != nil {
			return nil, fmt.Errorf("check: no -node-name and no host name: %w", err)
		}
		node = h
	}
	tmp, err := os.MkdirTemp("", "nvidia-dra-check-")
	if keep != "" {
		tmp, err = keep, os.MkdirAll(keep, 0o755)
	}
	if err != nil {
		return nil, fmt.Errorf("check: %w", err)
	}
	c := &checkRun{node: node, tmp: tmp, stateDir: filepath.Join(tmp, "state"), keep: keep != ""}
	err = os.MkdirAll(c.stateDir, 0o755)
	kept := []string{lifecycle.CardsFile, lifecycle.JournalFile, nvdriver.DynamicGPUsFile}
	for _, f := range kept {
		if err == nil {
			err = copyIfExists(filepath.Join(dir, f), filepath.Join(c.stateDir, f))
		}
	}
	if err == nil && nv.Sim != "" && nv.SimState != "" {
		sim := filepath.Join(tmp, "sim-state.json")
		err = copyIfExists(nv.SimState, sim)
		nv.SimState = sim
	}
	if err != nil {
		c.cleanup()
		return nil, fmt.Errorf("check: %w", err)
	}
	return c, nil
}

func (c *checkRun) cleanup() {
	if !c.keep {
		_ = os.RemoveAll(c.tmp)
	}
}

// copyIfExists copies the file src to dst; a missing src copies nothing.
func copyIfExists(src, dst string) error {
	b, err := os.ReadFile(src)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read %s: %w", src, err)
	}
	return os.WriteFile(dst, b, 0o644)
}

// print writes what the driver would publish for the node and, per GPU,
// the CDI spec of a claim for one of its devices (a full GPU, or an
// existing MIG device). A dynamic MIG device is made at prepare, which a
// check does not do, so a dynamic GPU gets no spec. Problems are printed
// where they arise and returned together at the end.
func (c *checkRun) print(
	ctx context.Context,
	w io.Writer,
	nv nvml.Interface,
	d *nvdriver.Driver,
	root nvdriver.DriverRoot,
) error {
	sys, err := nv.System()
	if err != nil {
		return fmt.Errorf("check: %w", err)
	}
	gpus, err := nv.GPUs()
	if err != nil {
		return fmt.Errorf("check: %w", err)
	}
	inv, err := d.Inventory(ctx)
	if err != nil {
		return fmt.Errorf("check: %w", err)
	}
	var errs []error
	valid := "valid"
	if err := inv.Validate(); err != nil {
		valid = "INVALID: " + err.Error()
		errs = append(errs, fmt.Errorf("check: inventory: %w", err))
	}
	rs := inv.ResourceSlices(c.node)
	fmt.Fprintf(
		w,
		"# nvidia-dra-driver -check, node %s: NVIDIA driver %s, CUDA %s, %d GPUs, driver root "+
			"%s (read at %s)\n",
		c.node,
		sys.DriverVersion,
		sys.CUDAVersion,
		len(gpus),
		root.Host,
		root.Container,
	)
	fmt.Fprintf(
		w,
		"# inventory: %d pools, %d ResourceSlices, %s; nothing was published, created, "+
			"destroyed or changed\n",
		len(inv.Pools),
		len(rs),
		valid,
	)
	fmt.Fprintf(
		w,
		"# (a spec's claim devices file is mounted from the check's temporary folder; the "+
			"driver's is <-state-dir>/claims/<claim UID>.json)\n",
	)
	for _, x := range d.Warnings() {
		fmt.Fprintf(w, "# WARNING %s: %s\n", x.Reason, x.Message)
	}
	printGates(w, d.Readiness())
	specs, err := cdi.NewWriter(filepath.Join(c.tmp, "cdi"), nvdriver.DriverName, "claim")
	if err != nil {
		return fmt.Errorf("check: %w", err)
	}
	for _, g := range gpus {
		if g.Err != nil {
			fmt.Fprintf(
				w,
				"---\n# GPU %d: %s cannot be read, left out: %v\n",
				g.Index,
				g.UUID,
				g.Err,
			)
			errs = append(errs, fmt.Errorf("check: GPU %d: %w", g.Index, g.Err))
			continue
		}
		devs, pools, sets := gpuDevices(rs, g.Index)
		mode := noDevices(nv, g.Index)
		if len(devs) > 0 {
			mode = modeOf(devs[0])
		}
		fmt.Fprintf(
			w,
			"---\n# GPU %d: %s %s at %s, minor %d: %s, %d devices\n",
			g.Index,
			g.ProductName,
			g.UUID,
			g.PCIBusID,
			g.Minor,
			mode,
			len(devs),
		)
		doc := map[string]any{"devices": devs}
		if len(sets) > 0 {
			doc["sharedCounters"] = sets
		}
		b, err := yaml.Marshal(doc)
		if err != nil {
			return fmt.Errorf("check: %w", err)
		}
		fmt.Fprintf(w, "%s", b)
		i := slices.IndexFunc(devs, func(dev resourceapi.Device) bool {
			return modeOf(dev) != nvdriver.ModeDynamic
		})
		if i < 0 {
			if len(devs) > 0 {
				fmt.Fprintf(
					w,
					"# no CDI spec: a dynamic MIG device is made at prepare, which a check does "+
						"not do\n",
				)
			}
			continue
		}
		spec, err := c.spec(ctx, specs, d, g.Index, pools[i], devs[i].Name)
		if err != nil {
			fmt.Fprintf(w, "# CDI spec for %s: ERROR: %v\n", devs[i].Name, err)
			errs = append(errs, fmt.Errorf("check: GPU %d: %w", g.Index, err))
			continue
		}
		fmt.Fprintf(
			w,
			"# CDI spec the driver would write for a claim on %s (valid for the CDI library):\n%s",
			devs[i].Name,
			spec,
		)
	}
	if c.keep {
		b := []byte(strings.Join(c.ids, "\n"))
		if len(c.ids) > 0 {
			b = append(b, '\n')
		}
		if err := os.WriteFile(filepath.Join(c.tmp, CheckDevicesFile), b, 0o644); err != nil {
			return errors.Join(append(errs, fmt.Errorf("check: %w", err))...)
		}
		fmt.Fprintf(
			w,
			"---\n# specs written to %s, their device IDs to %s\n",
			specs.Dir(),
			filepath.Join(c.tmp, CheckDevicesFile),
		)
	}
	return errors.Join(errs...)
}

// modeOf is a device's migMode attribute; "unreadable" for a GPU
// published from what NVML said before it failed.
func modeOf(dev resourceapi.Device) string {
	if a, ok := dev.Attributes[nvdriver.AttrMIGMode]; ok && a.StringValue != nil {
		return *a.StringValue
	}
	return "unreadable (published tainted until it answers)"
}

// noDevices says why GPU index has no devices.
func noDevices(nv nvml.Interface, index int) string {
	m, err := nv.MigMode(index)
	switch {
	case err != nil && !errors.Is(err, nvml.ErrNotSupported):
		return "left out, unreadable: " + err.Error()
	case err == nil && m.Current:
		return "static MIG without MIG devices (the driver makes none on a static GPU)"
	}
	return "left out (see the log)"
}

// gpuDevices is the devices of GPU index in the slices (by their index
// attribute), each one's pool, and the GPU's counter sets.
func gpuDevices(
	rs []*resourceapi.ResourceSlice,
	index int,
) ([]resourceapi.Device, []string, []resourceapi.CounterSet) {
	var devs []resourceapi.Device
	var pools []string
	var sets []resourceapi.CounterSet
	for _, s := range rs {
		for _, dev := range s.Spec.Devices {
			if a, ok := dev.Attributes[mig.AttrIndex]; ok && a.IntValue != nil &&
				*a.IntValue == int64(index) {
				devs = append(devs, dev)
				pools = append(pools, s.Spec.Pool.Name)
			}
		}
		for _, cs := range s.Spec.SharedCounters {
			if cs.Name == mig.CounterSetName(index) {
				sets = append(sets, cs)
			}
		}
	}
	return devs, pools, sets
}

// spec prepares a claim for one device of the node as the runtime would
// (the driver's PrepareClaim, PrepareDevice and ClaimEdits) and returns
// the claim's CDI spec as YAML, built and read back by the CDI library.
// The claim's devices file goes to the check's temporary state folder.
func (c *checkRun) spec(
	ctx context.Context,
	specs *cdi.Writer,
	d *nvdriver.Driver,
	gpu int,
	pool, dev string,
) ([]byte, error) {
	claim := kit.Claim{
		ClaimRef: kit.ClaimRef{
			UID:       types.UID("gpu-check-" + strconv.Itoa(gpu)),
			Namespace: "gpu-check",
			Name:      dev,
		},
	}
	ad := kit.AllocatedDevice{Request: "gpu", Pool: pool, Device: dev}
	all := []kit.AllocatedDevice{ad}
	if err := d.PrepareClaim(ctx, claim, all); err != nil {
		return nil, err
	}
	pd, err := d.PrepareDevice(ctx, claim, ad)
	if err != nil {
		return nil, err
	}
	common, err := d.ClaimEdits(ctx, claim, all)
	if err != nil {
		return nil, err
	}
	// The runtime names a claim's n-th device "<n>-<device>".
	cl := cdi.Claim{UID: claim.UID, Namespace: claim.Namespace, Name: claim.Name, Common: common,
		Devices: []cdi.Device{{Name: "0-" + dev, Edits: pd.Edits}}}
	spec, _, err := specs.Spec(cl)
	if err != nil {
		return nil, err
	}
	if c.keep {
		ids, err := specs.Write(ctx, cl)
		if err != nil {
			return nil, err
		}
		for _, id := range ids {
			c.ids = append(c.ids, strconv.Itoa(gpu)+" "+id)
		}
	}
	return yaml.Marshal(spec)
}

// dynamicGPUs are the GPUs the running driver recorded dynamic.
func (c *checkRun) dynamicGPUs() ([]string, error) {
	cards, err := lifecycle.ReadCards(c.stateDir)
	if err != nil {
		return nil, fmt.Errorf("check: %w", err)
	}
	var out []string
	for card, state := range cards {
		if state == lifecycle.Dynamic {
			out = append(out, card)
		}
	}
	slices.Sort(out)
	return out, nil
}

// printGates prints what decides the DynamicMIG and DynamicMIGWholeGPU
// gates on this node, per GPU, and which GPUs each could serve.
func printGates(w io.Writer, rs []nvdriver.GPUReadiness) {
	fmt.Fprintf(
		w,
		"# gates %s and %s (alpha, off by default until this check has passed on a Hopper "+
			"node): what decides them here\n",
		DynamicMIG,
		DynamicMIGWholeGPU,
	)
	var dyn, whole []string
	for _, r := range rs {
		verdict := func(why string) string {
			if why == "" {
				return "yes"
			}
			return "no: " + why
		}
		mode := "no MIG"
		if r.MIG {
			mode = fmt.Sprintf(
				"MIG mode %s (pending %s)",
				onOff(r.MIGMode.Current),
				onOff(r.MIGMode.Pending),
			)
		}
		owner := "not dynamic now"
		if r.Dynamic {
			owner = "dynamic now"
		}
		fmt.Fprintf(
			w,
			"#   GPU %d %s (%s, compute capability %s) %s: %s, %s; %s: %s; whole (%s): %s\n",
			r.Index,
			r.ProductName,
			r.Architecture,
			r.ComputeCapability,
			r.UUID,
			mode,
			owner,
			DynamicMIG,
			verdict(r.DynamicMIG),
			DynamicMIGWholeGPU,
			verdict(r.Whole),
		)
		if r.DynamicMIG == "" {
			dyn = append(dyn, strconv.Itoa(r.Index))
		}
		if r.DynamicMIG == "" && r.Whole == "" {
			whole = append(whole, strconv.Itoa(r.Index))
		}
	}
	list := func(gpus []string) string {
		if len(gpus) == 0 {
			return "none"
		}
		return strings.Join(gpus, ",")
	}
	fmt.Fprintf(
		w,
		"# %s could serve GPUs %s; %s GPUs %s\n",
		DynamicMIG,
		list(dyn),
		DynamicMIGWholeGPU,
		list(whole),
	)
}

func onOff(on bool) string {
	if on {
		return "on"
	}
	return "off"
}
