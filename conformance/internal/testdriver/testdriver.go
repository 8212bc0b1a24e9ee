// Package testdriver is a small DRA driver written directly on
// k8s.io/dynamic-resource-allocation/kubeletplugin, used to prove that the
// conformance suite passes a correct driver and catches broken ones. Each
// defect (see Defects) breaks exactly one rule of the protocol; each
// variant (see Variants) is a legitimate way of doing things differently
// that the kubelet accepts, so the suite must pass it.
//
// It is test-only: the devices are fake, preparing one writes a CDI spec
// with an environment variable. Like a driver that checks allocations
// against its inventory, it refuses to prepare a device of its own that
// it does not publish.
package testdriver

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/drakit/drakit/statefile"
)

// Defects lists the defects the driver can be started with, each with the
// rule it breaks.
var Defects = map[string]string{
	"forget-on-restart":       "keeps prepared claims in memory only: after a restart it forgets them",
	"non-idempotent":          "prepares a claim anew on every call, with a new CDI device name",
	"wrong-request-names":     "names a request the device was not allocated for",
	"missing-request-names":   "returns no request names",
	"cdi-unresolvable":        "returns a CDI ID that no spec defines",
	"bad-cdi-id":              "returns a CDI ID that is not vendor/class=name",
	"bad-attributes":          "publishes pciBusID as an int and numaNode as a string",
	"unprepare-unknown-fails": "fails to unprepare a claim it does not know",
	"crash-on-empty":          "crashes on a prepare request with no claims",
	"no-guard":                "hands a device in use to a second claim",
	"leak-cdi":                "leaves the claim's CDI spec behind on unprepare",
	"wrong-device":            "returns a device name that was not allocated",
	"skip-claim":              "answers only the first claim of a multi-claim request",
	"admin-guard":             "refuses admin-access claims on devices in use",
	"other-driver":            "prepares allocation results of other drivers too",
	"broken-counters":         "a device consumes more of a counter than the counter set holds",
	"health-unknown-device":   "reports health for a device it does not publish",
	"health-stale":            "sends one health report and never refreshes it",
	"health-silent":           "keeps the health stream open but sends no initial report",
	"drop-share-id":           "leaves out the share ID of a shared device",
	"colliding-env":           "gives every device of a claim the same environment variable name, so a container with two devices sees only the last",
	"leak-cdi-entry":          "with -shared-spec: leaves an unprepared claim's devices in the shared spec file",
	"restart-new-edits":       "after a restart gives the same CDI IDs other edits (an environment value of the new process, as another cpuset would be)",
	"unstable-names":          "publishes device names with a suffix that changes at every start",
	"health-unknown-refresh":  "reports every device Healthy once, then only Unknown (a runtime whose health source stopped reporting)",
	"crash-before-prepare":    "crashes on an unprepare call that comes before its first prepare since it started (state it builds at the first prepare)",
	"env-per-share":           "serves the shares of one device in a claim with one CDI device that sets one variable name once per share",
	"slow-crash":              "crashes like crash-before-prepare, but its process lingers 3 s after its connections broke (a slow panic dump on a loaded machine)",
	"env-name-uid":            "its CDI edits also set a variable named after the claim's UID (CONFORMANCE_<uid>), which a shell cannot read (a UID has '-')",
	"two-shares-max":          "refuses a third allocation of a device that allows multiple allocations (a fixed number of slots, not the capacity)",
	"unprepare-device-shares": "tears a shared device down when one of its claims is unprepared: every share's CDI spec goes, and the driver forgets the other claims",
	"restart-forget-shares":   "checkpoints one claim per shared device (the last prepared): after a restart it has forgotten the device's other claims",
	"wrong-share-id":          "returns the claim's UID as the share ID of a shared device, not the allocation's share ID",
	"share-env-index":         "names a share's variable by the share's place in its claim (CONFORMANCE_SHARE_0_BANDWIDTH): unique in a claim, the same in every claim",
	"share-amount-env":        "gives each share of a device the same variable name for its amount (CONFORMANCE_SHARE_BANDWIDTH=<amount>)",
}

// Variants lists the correct behaviours the driver can be started with
// (flags), each one that the protocol allows and the kubelet accepts.
var Variants = map[string]string{
	"omit-share-id":     "returns no share ID for shared devices (api.proto: share_id is optional)",
	"no-request-policy": "its shared device has capacity without a request policy (a claim asking no capacity takes all of it)",
	"pods-only":         "prepares only claims reserved for an existing pod bound to its node",
	"no-cdi":            "returns no devices and writes no CDI spec (containers are configured otherwise, e.g. through NRI)",
	"health-empty":      "streams health reports that name no device",
	"names-if-needed":   "returns request names only for claims with more than one request (api.proto: empty means all requests)",
	"shared-spec":       "keeps every claim's CDI devices in one spec file, written at start with a static device, that stays after unprepare",
	"pcie-root-list":    "publishes pcieRoot as a list of two roots (needs the DRAListTypeAttributes feature gate)",
	"cards":             "publishes partitionable cards (-cards N), each card's whole device first, then its two halves, as a partitionable driver orders them",
	"publish-delay":     "publishes its slices only some time after it registered (-publish-delay D: discovery that takes time)",
	"republish-delay":   "after a restart (a checkpoint exists) publishes only some time after it registered (-republish-delay D); with the same devices it writes nothing, as kubeletplugin's slice controller leaves identical slices alone",
	"static-share-cdi":  "returns, for every share of its shared device, one static CDI device written at start (no per-share edits)",
}

