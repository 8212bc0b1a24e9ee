package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/drakit/drakit/examples/nvidia/drivercmd"
	"github.com/drakit/drakit/internal/cluster"
)

func init() {
	register(command{
		name:    "demo",
		summary: "drakit's reference NVIDIA driver, deployed with Helm on a real local node: GPUs, MIG, old-style pods, conformance",
		run:     runDemo,
	})
}

// The demo's driver is examples/minimal: each device gives a container a
// variable of its own, demoEnv with the device's suffix
// (MINIMAL_DEVICE_DEV_0=dev-0).
const (
	demoDriver   = "minimal.drakit.dev"
	demoEnv      = "MINIMAL_DEVICE"
	demoResource = demoDriver + "/device"
	demoNS       = "default"
)

type demoConfig struct {
	driverBin string
	dir       string
	devices   int
}

const demoUsage = `Usage: drakit demo [flags]

Brings up a local Kubernetes cluster with a real node (kubelet,
containerd, runc), and by default deploys drakit's reference NVIDIA DRA
driver on a simulated DGX H200 the way users deploy a driver: its image
(the cgo binary and its C runtime, imported into the node's containerd) and
its Helm chart (helm from drakit setup). Pods then ask for a full GPU,
MIG devices (one, two on the same GPU), the old way (resources.limits
nvidia.com/gpu and nvidia.com/mig-1g.18gb), and more than the node has;
the demo shows which device each got, every GPU's MIG layout after each
step and what the container saw; it restarts the driver's pod, deletes
the pods and runs the conformance suite against the installed driver.
With -driver=minimal it runs the earlier, smaller demo of examples/minimal
as a plain process (needs -driver-bin). Everything it starts is stopped at
the end.

Flags:
`

func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == fleetDriverCmd {
		// The fleet's real node's driver, a process of its own.
		return drivercmd.Run(args[1:])
	}
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, demoUsage)
		fs.PrintDefaults()
	}
	var cfg demoConfig
	var nv nvidiaDemoConfig
	driverKind := fs.String("driver", "nvidia", "the demo's driver: nvidia (examples/nvidia, with Helm) or minimal (examples/minimal, a process)")
	fs.StringVar(&nv.helm, "helm", cluster.HelmBinary(), "helm binary (drakit setup builds it)")
	fs.BoolVar(&nv.conformance, "conformance", true, "nvidia: end with the conformance suite against the installed driver")
	fs.Func("set", "nvidia: a chart value (helm --set), repeatable, e.g. -set logging.format=json (the driver's log, in <dir>/pod-logs, in JSON lines)", func(v string) error {
		nv.set = append(nv.set, v)
		return nil
	})
	fs.StringVar(&cfg.driverBin, "driver-bin", "", "minimal: the examples/minimal driver binary (go build -o minimal ./examples/minimal); hack/demo.sh builds it")
	fs.StringVar(&cfg.dir, "dir", filepath.Join(cluster.CacheDir(), "demo"), "folder of the demo cluster's state and logs (kept after the demo)")
	fs.IntVar(&cfg.devices, "devices", 2, "minimal: number of simulated devices the driver publishes (2..16)")
	fleet := fs.Bool("fleet", false, "run the fleet demo instead: fake nodes in racks with the reference driver's own slices, gang scheduling within a rack, MIG pods over the fleet, the scheduler's pods/s (scheduled, not run), and the real node, where a MIG pod runs")
	fc := fleetConfig{server: "dgx-h200"}
	fs.IntVar(&fc.racks, "fleet-racks", 4, "-fleet: racks; the first half have whole GPUs, the rest dynamic MIG")
	fs.IntVar(&fc.rackSize, "fleet-rack-size", 4, "-fleet: fake nodes per rack (at least 3)")
	fs.IntVar(&fc.migPods, "fleet-mig-pods", 100, "-fleet: pods with one 1g MIG claim each")
	fs.IntVar(&fc.schedQPS, "scheduler-qps", 5000, "-fleet: kube-scheduler's client QPS and burst (upstream's scheduler_perf uses 5000)")
	fs.BoolVar(&fc.realNode, "fleet-real-node", true, "-fleet: add the real node (kubelet, containerd, the reference driver as a process on a simulated DGX H200) and run a MIG pod on it; false: fake nodes only")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *fleet {
		if fc.racks < 4 || fc.rackSize < 3 || fc.migPods < 0 || fc.schedQPS < 1 {
			return fmt.Errorf("%w: -fleet needs at least 4 racks of 3 nodes, -fleet-mig-pods >= 0 and -scheduler-qps >= 1", errUsage)
		}
		fc.dir = cfg.dir + "-fleet"
		return demoFleet(ctx, fc, stdout, stderr)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected arguments %v", errUsage, fs.Args())
	}
	switch *driverKind {
	case "nvidia":
		nv.dir = cfg.dir
		return demoNVIDIA(ctx, nv, stdout, stderr)
	case "minimal":
	default:
		return fmt.Errorf("%w: --driver %q is neither nvidia nor minimal", errUsage, *driverKind)
	}
	if cfg.driverBin == "" {
		return fmt.Errorf("%w: --driver=minimal needs --driver-bin (build it with: go build -o _output/minimal ./examples/minimal)", errUsage)
	}
	if cfg.devices < 2 || cfg.devices > 16 {
		return fmt.Errorf("%w: --devices %d is not in 2..16", errUsage, cfg.devices)
	}
	if _, err := os.Stat(cfg.driverBin); err != nil {
		return fmt.Errorf("driver binary: %w", err)
	}
	return demo(ctx, cfg, stdout, stderr)
}

