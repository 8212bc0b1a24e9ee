// Package drivercmd is the command line of drakit's reference NVIDIA DRA
// driver, shared by the binaries that ship it: examples/nvidia/cmd/nvidia-dra-driver
// (device nodes only on real GPUs, no nvidia-container-toolkit) and
// examples/nvidia/cuda's (CUDA libraries, binaries and hooks through the
// toolkit's nvcdi, in a module of its own). A binary is
//
//	func main() {
//		if err := drivercmd.Run(os.Args[1:], drivercmd.WithContainerEditor(newEditor)); err != nil {
//			klog.Fatal(err)
//		}
//	}
package drivercmd

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"sigs.k8s.io/yaml"

	kit "github.com/drakit/drakit/driver"
	"github.com/drakit/drakit/driver/driverflag"
	nvdriver "github.com/drakit/drakit/examples/nvidia/driver"
	"github.com/drakit/drakit/examples/nvidia/nvml"
	"github.com/drakit/drakit/examples/nvidia/nvml/nvmlflag"
	"github.com/drakit/drakit/examples/nvidia/nvml/nvmlsim"
	"github.com/drakit/drakit/mig"
	"github.com/drakit/drakit/partition/ledger"
)

// EditorFunc makes the ContainerEditor for real GPUs from the opened NVML
// backend and the driver root.
type EditorFunc func(nv nvml.Interface, root nvdriver.DriverRoot) (nvdriver.ContainerEditor, error)

// Option configures Run.
type Option func(*options)

type options struct {
	editor  EditorFunc
	flags   []func(*flag.FlagSet)
	out     io.Writer
	backend nvml.Interface
}

// WithBackend makes Run use nv as the GPUs' NVML backend, as real
// hardware (the driver root, the container editor and, with -check, the
// read-only guard apply), instead of opening the one the -nvml-* flags
// select: for tests on go-nvml's mock servers (nvml.NewReal) and programs
// that load NVML their own way. Run does not close nv.
func WithBackend(nv nvml.Interface) Option {
	return func(o *options) { o.backend = nv }
}

// WithOutput sets where -print-device-classes and -check print (default
// os.Stdout).
func WithOutput(w io.Writer) Option {
	return func(o *options) { o.out = w }
}

// WithFlags lets a binary register flags of its own next to the driver's
// (f runs before the command line is parsed).
func WithFlags(f func(fs *flag.FlagSet)) Option {
	return func(o *options) { o.flags = append(o.flags, f) }
}

// WithContainerEditor makes Run give real GPUs' containers the edits of
// the editor f returns (nvdriver.WithContainerEditor); without it they
// get device nodes only. f is not called in simulation (-nvml-sim).
func WithContainerEditor(f EditorFunc) Option {
	return func(o *options) { o.editor = f }
}