// CDIVendor and CDIClass make up the CDI kind of the driver's devices.
const (
	CDIVendor = "conformance.drakit.dev"
	CDIClass  = "device"
)

// Options configure the driver.
type Options struct {
	DriverName    string
	NodeName      string
	Kubeconfig    string
	RegistrarDir  string
	PluginDir     string
	CDIDir        string
	StateFile     string
	Devices       int
	Partitionable bool
	Shared        bool
	NoHealth      bool
	HealthTimeout time.Duration
	Defect        string
	// OmitShareID, NoRequestPolicy, PodsOnly, NoCDI, HealthEmpty and
	// NamesIfNeeded select the variants of the same names (see
	// Variants).
	OmitShareID     bool
	NoRequestPolicy bool
	PodsOnly        bool
	NoCDI           bool
	HealthEmpty     bool
	NamesIfNeeded   bool
	SharedSpec      bool
	PCIeRootList    bool
	// Cards is the number of partitionable cards (variant cards): each
	// publishes its whole device first, then two halves, on a counter
	// set of its own.
	Cards int
	// PublishDelay delays the first publish of every start, and
	// RepublishDelay that of a start that finds a checkpoint (a
	// restart), after the driver registered.
	PublishDelay, RepublishDelay time.Duration
	// StaticShareCDI selects variant static-share-cdi.
	StaticShareCDI bool
}

// Main parses args as flags and runs the driver until SIGTERM or SIGINT.
func Main(args []string) error {
	var o Options
	fs := flag.NewFlagSet("testdriver", flag.ContinueOnError)
	fs.StringVar(&o.DriverName, "driver-name", "test.conformance.drakit.dev", "driver name")
	fs.StringVar(&o.NodeName, "node-name", os.Getenv("NODE_NAME"), "node name (default: env NODE_NAME)")
	fs.StringVar(&o.Kubeconfig, "kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig (default: env KUBECONFIG)")
	fs.StringVar(&o.RegistrarDir, "registrar-dir", "", "plugin registry folder (required)")
	fs.StringVar(&o.PluginDir, "plugin-dir", "", "folder for the DRA socket (required)")
	fs.StringVar(&o.CDIDir, "cdi-dir", "", "CDI spec folder (required)")
	fs.StringVar(&o.StateFile, "state-file", "", "checkpoint file (default: <plugin-dir>/state.json)")
	fs.IntVar(&o.Devices, "devices", 4, "number of plain devices")
	fs.BoolVar(&o.Partitionable, "partitionable", true, "also publish partitionable devices with shared counters")
	fs.BoolVar(&o.Shared, "shared", true, "also publish a device that allows multiple allocations (consumable capacity)")
	health := fs.Bool("health", true, "serve the health service (false: HealthService(false))")
	fs.DurationVar(&o.HealthTimeout, "health-timeout", 3*time.Second, "health check timeout reported per device")
	fs.StringVar(&o.Defect, "defect", "", "one defect to have (see Defects)")
	fs.BoolVar(&o.OmitShareID, "omit-share-id", false, Variants["omit-share-id"])
	fs.BoolVar(&o.NoRequestPolicy, "no-request-policy", false, Variants["no-request-policy"])
	fs.BoolVar(&o.PodsOnly, "pods-only", false, Variants["pods-only"])
	fs.BoolVar(&o.NoCDI, "no-cdi", false, Variants["no-cdi"])
	fs.BoolVar(&o.HealthEmpty, "health-empty", false, Variants["health-empty"])
	fs.BoolVar(&o.NamesIfNeeded, "names-if-needed", false, Variants["names-if-needed"])
	fs.BoolVar(&o.SharedSpec, "shared-spec", false, Variants["shared-spec"])
	fs.BoolVar(&o.PCIeRootList, "pcie-root-list", false, Variants["pcie-root-list"])
	fs.IntVar(&o.Cards, "cards", 0, Variants["cards"])
	fs.DurationVar(&o.PublishDelay, "publish-delay", 0, Variants["publish-delay"])
	fs.DurationVar(&o.RepublishDelay, "republish-delay", 0, Variants["republish-delay"])
	fs.BoolVar(&o.StaticShareCDI, "static-share-cdi", false, Variants["static-share-cdi"])
	klog.InitFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	o.NoHealth = !*health
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	return Run(ctx, o)
}