// demo runs the whole story and stops everything it started, by PID, also
// when it fails or is interrupted.
func demo(ctx context.Context, cfg demoConfig, out, progress io.Writer) (err error) {
	step := func(n int, format string, args ...any) {
		fmt.Fprintf(out, "[%d/6] %s\n", n, fmt.Sprintf(format, args...))
	}
	fmt.Fprintf(out, "drakit demo: the minimal drakit driver on a real Kubernetes %s node (kubelet, containerd, runc, CDI)\n", cluster.Version)

	t0 := time.Now()
	c, err := cluster.Start(ctx, cluster.WithNode(), cluster.WithDir(cfg.dir), cluster.WithLogWriter(progress), cluster.WithDieWithParent())
	if err != nil {
		return fmt.Errorf("start cluster: %w", err)
	}
	defer func() {
		fmt.Fprintln(out, "stopping the driver, the node (host changes undone) and the control plane")
		err = errors.Join(err, c.Stop())
		fmt.Fprintf(out, "logs are kept in %s/logs\n", c.Dir)
	}()
	step(1, "cluster: control plane and node %s up in %s", c.NodeName, since(t0))

	t0 = time.Now()
	drv, err := startDemoDriver(c, cfg)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, drv.stop()) }()
	var devs []resourceapi.Device
	if err := poll(ctx, time.Minute, func(ctx context.Context) (bool, error) {
		if drv.exited() {
			return false, fmt.Errorf("driver exited; see %s", drv.log)
		}
		list, err := c.Client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.driver=" + demoDriver})
		if err != nil {
			return false, err
		}
		devs = devs[:0]
		for _, s := range list.Items {
			devs = append(devs, s.Spec.Devices...)
		}
		return len(devs) == cfg.devices, nil
	}); err != nil {
		return fmt.Errorf("wait for the driver's ResourceSlices: %w", err)
	}
	step(2, "driver %s (pid %d, log %s) registered with the kubelet and published %d devices in %s:", demoDriver, drv.cmd.Process.Pid, drv.log, len(devs), since(t0))
	for _, d := range devs {
		var attrs []string
		for k, v := range d.Attributes {
			if v.StringValue != nil {
				attrs = append(attrs, fmt.Sprintf("%s=%s", k, *v.StringValue))
			}
		}
		fmt.Fprintf(out, "      %-8s %s\n", d.Name, strings.Join(attrs, " "))
	}

	cs := c.Client
	class := &resourceapi.DeviceClass{
		ObjectMeta: metav1.ObjectMeta{Name: demoDriver},
		Spec: resourceapi.DeviceClassSpec{
			Selectors:            []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: fmt.Sprintf("device.driver == %q", demoDriver)}}},
			ExtendedResourceName: ptr.To(demoResource),
		},
	}
	if _, err := cs.ResourceV1().DeviceClasses().Create(ctx, class, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create DeviceClass: %w", err)
	}
	tmpl := &resourceapi.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: "one-device", Namespace: demoNS},
		Spec: resourceapi.ResourceClaimTemplateSpec{Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
			Requests: []resourceapi.DeviceRequest{{Name: "dev", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: demoDriver}}},
		}}},
	}
	if _, err := cs.ResourceV1().ResourceClaimTemplates(demoNS).Create(ctx, tmpl, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create ResourceClaimTemplate: %w", err)
	}
	step(3, "DeviceClass %s with extendedResourceName %s; ResourceClaimTemplate one-device", demoDriver, demoResource)

	// A DRA pod: a claim from the template.
	draPod := demoPod(c, "dra-pod")
	draPod.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "dev", ResourceClaimTemplateName: ptr.To("one-device")}}
	draPod.Spec.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: "dev"}}
	t0 = time.Now()
	seen, claim, err := runDemoPod(ctx, cs, draPod)
	if err != nil {
		return err
	}
	step(4, "pod dra-pod (claim from the template) Running in %s: the scheduler allocated %s in claim %s; the kubelet had the driver prepare it; the container sees %s",
		since(t0), claim.device, claim.name, seen)

	// The old way: a count of an extended resource, no claim in the spec.
	fill := cfg.devices - 1
	t0 = time.Now()
	for i := range fill {
		p := demoPod(c, fmt.Sprintf("legacy-pod-%d", i))
		p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{demoResource: *resource.NewQuantity(1, resource.DecimalSI)}
		seen, claim, err := runDemoPod(ctx, cs, p)
		if err != nil {
			return err
		}
		step(5, "pod %s (resources.limits %s: 1, no claim in its spec) Running in %s: the scheduler made claim %s for %s; the container sees %s",
			p.Name, demoResource, since(t0), claim.name, claim.device, seen)
	}

	// No device is left: the next one waits, and runs when one frees.
	waiting := demoPod(c, "waiting-pod")
	waiting.Spec.Containers[0].Resources.Limits = corev1.ResourceList{demoResource: *resource.NewQuantity(1, resource.DecimalSI)}
	if _, err := cs.CoreV1().Pods(demoNS).Create(ctx, waiting, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create pod waiting-pod: %w", err)
	}
	reason, err := waitUnschedulable(ctx, cs, waiting.Name)
	if err != nil {
		return err
	}
	t0 = time.Now()
	if err := cs.CoreV1().Pods(demoNS).Delete(ctx, draPod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		return fmt.Errorf("delete dra-pod: %w", err)
	}
	seen, claim, err = waitDemoPod(ctx, cs, waiting.Name)
	if err != nil {
		return err
	}
	step(6, "pod waiting-pod was Pending (%s); dra-pod deleted (the driver unprepared its claim, the device was freed) and waiting-pod Running %s later with %s (claim %s); the container sees %s",
		reason, since(t0), claim.device, claim.name, seen)

	specs, _ := filepath.Glob(filepath.Join(c.CDIDir, demoDriver+"*.json"))
	fmt.Fprintf(out, "CDI specs on the node: %d (one per prepared claim) in %s\n", len(specs), c.CDIDir)
	return nil
}