// Run parses the driver's command line (args without the program name)
// and runs the driver until SIGINT or SIGTERM. With -check it runs the
// driver's discovery read-only instead, prints what the driver would
// publish and the CDI spec it would write per GPU, and returns (a non-nil
// error when part of it failed); with -print-device-classes it prints the
// DeviceClasses and returns. With DefragCommand as the first argument it
// runs the MIG defragmenter instead (its flags are package mig/defrag's
// Flags, plus --kubeconfig, --feature-gates and the logging flags), with
// WaitForDriverCommand it waits for the NVIDIA driver (DriverWait), with
// WebhookCommand the admission webhook, with ProbeCommand a probe of the
// driver's probe socket (it then exits the process: 0 when the driver
// answers, 1 with its answer on stderr when not). The driver's experimental parts are behind
// feature gates (FeatureGates).
func Run(args []string, opts ...Option) error {
	if len(args) > 0 {
		switch args[0] {
		case DefragCommand:
			return runDefrag(args[1:])
		case WebhookCommand:
			return runWebhook(args[1:])
		case PlannerCommand:
			return runPlanner(args[1:])
		case WaitForDriverCommand:
			return runWaitForDriver(args[1:])
		case MPSControlSimCommand:
			runMPSControlSim(args[1:])
		case ProbeCommand:
			// An exec probe's status: no klog.Fatal stack traces in the
			// pod's events.
			if err := runProbe(args[1:]); err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(1)
			}
			os.Exit(0)
		}
	}
	o := options{out: os.Stdout}
	for _, opt := range opts {
		opt(&o)
	}
	fs := flag.NewFlagSet("nvidia-dra-driver", flag.ExitOnError)
	std := driverflag.Register(fs)
	addGates(std)
	var nv nvmlflag.Flags
	nv.Register(fs)
	profiles := fs.String(
		"mig-profiles",
		"",
		"comma-separated MIG profiles advertised on dynamic-MIG GPUs, e.g. 1g.18gb,3g.71gb "+
			"(default: the product's mig.DefaultProfiles)",
	)
	stateDir := fs.String(
		"state-dir",
		"",
		"the driver's folder for the MIG intent journal and the claims' devices files, on the "+
			"host (default <plugin-data-dir>/nvidia)",
	)
	sysfs := fs.String(
		"sysfs-root",
		"",
		"read PCI topology from this sysfs instead of /sys (default with -nvml-sim: a fake sysfs "+
			"of the simulated server)",
	)
	dynamicGPUs := fs.String(
		"dynamic-mig-gpus",
		"",
		`GPUs (UUIDs or PCI bus IDs, which stay with the GPU, or NVML indexes, comma-separated; `+
			`needs the DynamicMIG gate) whose MIG devices the driver owns: made at prepare, and `+
			`every one no held claim names destroyed at start. An index names the GPU it has at `+
			`the first start, recorded in the state folder: after a GPU fell off the bus the `+
			`recorded GPUs stay dynamic wherever their index moved, and an index naming another `+
			`GPU now is refused for that GPU (a Warning event on the node). Empty (the default) `+
			`or "none": no GPU is dynamic, and every GPU in MIG mode publishes its MIG devices `+
			`as they are, never changed. Recorded in the state folder: a GPU dropped from the `+
			`list while claims hold MIG devices on it is drained (they stay until their claims `+
			`are unprepared; the MIG devices the driver did not make are never touched). With `+
			`-check and no value, the GPUs the running driver recorded dynamic`,
	)
	full := fs.Bool(
		"full-mig-attributes",
		false,
		"publish dynamic MIG devices with every GPU fact (17 attributes: brand, architecture, "+
			"versions, PCI bus ID, NUMA node, ...) instead of the default 8 (type, index, "+
			"productName, profile, placementStart, parentUUID, migMode, pcieRoot): twice the "+
			"slices and more scheduler CPU at fleet scale",
	)
	fs.Bool(
		"lean-mig-attributes",
		false,
		"deprecated, no effect: the lean attribute set (migMode kept) is the default",
	)
	publication := fs.String("mig-publication", nvdriver.PublicationPlacements,
		`how dynamic-MIG GPUs are published: "placements" (every advertised profile x `+
			`placement that fits, with shared counters, a pool per GPU) or "layout" (each GPU's `+
			`current layout, kept in the node's layout ledger for the fleet planner's demand, `+
			`without counters, in the pool <node>/layout of one slice: about simple devices' `+
			`scheduler cost; needs the node's ledger (get, watch, create, update on its ConfigMap `+
			`in -layout-namespace), the planner and the webhook of the chart; `+
			`docs/dynamic-mig-publication.md)`)
	layoutNS := fs.String("layout-namespace", os.Getenv(podNamespaceEnv),
		"the namespace of the layout ledgers (with -mig-publication=layout; default $"+
			podNamespaceEnv+")")
	classes := fs.Bool(
		"print-device-classes",
		false,
		"print the driver's DeviceClasses as YAML (for -mig-profiles, or mig.DefaultProfiles of "+
			"the -nvml-sim server) and exit",
	)
	driverRoot := fs.String(
		"driver-root",
		"/",
		"the NVIDIA driver's root folder on the node: / for a driver installed on the host, "+
			"/run/nvidia/driver for the GPU Operator's; the container edits name device nodes "+
			"and libraries under it",
	)
	containerRoot := fs.String(
		"container-driver-root",
		"",
		"where this process sees -driver-root (the chart mounts it read-only at /driver-root); "+
			"libnvidia-ml is read under it; /proc/driver/nvidia is the kernel's, read in this "+
			"process's /proc whatever the root (default: -driver-root)",
	)
	checkDir := fs.String(
		"check-cdi-dir",
		"",
		"with -check: write the CDI specs it prints into <dir>/cdi, and the claims' devices "+
			"files they mount into <dir>/state, and list the CDI device IDs in <dir>/"+
			CheckDevicesFile+
			` ("<GPU index> <ID>" a line), for a container to be made from them (gpu-check.sh); `+
			`the folder is kept`,
	)
	sharing := registerSharing(fs)
	check := fs.Bool(
		"check",
		false,
		"read-only check of the node: run the driver's discovery with these flags and print, per "+
			"GPU, the devices it would publish (attributes, capacities, counters) and the CDI "+
			"spec it would write for one of them, then exit; changes no MIG mode, creates, "+
			"destroys or resets nothing, needs no API server (node name: -node-name or the "+
			"host name)",
	)
	for _, f := range o.flags {
		f(fs)
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := std.ApplyLogging(); err != nil {
		return err
	}
	gated, err := gateOptions(std.FeatureGate, *dynamicGPUs)
	if err != nil {
		return err
	}
	var names []string
	if *profiles != "" {
		names = strings.Split(*profiles, ",")
	}
	if *classes {
		return printClasses(o.out, names, nv.Sim)
	}
	var kopts []kit.Option
	if !*check {
		var err error
		if kopts, err = std.Options(); err != nil {
			return err
		}
		if std.PodUID != "" && std.RollingUpdateOwner == "" {
			return errors.New("--pod-uid (a rolling update) needs --rolling-update-owner, the " +
				"DaemonSet's namespace/name: the other pod of its update is admitted to the " +
				"node's folders, a second release of the driver is refused")
		}
	}
	dir := *stateDir
	if dir == "" {
		base := std.PluginDataDir
		if base == "" {
			base = driverflag.DefaultPluginDataDir(nvdriver.DriverName)
		}
		dir = filepath.Join(base, "nvidia")
	}
	root := nvdriver.DriverRoot{Host: *driverRoot, Container: *containerRoot}
	if root.Container == "" {
		root.Container = root.Host
	}
	var chk *checkRun
	if *check {
		var err error
		if chk, err = newCheck(std.NodeName, dir, *checkDir, &nv); err != nil {
			return err
		}
		defer chk.cleanup()
		dir = chk.stateDir
	}
	backend := o.backend
	if backend != nil {
		nv.Sim = ""
	} else {
		if nv.Sim == "" && nv.Library == "" {
			var err error
			if nv.Library, err = nvml.FindLibrary(root.Container); err != nil {
				return err
			}
		}
		var err error
		if backend, err = nv.Open(); err != nil {
			return err
		}
		defer backend.Close()
	}
	dopts := append([]nvdriver.Option{nvdriver.WithStateDir(dir)}, gated...)
	sopts, err := sharing.options(&nv)
	if err != nil {
		return err
	}
	dopts = append(dopts, sopts...)
	if o.backend != nil {
		// Whatever it is, it stands for real GPUs: containers get the
		// driver root's edits.
		dopts = append(dopts, nvdriver.WithSimulatedContainers(false))
	}
	if nv.Sim == "" {
		dopts = append(dopts, nvdriver.WithDriverRoot(root))
		if o.editor != nil {
			e, err := o.editor(backend, root)
			if err != nil {
				return fmt.Errorf("container edits: %w", err)
			}
			dopts = append(dopts, nvdriver.WithContainerEditor(e))
		}
	}
	if chk != nil && nv.Sim == "" {
		// The simulator runs on a copy of its state; real GPUs are
		// guarded: whatever the driver tries, nothing changes.
		backend = nvml.ReadOnly(backend)
	}
	if names != nil {
		dopts = append(dopts, nvdriver.WithProfiles(names))
	}
	if *full {
		dopts = append(dopts, nvdriver.WithFullMIGAttributes())
	}
	var agent *ledger.Agent
	switch *publication {
	case nvdriver.PublicationPlacements:
	case nvdriver.PublicationLayout:
		if chk != nil {
			// What an idle node publishes: nothing held, nothing asked.
			agent := ledger.NewMemoryAgent(chk.node, nil, nvdriver.LayoutOptions()...)
			dopts = append(dopts, nvdriver.WithMIGLayout(agent))
		} else {
			if *layoutNS == "" {
				return fmt.Errorf("-mig-publication=%s needs -layout-namespace (or $%s)",
					nvdriver.PublicationLayout, podNamespaceEnv)
			}
			cfg, err := std.RESTConfig()
			if err != nil {
				return err
			}
			client, err := kubernetes.NewForConfig(cfg)
			if err != nil {
				return fmt.Errorf("MIG layout: %w", err)
			}
			store, err := ledger.NewStore(client, *layoutNS, nvdriver.DriverName)
			if err != nil {
				return fmt.Errorf("MIG layout: %w", err)
			}
			if agent, err = ledger.NewAgent(
				store, std.NodeName, nvdriver.LayoutOptions()...,
			); err != nil {
				return fmt.Errorf("MIG layout: %w", err)
			}
			dopts = append(dopts, nvdriver.WithMIGLayout(agent))
		}
	default:
		return fmt.Errorf(
			"-mig-publication %q: want %q or %q",
			*publication,
			nvdriver.PublicationPlacements,
			nvdriver.PublicationLayout,
		)
	}
	switch {
	case *dynamicGPUs == "" && chk != nil:
		recorded, err := chk.dynamicGPUs()
		if err != nil {
			return err
		}
		dopts = append(dopts, nvdriver.WithDynamicGPUs(recorded...))
	case *dynamicGPUs == "" || *dynamicGPUs == "none":
	default:
		dopts = append(dopts, nvdriver.WithDynamicGPUs(strings.Split(*dynamicGPUs, ",")...))
	}
	if *sysfs != "" {
		dopts = append(dopts, nvdriver.WithSysfsRoot(*sysfs))
	}
	if std.PodUID != "" && chk == nil {
		// The runtime runs with WithRollingUpdate (std.Options): the
		// surge pod shares the state folder with the old one.
		dopts = append(dopts, nvdriver.WithRollingUpdate(std.RollingUpdateOwner))
	}
	node := std.NodeName
	if chk != nil {
		node = chk.node
	} else {
		// A problem the driver confines to one GPU (a dynamic GPU's
		// index that names another GPU now) is an event on the node.
		report, stop, err := nodeWarnings(std, node)
		if err != nil {
			return err
		}
		defer stop()
		dopts = append(dopts, nvdriver.WithWarnings(report))
	}
	d, err := nvdriver.New(backend, node, dopts...)
	if err != nil {
		return err
	}
	defer d.Close()
	if chk != nil {
		return chk.print(context.Background(), o.out, backend, d, root)
	}
	k, err := kit.New(nvdriver.DriverName, append(d.Options(), kopts...)...)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if agent != nil {
		// The node's ledger in the cache before the first inventory (each
		// Sync is a compare-and-swap anyway: the cache only saves a read).
		synced := make(chan struct{})
		go func() {
			if err := agent.Run(ctx, synced); err != nil && ctx.Err() == nil {
				klog.Background().Error(err, "MIG layout: watching the node's ledger")
			}
		}()
		select {
		case <-synced:
		case <-ctx.Done():
			return nil
		}
	}
	if err := k.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("driver: %w", err)
	}
	return nil
}

// podNamespaceEnv is where -layout-namespace is read from by default
// (the chart sets it from the pod's namespace).
const podNamespaceEnv = "POD_NAMESPACE"

// printClasses prints the DeviceClasses as a YAML stream.
func printClasses(w io.Writer, profiles []string, sim string) error {
	if profiles == nil && sim != "" {
		s, err := nvmlsim.Open("", nvmlsim.WithServer(sim))
		if err != nil {
			return err
		}
		profiles = mig.DefaultProfiles(s.Product())
	}
	for _, c := range nvdriver.DeviceClasses(profiles) {
		b, err := yaml.Marshal(c)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "---\n%s", b)
	}
	return nil
}