// Run runs the driver until ctx is canceled.
func Run(ctx context.Context, o Options) error {
	if o.Defect != "" {
		if _, ok := Defects[o.Defect]; !ok {
			return fmt.Errorf("unknown defect %q", o.Defect)
		}
	}
	for name, v := range map[string]string{"node-name": o.NodeName, "kubeconfig": o.Kubeconfig, "registrar-dir": o.RegistrarDir, "plugin-dir": o.PluginDir, "cdi-dir": o.CDIDir} {
		if v == "" {
			return fmt.Errorf("flag -%s is required", name)
		}
	}
	if o.StateFile == "" {
		o.StateFile = filepath.Join(o.PluginDir, "state.json")
	}
	for _, d := range []string{o.RegistrarDir, o.PluginDir, o.CDIDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("create folder: %w", err)
		}
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", o.Kubeconfig)
	if err != nil {
		return fmt.Errorf("load kubeconfig: %w", err)
	}
	cfg.QPS, cfg.Burst = 100, 200
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("create client: %w", err)
	}
	d := &driver{o: o, client: client, prepared: map[types.UID]*claimState{}}
	_, statErr := os.Stat(o.StateFile)
	restarted := statErr == nil
	if d.defect("unstable-names") {
		d.suffix = "-s" + instance
	}
	if o.Defect != "forget-on-restart" {
		if err := d.load(); err != nil {
			return err
		}
	}
	if d.defect("restart-new-edits") {
		if err := d.rewriteEdits(); err != nil {
			return err
		}
	}
	if o.SharedSpec {
		if err := d.writeShared(); err != nil {
			return err
		}
	}
	if o.StaticShareCDI {
		if err := d.writeStaticShare(); err != nil {
			return err
		}
	}
	helper, err := kubeletplugin.Start(ctx, d,
		kubeletplugin.DriverName(o.DriverName),
		kubeletplugin.NodeName(o.NodeName),
		kubeletplugin.KubeClient(client),
		kubeletplugin.RegistrarDirectoryPath(o.RegistrarDir),
		kubeletplugin.PluginDataDirectoryPath(o.PluginDir),
		kubeletplugin.Serialize(false),
		kubeletplugin.HealthService(!o.NoHealth),
	)
	if err != nil {
		return fmt.Errorf("start kubelet plugin: %w", err)
	}
	defer helper.Stop()
	delay := o.PublishDelay
	if restarted {
		delay = max(delay, o.RepublishDelay)
	}
	if delay > 0 {
		klog.FromContext(ctx).Info("Delaying the first publish", "delay", delay, "restarted", restarted)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(delay):
		}
	}
	if err := helper.PublishResources(ctx, d.resources()); err != nil {
		return fmt.Errorf("publish resources: %w", err)
	}
	<-ctx.Done()
	return nil
}

// preparedDevice is one prepared device of a claim.
type preparedDevice struct {
	Requests []string `json:"requests"`
	Pool     string   `json:"pool"`
	Device   string   `json:"device"`
	ShareID  *string  `json:"shareID,omitempty"`
	CDIIDs   []string `json:"cdiIDs"`
	Admin    bool     `json:"admin,omitempty"`
}

type claimState struct {
	Namespace string           `json:"namespace"`
	Name      string           `json:"name"`
	Devices   []preparedDevice `json:"devices"`
	SpecFiles []string         `json:"specFiles"`
	// CDIDevices are the claim's entries in the shared spec file
	// (-shared-spec).
	CDIDevices []cdispec.Device `json:"cdiDevices,omitempty"`
	// Seq orders the claims by when they were first prepared.
	Seq int `json:"seq"`
}

type driver struct {
	o        Options
	client   kubernetes.Interface
	mu       sync.Mutex
	prepared map[types.UID]*claimState
	nonce    int
	seq      int
	// preparedOnce is set at the first prepare call (defect
	// crash-before-prepare).
	preparedOnce bool
	suffix       string           // appended to every device name (defect unstable-names)
	leaked       []cdispec.Device // entries of unprepared claims (defect leak-cdi-entry)
}

// name is the published name of the device called base.
func (d *driver) name(base string) string { return base + d.suffix }

// sharedSpecPath is the one spec file of -shared-spec, named by the
// driver so that test drivers of other names can share the CDI folder.
func (d *driver) sharedSpecPath() string {
	return filepath.Join(d.o.CDIDir, CDIVendor+"-shared-"+d.o.DriverName+".json")
}

// writeShared writes the shared spec file: a static device and the
// entries of every prepared claim; called with mu held or before serving.
func (d *driver) writeShared() error {
	spec := cdispec.Spec{Version: "0.6.0", Kind: CDIVendor + "/" + CDIClass, Devices: []cdispec.Device{
		{Name: "static-" + d.o.DriverName, ContainerEdits: cdispec.ContainerEdits{Env: []string{"CONFORMANCE_STATIC=1"}}},
	}}
	uids := make([]string, 0, len(d.prepared))
	for uid := range d.prepared {
		uids = append(uids, string(uid))
	}
	sort.Strings(uids)
	for _, uid := range uids {
		spec.Devices = append(spec.Devices, d.prepared[types.UID(uid)].CDIDevices...)
	}
	spec.Devices = append(spec.Devices, d.leaked...)
	data, err := json.Marshal(spec)
	if err != nil {
		return fmt.Errorf("encode CDI spec: %w", err)
	}
	return writeAtomic(d.sharedSpecPath(), data)
}