// waitUnschedulable waits until the scheduler gives up on pod name for
// now, and returns its reason; a pod that gets scheduled is an error.
func waitUnschedulable(ctx context.Context, cs kubernetes.Interface, name string) (string, error) {
	var reason string
	if err := poll(ctx, 2*time.Minute, func(ctx context.Context) (bool, error) {
		p, err := cs.CoreV1().Pods(demoNS).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if p.Spec.NodeName != "" {
			return false, fmt.Errorf("pod %s was scheduled to %s", name, p.Spec.NodeName)
		}
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.PodScheduled && cond.Reason == corev1.PodReasonUnschedulable {
				reason = cond.Message
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		return "", fmt.Errorf("wait for pod %s to be unschedulable: %w", name, err)
	}
	return reason, nil
}

func since(t time.Time) time.Duration { return time.Since(t).Round(10 * time.Millisecond) }

func poll(ctx context.Context, timeout time.Duration, cond wait.ConditionWithContextFunc) error {
	return wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, true, cond)
}

// demoDriverProc is the driver, a child process stopped by PID.
type demoDriverProc struct {
	cmd  *exec.Cmd
	log  string
	done chan struct{}
}

func startDemoDriver(c *cluster.Cluster, cfg demoConfig) (*demoDriverProc, error) {
	logPath := filepath.Join(c.Dir, "logs", "driver.log")
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("driver log: %w", err)
	}
	defer logf.Close()
	cmd := exec.Command(cfg.driverBin,
		"--kubeconfig", c.Kubeconfig,
		"--driver-name", demoDriver,
		"--node-name", c.NodeName,
		"--devices", fmt.Sprint(cfg.devices),
		"--registrar-dir", c.PluginRegistryDir,
		"--plugin-data-dir", filepath.Join(c.PluginsDir, demoDriver),
		"--cdi-dir", c.CDIDir,
		"--http-address", "127.0.0.1:0",
	)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start driver %s: %w", cfg.driverBin, err)
	}
	p := &demoDriverProc{cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.done) }()
	return p, nil
}