// instance differs in every process, also in containers, where the
// process ID is the same at every start.
var instance = strconv.FormatUint(rand.Uint64()>>16, 36)

// instanceEnv is the environment entry of defect restart-new-edits: it
// differs in every process, as a cpuset chosen anew at start would.
func instanceEnv() string { return "CONFORMANCE_INSTANCE=" + instance }

// rewriteEdits gives the CDI devices of every claim in the checkpoint
// this process's instanceEnv, keeping their names (defect
// restart-new-edits).
func (d *driver) rewriteEdits() error {
	for _, st := range d.prepared {
		for i := range st.CDIDevices {
			st.CDIDevices[i].ContainerEdits.Env = []string{instanceEnv()}
		}
		for _, f := range st.SpecFiles {
			data, err := os.ReadFile(f)
			if err != nil {
				continue
			}
			var spec cdispec.Spec
			if err := json.Unmarshal(data, &spec); err != nil {
				return fmt.Errorf("decode CDI spec %s: %w", f, err)
			}
			for i := range spec.Devices {
				spec.Devices[i].ContainerEdits.Env = append(spec.Devices[i].ContainerEdits.Env[:1:1], instanceEnv())
			}
			data, err = json.Marshal(spec)
			if err != nil {
				return fmt.Errorf("encode CDI spec: %w", err)
			}
			if err := writeAtomic(f, data); err != nil {
				return err
			}
		}
	}
	return nil
}

func (d *driver) defect(name string) bool { return d.o.Defect == name }

func (d *driver) load() error {
	data, err := os.ReadFile(d.o.StateFile)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read checkpoint: %w", err)
	}
	if err := json.Unmarshal(data, &d.prepared); err != nil {
		return fmt.Errorf("decode checkpoint %s: %w", d.o.StateFile, err)
	}
	return nil
}

// save writes the checkpoint atomically; called with mu held.
func (d *driver) save() error {
	if d.defect("forget-on-restart") {
		return nil
	}
	saved := d.prepared
	if d.defect("restart-forget-shares") {
		saved = lastShareOnly(d.prepared)
	}
	data, err := json.Marshal(saved)
	if err != nil {
		return fmt.Errorf("encode checkpoint: %w", err)
	}
	return writeAtomic(d.o.StateFile, data)
}

// lastShareOnly returns the claims of prepared without those that hold
// a share of a device of which a later claim holds a share too (defect
// restart-forget-shares: one checkpoint entry per shared device).
func lastShareOnly(prepared map[types.UID]*claimState) map[types.UID]*claimState {
	last := map[string]int{} // pool/device -> Seq of the latest claim with a share
	for _, st := range prepared {
		for _, pd := range st.Devices {
			if pd.ShareID != nil {
				last[pd.Pool+"/"+pd.Device] = max(last[pd.Pool+"/"+pd.Device], st.Seq)
			}
		}
	}
	out := map[types.UID]*claimState{}
	for uid, st := range prepared {
		keep := true
		for _, pd := range st.Devices {
			if pd.ShareID != nil && last[pd.Pool+"/"+pd.Device] > st.Seq {
				keep = false
			}
		}
		if keep {
			out[uid] = st
		}
	}
	return out
}

// staticShareID is the CDI ID of variant static-share-cdi: one device
// for every share of the shared device.
func (d *driver) staticShareID() string {
	return CDIVendor + "/" + CDIClass + "=static-share-" + d.o.DriverName
}

// writeStaticShare writes the spec of variant static-share-cdi; it stays
// for the life of the driver, as a static per-device spec does.
func (d *driver) writeStaticShare() error {
	spec := cdispec.Spec{Version: "0.6.0", Kind: CDIVendor + "/" + CDIClass, Devices: []cdispec.Device{{
		Name:           "static-share-" + d.o.DriverName,
		ContainerEdits: cdispec.ContainerEdits{Env: []string{"CONFORMANCE_STATIC_SHARED_0=" + d.name("shared-0")}},
	}}}
	data, err := json.Marshal(spec)
	if err != nil {
		return fmt.Errorf("encode CDI spec: %w", err)
	}
	return writeAtomic(filepath.Join(d.o.CDIDir, CDIVendor+"-static-share-"+d.o.DriverName+".json"), data)
}

// shareEnv returns the environment entry that tells a container the
// amount of a share (result r of claim): a name per share (its share
// ID), or, for defects share-env-index and share-amount-env, a name per
// place in the claim (index) or one name for every share.
func (d *driver) shareEnv(r resourceapi.DeviceRequestAllocationResult, index int) string {
	amount := ""
	if q, ok := r.ConsumedCapacity["bandwidth"]; ok {
		amount = q.String()
	}
	switch {
	case d.defect("share-env-index"):
		return fmt.Sprintf("CONFORMANCE_SHARE_%d_BANDWIDTH=%s", index, amount)
	case d.defect("share-amount-env"):
		return "CONFORMANCE_SHARE_BANDWIDTH=" + amount
	}
	return fmt.Sprintf("CONFORMANCE_SHARE_%s_BANDWIDTH=%s", strings.ReplaceAll(string(*r.ShareID), "-", "_"), amount)
}

// sharesHeld counts the prepared claims other than uid that hold a share
// of pool/dev; called with mu held.
func (d *driver) sharesHeld(uid types.UID, pool, dev string) int {
	n := 0
	for other, st := range d.prepared {
		if other == uid {
			continue
		}
		for _, pd := range st.Devices {
			if pd.Pool == pool && pd.Device == dev && pd.ShareID != nil {
				n++
				break
			}
		}
	}
	return n
}

// shutdownSockets breaks every socket of the process (defect slow-crash:
// the connections end as in a crash while the process lingers).
func shutdownSockets() {
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return
	}
	for _, e := range entries {
		fd, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if link, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name())); err == nil && strings.HasPrefix(link, "socket:") {
			_ = syscall.Shutdown(fd, syscall.SHUT_RDWR)
		}
	}
}

func shareOf(id *types.UID) string {
	if id == nil {
		return ""
	}
	return string(*id)
}

func writeAtomic(path string, data []byte) error {
	return statefile.WriteFile(path, data, statefile.WithMode(0o644))
}

func (d *driver) resources() resourceslice.DriverResources {
	var devices []resourceapi.Device
	for i := 0; i < d.o.Devices; i++ {
		attrs := map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
			"model":                           {StringValue: ptr.To("conformance-test")},
			"index":                           {IntValue: ptr.To(int64(i))},
			"resource.kubernetes.io/pcieRoot": {StringValue: ptr.To("pci0000:00")},
			"resource.kubernetes.io/pciBusID": {StringValue: ptr.To(fmt.Sprintf("0000:%02x:00.0", i+1))},
			"resource.kubernetes.io/numaNode": {IntValue: ptr.To(int64(0))},
		}
		if d.defect("bad-attributes") {
			attrs["resource.kubernetes.io/pciBusID"] = resourceapi.DeviceAttribute{IntValue: ptr.To(int64(i + 1))}
			attrs["resource.kubernetes.io/numaNode"] = resourceapi.DeviceAttribute{StringValue: ptr.To("node0")}
		}
		if d.o.PCIeRootList {
			attrs["resource.kubernetes.io/pcieRoot"] = resourceapi.DeviceAttribute{StringValues: []string{"pci0000:00", "pci0000:80"}}
		}
		devices = append(devices, resourceapi.Device{Name: d.name(fmt.Sprintf("dev-%d", i)), Attributes: attrs})
	}
	if d.o.Shared {
		bandwidth := resourceapi.DeviceCapacity{
			Value: resource.MustParse("10Gi"),
			RequestPolicy: &resourceapi.CapacityRequestPolicy{
				Default:    ptr.To(resource.MustParse("1Gi")),
				ValidRange: &resourceapi.CapacityRequestPolicyRange{Min: ptr.To(resource.MustParse("1Gi"))},
			},
		}
		if d.o.NoRequestPolicy {
			bandwidth.RequestPolicy = nil
		}
		devices = append(devices, resourceapi.Device{
			Name:                     d.name("shared-0"),
			AllowMultipleAllocations: ptr.To(true),
			Capacity:                 map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{"bandwidth": bandwidth},
		})
	}
	pool := resourceslice.Pool{Slices: []resourceslice.Slice{{Devices: devices}}}
	if d.o.Partitionable {
		full := resource.MustParse("8Gi")
		if d.defect("broken-counters") {
			full = resource.MustParse("16Gi")
		}
		half := resource.MustParse("4Gi")
		consume := func(q resource.Quantity) []resourceapi.DeviceCounterConsumption {
			return []resourceapi.DeviceCounterConsumption{{CounterSet: "part-counters", Counters: map[string]resourceapi.Counter{"memory": {Value: q}}}}
		}
		pool.Slices = append(pool.Slices,
			resourceslice.Slice{SharedCounters: []resourceapi.CounterSet{{Name: "part-counters", Counters: map[string]resourceapi.Counter{"memory": {Value: resource.MustParse("8Gi")}}}}},
			resourceslice.Slice{Devices: []resourceapi.Device{
				{Name: d.name("part-full"), ConsumesCounters: consume(full)},
				{Name: d.name("part-half-0"), ConsumesCounters: consume(half)},
				{Name: d.name("part-half-1"), ConsumesCounters: consume(half)},
			}},
		)
	}
	if d.o.Cards > 0 {
		var sets []resourceapi.CounterSet
		var devs []resourceapi.Device
		for c := 0; c < d.o.Cards; c++ {
			set := fmt.Sprintf("card-%d", c)
			consume := func(q string) []resourceapi.DeviceCounterConsumption {
				return []resourceapi.DeviceCounterConsumption{{CounterSet: set, Counters: map[string]resourceapi.Counter{"memory": {Value: resource.MustParse(q)}}}}
			}
			sets = append(sets, resourceapi.CounterSet{Name: set, Counters: map[string]resourceapi.Counter{"memory": {Value: resource.MustParse("8Gi")}}})
			devs = append(devs,
				resourceapi.Device{Name: d.name(set + "-whole"), ConsumesCounters: consume("8Gi")},
				resourceapi.Device{Name: d.name(set + "-half-0"), ConsumesCounters: consume("4Gi")},
				resourceapi.Device{Name: d.name(set + "-half-1"), ConsumesCounters: consume("4Gi")},
			)
		}
		pool.Slices = append(pool.Slices, resourceslice.Slice{SharedCounters: sets}, resourceslice.Slice{Devices: devs})
	}
	return resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{d.o.NodeName: pool}}
}