func (p *demoDriverProc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop asks the driver to stop (SIGTERM), as the kubelet would, and kills
// it if it has not stopped within 15 s.
func (p *demoDriverProc) stop() error {
	if p.exited() {
		return nil
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return nil
	case <-time.After(15 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("driver (pid %d) did not stop on SIGTERM within 15s; killed", p.cmd.Process.Pid)
	}
}

func demoPod(c *cluster.Cluster, name string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: demoNS},
		Spec: corev1.PodSpec{
			HostNetwork:                   true,
			RestartPolicy:                 corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: ptr.To[int64](0),
			Containers: []corev1.Container{{
				Name: "c", Image: c.Images.Busybox, ImagePullPolicy: corev1.PullNever,
				Command: []string{"sh", "-c", "env | grep " + demoEnv + "; sleep 3600"},
			}},
		},
	}
}

// demoClaim is the claim a pod got and the device allocated in it.
type demoClaim struct{ name, device string }

func runDemoPod(ctx context.Context, cs kubernetes.Interface, pod *corev1.Pod) (string, demoClaim, error) {
	if _, err := cs.CoreV1().Pods(demoNS).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		return "", demoClaim{}, fmt.Errorf("create pod %s: %w", pod.Name, err)
	}
	return waitDemoPod(ctx, cs, pod.Name)
}

// waitDemoPod waits until the pod runs and prints its device's variable,
// and returns that line and the pod's claim.
func waitDemoPod(ctx context.Context, cs kubernetes.Interface, name string) (string, demoClaim, error) {
	var pod *corev1.Pod
	var line string
	err := poll(ctx, 2*time.Minute, func(ctx context.Context) (bool, error) {
		p, err := cs.CoreV1().Pods(demoNS).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		pod = p
		if p.Status.Phase == corev1.PodFailed {
			return false, fmt.Errorf("pod %s failed: %s", name, p.Status.Message)
		}
		if p.Status.Phase != corev1.PodRunning {
			return false, nil
		}
		logs, err := cs.CoreV1().Pods(demoNS).GetLogs(name, &corev1.PodLogOptions{}).DoRaw(ctx)
		if err != nil {
			return false, nil // the container may not have written yet
		}
		for _, l := range strings.Split(string(logs), "\n") {
			if strings.HasPrefix(l, demoEnv+"_") {
				line = l
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		phase := "unknown"
		if pod != nil {
			phase = string(pod.Status.Phase)
		}
		return "", demoClaim{}, fmt.Errorf("pod %s not running with %s (phase %s): %w", name, demoEnv, phase, err)
	}
	var claimName string
	if s := pod.Status.ExtendedResourceClaimStatus; s != nil {
		claimName = s.ResourceClaimName
	}
	for _, s := range pod.Status.ResourceClaimStatuses {
		if s.ResourceClaimName != nil {
			claimName = *s.ResourceClaimName
		}
	}
	claim := demoClaim{name: claimName, device: "?"}
	if claimName != "" {
		obj, err := cs.ResourceV1().ResourceClaims(demoNS).Get(ctx, claimName, metav1.GetOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return "", demoClaim{}, fmt.Errorf("get claim %s: %w", claimName, err)
		}
		if err == nil && obj.Status.Allocation != nil && len(obj.Status.Allocation.Devices.Results) > 0 {
			claim.device = obj.Status.Allocation.Devices.Results[0].Device
		}
	}
	return line, claim, nil
}