// publishes reports whether the driver publishes device dev in pool.
func (d *driver) publishes(pool, dev string) bool {
	return pool == d.o.NodeName && slices.Contains(d.allDevices(), dev)
}

func (d *driver) allDevices() []string {
	out := make([]string, 0, d.o.Devices+3)
	for i := 0; i < d.o.Devices; i++ {
		out = append(out, d.name(fmt.Sprintf("dev-%d", i)))
	}
	if d.o.Shared {
		out = append(out, d.name("shared-0"))
	}
	if d.o.Partitionable {
		out = append(out, d.name("part-full"), d.name("part-half-0"), d.name("part-half-1"))
	}
	for c := 0; c < d.o.Cards; c++ {
		out = append(out, d.name(fmt.Sprintf("card-%d-whole", c)), d.name(fmt.Sprintf("card-%d-half-0", c)), d.name(fmt.Sprintf("card-%d-half-1", c)))
	}
	return out
}

func (d *driver) specPath(uid types.UID, nonce int) string {
	name := fmt.Sprintf("%s-claim_%s.json", CDIVendor, uid)
	if nonce > 0 {
		name = fmt.Sprintf("%s-claim_%s_%d.json", CDIVendor, uid, nonce)
	}
	return filepath.Join(d.o.CDIDir, name)
}

// PrepareResourceClaims implements kubeletplugin.DRAPlugin.
func (d *driver) PrepareResourceClaims(ctx context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	if d.defect("crash-on-empty") {
		klog.FromContext(ctx).Info("Preparing", "first", claims[0].Name) // index out of range on an empty request
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.preparedOnce = true
	out := map[types.UID]kubeletplugin.PrepareResult{}
	for i, claim := range claims {
		if d.defect("skip-claim") && len(claims) > 1 && i == len(claims)-1 {
			continue
		}
		st, err := d.prepareClaim(ctx, claim)
		if err != nil {
			out[claim.UID] = kubeletplugin.PrepareResult{Err: err}
			continue
		}
		var res kubeletplugin.PrepareResult
		for _, pd := range st.Devices {
			if d.o.NoCDI {
				break // the devices reach containers by other means
			}
			dev := kubeletplugin.Device{
				Requests: pd.Requests, PoolName: pd.Pool, DeviceName: pd.Device,
				CDIDeviceIDs: pd.CDIIDs, ShareID: (*types.UID)(pd.ShareID),
			}
			if d.o.OmitShareID {
				dev.ShareID = nil
			}
			if d.defect("wrong-share-id") && dev.ShareID != nil {
				dev.ShareID = &claim.UID
			}
			if d.o.NamesIfNeeded && len(claim.Spec.Devices.Requests) == 1 {
				dev.Requests = nil
			}
			res.Devices = append(res.Devices, dev)
		}
		out[claim.UID] = res
	}
	if err := d.save(); err != nil {
		return nil, err
	}
	return out, nil
}

// podsOnly refuses a claim that is not reserved for pods that exist and
// are bound to the driver's node, as drivers that look up their consumer
// do.
func (d *driver) podsOnly(ctx context.Context, claim *resourceapi.ResourceClaim) error {
	if len(claim.Status.ReservedFor) == 0 {
		return fmt.Errorf("claim %s/%s is reserved for nobody", claim.Namespace, claim.Name)
	}
	for _, c := range claim.Status.ReservedFor {
		if c.APIGroup != "" || c.Resource != "pods" {
			return fmt.Errorf("claim %s/%s is reserved for %s.%s %s, not for a pod", claim.Namespace, claim.Name, c.Resource, c.APIGroup, c.Name)
		}
		pod, err := d.client.CoreV1().Pods(claim.Namespace).Get(ctx, c.Name, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("get consumer pod of claim %s/%s: %w", claim.Namespace, claim.Name, err)
		}
		if pod.UID != c.UID || pod.Spec.NodeName != d.o.NodeName {
			return fmt.Errorf("claim %s/%s is reserved for pod %s (UID %s), which is not on node %s", claim.Namespace, claim.Name, c.Name, c.UID, d.o.NodeName)
		}
	}
	return nil
}

// prepareClaim prepares one claim; called with mu held.
func (d *driver) prepareClaim(ctx context.Context, claim *resourceapi.ResourceClaim) (*claimState, error) {
	if st, ok := d.prepared[claim.UID]; ok && !d.defect("non-idempotent") {
		return st, nil
	}
	if d.o.PodsOnly {
		if err := d.podsOnly(ctx, claim); err != nil {
			return nil, err
		}
	}
	nonce := 0
	if d.defect("non-idempotent") {
		d.nonce++
		nonce = d.nonce
	}
	d.seq++
	st := &claimState{Namespace: claim.Namespace, Name: claim.Name, Seq: d.seq}
	spec := cdispec.Spec{Version: "0.6.0", Kind: CDIVendor + "/" + CDIClass}
	shares := map[string]int{} // shares of each device in this claim so far
	for _, r := range claim.Status.Allocation.Devices.Results {
		if r.Driver != d.o.DriverName && !d.defect("other-driver") {
			continue
		}
		// A device of its own that it does not publish (any more) is
		// refused, as a driver that checks allocations against its
		// inventory does (package driver's runtime does).
		if r.Driver == d.o.DriverName && !d.publishes(r.Pool, r.Device) {
			return nil, fmt.Errorf("device %s/%s is not published by this driver", r.Pool, r.Device)
		}
		admin := r.AdminAccess != nil && *r.AdminAccess
		if (!admin || d.defect("admin-guard")) && r.ShareID == nil && !d.defect("no-guard") {
			for uid, other := range d.prepared {
				if uid == claim.UID {
					continue
				}
				for _, od := range other.Devices {
					if od.Pool == r.Pool && od.Device == r.Device && !od.Admin && od.ShareID == nil {
						return nil, fmt.Errorf("device %s/%s is in use by claim %s/%s", r.Pool, r.Device, other.Namespace, other.Name)
					}
				}
			}
		}
		if r.ShareID != nil && d.defect("two-shares-max") && d.sharesHeld(claim.UID, r.Pool, r.Device) >= 2 {
			return nil, fmt.Errorf("device %s/%s already has 2 shares, the most this driver takes", r.Pool, r.Device)
		}
		if r.ShareID != nil && d.o.StaticShareCDI && r.Driver == d.o.DriverName {
			st.Devices = append(st.Devices, preparedDevice{Requests: []string{r.Request}, Pool: r.Pool, Device: r.Device,
				CDIIDs: []string{d.staticShareID()}, ShareID: (*string)(r.ShareID)})
			continue
		}
		cdiName := fmt.Sprintf("%s-%s", claim.UID, r.Device)
		if r.ShareID != nil && !d.defect("env-per-share") {
			cdiName = fmt.Sprintf("%s-%s", cdiName, *r.ShareID)
		}
		if nonce > 0 {
			cdiName = fmt.Sprintf("%s-%d", cdiName, nonce)
		}
		env := []string{fmt.Sprintf("CONFORMANCE_DEVICE_%s=%s", strings.ReplaceAll(strings.ToUpper(r.Device), "-", "_"), r.Device)}
		if d.defect("colliding-env") {
			env = []string{"CONFORMANCE_DEVICE=" + r.Device}
		}
		if d.defect("restart-new-edits") {
			env = append(env, instanceEnv())
		}
		if d.defect("env-name-uid") {
			env = append(env, fmt.Sprintf("CONFORMANCE_%s=%s", claim.UID, claim.Name))
		}
		if r.ShareID != nil && !d.defect("env-per-share") {
			env = append(env, d.shareEnv(r, shares[r.Pool+"/"+r.Device]))
			shares[r.Pool+"/"+r.Device]++
		}
		if i := slices.IndexFunc(spec.Devices, func(dev cdispec.Device) bool { return dev.Name == cdiName }); i >= 0 && d.defect("env-per-share") {
			// Another share of the same device: its variable once more.
			spec.Devices[i].ContainerEdits.Env = append(spec.Devices[i].ContainerEdits.Env, fmt.Sprintf("CONFORMANCE_SHARE=%s", shareOf(r.ShareID)))
		} else {
			if d.defect("env-per-share") && r.ShareID != nil {
				env = append(env, fmt.Sprintf("CONFORMANCE_SHARE=%s", *r.ShareID))
			}
			spec.Devices = append(spec.Devices, cdispec.Device{Name: cdiName, ContainerEdits: cdispec.ContainerEdits{Env: env}})
		}
		id := CDIVendor + "/" + CDIClass + "=" + cdiName
		switch {
		case d.defect("cdi-unresolvable"):
			id += "-missing"
		case d.defect("bad-cdi-id"):
			id = CDIVendor + "/" + CDIClass + "/" + cdiName
		}
		pd := preparedDevice{Requests: []string{r.Request}, Pool: r.Pool, Device: r.Device, CDIIDs: []string{id}, Admin: admin, ShareID: (*string)(r.ShareID)}
		switch {
		case d.defect("wrong-request-names"):
			pd.Requests = []string{"wrong-" + r.Request}
		case d.defect("missing-request-names"):
			pd.Requests = nil
		case d.defect("wrong-device"):
			pd.Device += "-typo"
		case d.defect("drop-share-id"):
			pd.ShareID = nil
		}
		st.Devices = append(st.Devices, pd)
	}
	if d.o.NoCDI {
		d.prepared[claim.UID] = st
		return st, nil
	}
	if d.o.SharedSpec {
		st.CDIDevices = spec.Devices
		d.prepared[claim.UID] = st
		if err := d.writeShared(); err != nil {
			delete(d.prepared, claim.UID)
			return nil, err
		}
		return st, nil
	}
	if len(spec.Devices) == 0 {
		// Only static CDI devices: no spec of its own (a spec needs a
		// device).
		d.prepared[claim.UID] = st
		return st, nil
	}
	data, err := json.Marshal(spec)
	if err != nil {
		return nil, fmt.Errorf("encode CDI spec: %w", err)
	}
	path := d.specPath(claim.UID, nonce)
	if err := writeAtomic(path, data); err != nil {
		return nil, err
	}
	st.SpecFiles = append(st.SpecFiles, path)
	if old, ok := d.prepared[claim.UID]; ok {
		st.SpecFiles = append(old.SpecFiles, path)
	}
	d.prepared[claim.UID] = st
	return st, nil
}

// UnprepareResourceClaims implements kubeletplugin.DRAPlugin.
func (d *driver) UnprepareResourceClaims(ctx context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.defect("crash-before-prepare") && !d.preparedOnce {
		var state *claimState                                          // built at the first prepare
		klog.FromContext(ctx).Info("Unpreparing", "first", state.Name) // nil pointer dereference
	}
	if d.defect("slow-crash") && !d.preparedOnce {
		// The connections break at once, the process ends 3 s later.
		shutdownSockets()
		time.Sleep(3 * time.Second)
		panic("unprepare before the first prepare: state not built")
	}
	out := map[types.UID]error{}
	for _, c := range claims {
		st, ok := d.prepared[c.UID]
		if !ok {
			if d.defect("unprepare-unknown-fails") {
				out[c.UID] = fmt.Errorf("claim %s is not prepared", c.UID)
			} else {
				out[c.UID] = nil
			}
			continue
		}
		out[c.UID] = nil // every claim needs an entry, also on success
		if d.defect("unprepare-device-shares") {
			d.tearDownShares(c.UID, st)
		}
		if !d.defect("leak-cdi") {
			for _, f := range st.SpecFiles {
				if err := os.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) {
					out[c.UID] = fmt.Errorf("remove CDI spec: %w", err)
				}
			}
		}
		if out[c.UID] == nil {
			delete(d.prepared, c.UID)
			if d.defect("leak-cdi-entry") {
				d.leaked = append(d.leaked, st.CDIDevices...)
			}
		}
	}
	if d.o.SharedSpec {
		if err := d.writeShared(); err != nil {
			return nil, err
		}
	}
	if err := d.save(); err != nil {
		return nil, err
	}
	return out, nil
}

// tearDownShares removes the CDI specs of every other claim with a share
// of a device that st holds a share of, and forgets those claims
// (defect unprepare-device-shares); called with mu held.
func (d *driver) tearDownShares(uid types.UID, st *claimState) {
	for _, pd := range st.Devices {
		if pd.ShareID == nil {
			continue
		}
		for other, ost := range d.prepared {
			if other == uid {
				continue
			}
			for _, od := range ost.Devices {
				if od.Pool == pd.Pool && od.Device == pd.Device && od.ShareID != nil {
					for _, f := range ost.SpecFiles {
						_ = os.Remove(f)
					}
					delete(d.prepared, other)
					break
				}
			}
		}
	}
}

// HandleError implements kubeletplugin.DRAPlugin: it logs.
func (d *driver) HandleError(ctx context.Context, err error, msg string) {
	klog.FromContext(ctx).Error(err, msg)
}

// WatchHealthStatus implements kubeletplugin.DRAPlugin: every device is
// healthy, re-reported at half the timeout.
func (d *driver) WatchHealthStatus(ctx context.Context, reports chan<- kubeletplugin.DeviceHealthReport) error {
	if d.defect("health-silent") {
		<-ctx.Done()
		return nil
	}
	devs := d.allDevices()
	if d.defect("health-unknown-device") {
		devs = append(devs, "ghost")
	}
	sort.Strings(devs)
	devs = slices.Compact(devs)
	for {
		var rep kubeletplugin.DeviceHealthReport
		for _, n := range devs {
			if d.o.HealthEmpty {
				break
			}
			rep.Devices = append(rep.Devices, kubeletplugin.DeviceHealth{
				PoolName: d.o.NodeName, DeviceName: n, Health: kubeletplugin.HealthStatusHealthy,
				LastUpdated: time.Now(), HealthCheckTimeout: d.o.HealthTimeout,
			})
		}
		select {
		case <-ctx.Done():
			return nil
		case reports <- rep:
		}
		if d.defect("health-unknown-refresh") {
			// From now on only Unknown, as a runtime marks devices
			// whose health source went quiet. A copy: the helper may
			// still be converting the report it received.
			rep.Devices = slices.Clone(rep.Devices)
			for i := range rep.Devices {
				rep.Devices[i].Health = kubeletplugin.HealthStatusUnknown
			}
			for {
				select {
				case <-ctx.Done():
					return nil
				case <-time.After(d.o.HealthTimeout / 2):
				}
				rep.Devices = slices.Clone(rep.Devices)
				for i := range rep.Devices {
					rep.Devices[i].LastUpdated = time.Now()
				}
				select {
				case <-ctx.Done():
					return nil
				case reports <- rep:
				}
			}
		}
		if d.defect("health-stale") {
			<-ctx.Done()
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(d.o.HealthTimeout / 2):
		}
	}
}
