package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/drakit/drakit/conformance"
	"github.com/drakit/drakit/examples/nvidia/deploy"
	nvdriver "github.com/drakit/drakit/examples/nvidia/driver"
	"github.com/drakit/drakit/examples/nvidia/nvml/nvmlsim"
	"github.com/drakit/drakit/internal/cluster"
	"github.com/drakit/drakit/mig"
)

// nvidiaDemoConfig configures the NVIDIA driver's demo.
type nvidiaDemoConfig struct {
	dir         string
	helm        string
	conformance bool
	// clusterConformance runs the suite's cluster mode after socket mode
	// (needs conformance).
	clusterConformance bool
	// set are more chart values (helm --set), e.g. logging.format=json.
	set []string
	// publishTimeout, when set, is both conformance runs' PublishTimeout
	// (default: 20 s in socket mode, the suite's 30 s in cluster mode).
	// The driver republishes the same slices after its restart, so each
	// run waits this long before judging them; tests shorten the wait.
	publishTimeout time.Duration
}

// nvidiaDemo is the state of a running NVIDIA demo.
type nvidiaDemo struct {
	c         *cluster.Cluster
	out       io.Writer
	stateFile string
	step      int
	// users maps a device UUID to the pod using it, for the pictures.
	users map[string]string
}

func (d *nvidiaDemo) stepf(format string, args ...any) {
	d.step++
	fmt.Fprintf(d.out, "\n[%d] %s\n", d.step, fmt.Sprintf(format, args...))
}

func (d *nvidiaDemo) linef(format string, args ...any) {
	fmt.Fprintf(d.out, "    %s\n", fmt.Sprintf(format, args...))
}

// demoNVIDIA runs drakit's reference NVIDIA driver the way users deploy
// it, on a real local node with a simulated DGX H200, and shows each step.
func demoNVIDIA(ctx context.Context, cfg nvidiaDemoConfig, out, progress io.Writer) (err error) {
	fmt.Fprintf(out, "drakit demo: drakit's reference NVIDIA DRA driver (%s), deployed with Helm as a DaemonSet\n", nvdriver.DriverName)
	fmt.Fprintf(out, "on a real Kubernetes %s node (kubelet, containerd, runc, CDI) with a simulated DGX H200 (8 x H200, no GPU needed)\n", cluster.Version)
	if _, err := os.Stat(cfg.helm); err != nil {
		return fmt.Errorf("helm: %w (install it with: %s)", err, cluster.SetupCommand)
	}
	d := &nvidiaDemo{out: out, users: map[string]string{}}

	t0 := time.Now()
	c, err := cluster.Start(ctx, cluster.WithNode(), cluster.WithDir(cfg.dir), cluster.WithLogWriter(progress), cluster.WithDieWithParent())
	if err != nil {
		return fmt.Errorf("start cluster: %w", err)
	}
	d.c = c
	defer func() {
		fmt.Fprintln(out, "\nstopping the node (its pods, the driver's included; host changes undone) and the control plane")
		err = errors.Join(err, c.Stop())
		fmt.Fprintf(out, "logs are kept in %s/logs\n", c.Dir)
	}()
	d.stepf("cluster: control plane and node %s up in %s", c.NodeName, since(t0))

	t0 = time.Now()
	tarball := filepath.Join(c.Dir, "nvidia-dra-driver-image.tar")
	desc, err := deploy.BuildImage(ctx, deploy.DriverPackage, deploy.Image, tarball)
	if err != nil {
		return err
	}
	if err := c.ImportImage(ctx, tarball); err != nil {
		return err
	}
	d.stepf("image %s: the driver binary (cgo, to load libnvidia-ml) with the C runtime it needs as a one-layer OCI image, no registry, no base image", deploy.Image)
	d.linef("built from %s and imported into the node's containerd in %s (%s)", deploy.DriverPackage, since(t0), desc.Digest[:19])

	t0 = time.Now()
	set := append([]string{demoSharedGPUs}, cfg.set...)
	if err := d.helmInstall(ctx, cfg.helm, set); err != nil {
		return err
	}
	pod, err := d.driverPod(ctx, "")
	if err != nil {
		return err
	}
	devs, err := d.publishedDevices(ctx)
	if err != nil {
		return err
	}
	d.stepf("helm install %s examples/nvidia/deploy/chart -n %s: driver pod %s Running in %s,", deploy.Release, deploy.Namespace, pod.Name, since(t0))
	d.linef("registered with the kubelet through the hostPath plugin folders; it publishes %d devices:", len(devs))
	d.describeDevices(devs)
	classes, err := c.Client.ResourceV1().DeviceClasses().List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("list DeviceClasses: %w", err)
	}
	var names []string
	for _, cl := range classes.Items {
		n := cl.Name
		if cl.Spec.ExtendedResourceName != nil {
			n += " (" + *cl.Spec.ExtendedResourceName + ")"
		}
		names = append(names, n)
	}
	sort.Strings(names)
	d.linef("DeviceClasses from the chart: %s", strings.Join(names, ", "))
	if err := d.picture("the GPUs before any pod"); err != nil {
		return err
	}
	initialMIG, err := d.migUUIDs()
	if err != nil {
		return err
	}

	story := deploy.Story(demoNS, c.Images.Busybox)
	var running []string
	for _, w := range story {
		if err := d.runWorkload(ctx, w); err != nil {
			return err
		}
		if w.Fits {
			running = append(running, w.Name)
		}
	}

	// The driver's pod goes; the DaemonSet brings it back; nothing is lost.
	t0 = time.Now()
	if err := c.Client.CoreV1().Pods(deploy.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		return fmt.Errorf("delete the driver pod: %w", err)
	}
	newPod, err := d.driverPod(ctx, pod.UID)
	if err != nil {
		return err
	}
	stillRunning := 0
	for _, name := range running {
		p, err := c.Client.CoreV1().Pods(demoNS).Get(ctx, name, metav1.GetOptions{})
		if err == nil && p.Status.Phase == corev1.PodRunning {
			stillRunning++
		}
	}
	d.stepf("driver pod %s deleted (grace period 0): the DaemonSet started %s, ready %s later;", pod.Name, newPod.Name, since(t0))
	d.linef("%d of %d pods still run on their devices (the driver's checkpoint keeps their claims prepared)", stillRunning, len(running))

	t0 = time.Now()
	for _, w := range story {
		if err := c.Client.CoreV1().Pods(demoNS).Delete(ctx, w.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
			return fmt.Errorf("delete pod %s: %w", w.Name, err)
		}
	}
	// The pods are gone from the API at once; the kubelet then stops
	// their containers and has the driver unprepare their claims: the
	// driver removes each claim's CDI spec and destroys the MIG devices it
	// made.
	var specs []string
	var mig map[string]bool
	if err := poll(ctx, 2*time.Minute, func(ctx context.Context) (bool, error) {
		specs, _ = filepath.Glob(filepath.Join(c.CDIDir, "*"+nvdriver.DriverName+"*"))
		if mig, err = d.migUUIDs(); err != nil {
			return false, err
		}
		return len(specs) == 0 && len(mig) == len(initialMIG), nil
	}); err != nil {
		return fmt.Errorf("wait for the driver to unprepare the pods' claims (CDI specs left: %v, MIG devices %d, %d before the pods): %w", specs, len(mig), len(initialMIG), err)
	}
	d.users = map[string]string{}
	d.stepf("all pods deleted: the restarted driver unprepared their claims in %s: CDI specs removed, the MIG devices it made destroyed", since(t0))
	if err := d.picture("the GPUs after"); err != nil {
		return err
	}
	// The fleet's shares need GPU 1, which the legacy pod's claim (the
	// scheduler's, for its extended resource) held whole: the garbage
	// collector deletes the story's claims after their pods, and until
	// then the scheduler sees GPU 1 taken.
	if err := poll(ctx, 2*time.Minute, func(ctx context.Context) (bool, error) {
		l, err := c.Client.ResourceV1().ResourceClaims(demoNS).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		for _, claim := range l.Items {
			if claim.Status.Allocation != nil {
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		return fmt.Errorf("wait for the deleted pods' claims to be deallocated: %w", err)
	}
	if err := d.sharedFleet(ctx); err != nil {
		return err
	}

	if !cfg.conformance {
		return nil
	}
	t0 = time.Now()
	rep, err := conformance.Run(ctx, conformance.Config{
		DriverName: nvdriver.DriverName, NodeName: c.NodeName, Client: c.Client,
		RegistrationPath: c.PluginRegistryDir, CDIDirs: []string{c.CDIDir},
		RestartDriver: d.restartDriver, Progress: progress,
		// The driver publishes in a second here; after its restart it
		// publishes the same slices, writes none, and the suite waits
		// this long before it judges them.
		PublishTimeout: cmp.Or(cfg.publishTimeout, 20*time.Second),
	})
	if err != nil {
		return fmt.Errorf("conformance: %w", err)
	}
	d.stepf("conformance suite against the installed driver (the suite plays the kubelet and the scheduler; it restarts the driver by deleting its pod) in %s:", since(t0))
	if err := rep.WriteSummary(out); err != nil {
		return err
	}
	if rep.Failed() {
		_ = rep.WriteDetails(out, false)
		return fmt.Errorf("conformance: %d required (MUST) checks failed", rep.Counts()[conformance.Fail])
	}

	if !cfg.clusterConformance {
		return nil
	}
	// Cluster mode: only a client; real pods through the node's kubelet
	// and containerd.
	t0 = time.Now()
	crep, err := conformance.RunCluster(ctx, conformance.ClusterConfig{
		DriverName: nvdriver.DriverName, NodeName: c.NodeName, Client: c.Client,
		Image: c.Images.Busybox, CDIDirs: []string{c.CDIDir},
		DriverNamespace: deploy.Namespace, DriverPodSelector: deploy.PodSelector,
		Progress: progress, PublishTimeout: cfg.publishTimeout,
	})
	if err != nil {
		return fmt.Errorf("conformance --cluster: %w", err)
	}
	d.stepf("conformance suite in cluster mode (real pods with claims through the node's kubelet and containerd; it replaces the driver's pod) in %s:", since(t0))
	if err := crep.WriteSummary(out); err != nil {
		return err
	}
	if crep.Failed() {
		_ = crep.WriteDetails(out, false)
		return fmt.Errorf("conformance --cluster: %d required (MUST) checks failed", crep.Counts()[conformance.Fail])
	}
	return nil
}

// helmInstall writes the chart out and installs it with the local
// cluster's values and set, waiting for the driver to be ready.
func (d *nvidiaDemo) helmInstall(ctx context.Context, helm string, set []string) error {
	chart := filepath.Join(d.c.Dir, "chart")
	_ = os.RemoveAll(chart)
	if err := deploy.WriteChart(chart); err != nil {
		return err
	}
	u, err := url.Parse(d.c.RESTConfig.Host)
	if err != nil {
		return fmt.Errorf("API server address: %w", err)
	}
	stateDir := filepath.Join(d.c.Dir, "nvml-sim")
	webhookPort, err := deploy.FreeLocalPort()
	if err != nil {
		return err
	}
	d.stateFile = filepath.Join(stateDir, "state.json")
	args := []string{"install", deploy.Release, chart, "--kubeconfig", d.c.Kubeconfig,
		"--namespace", deploy.Namespace, "--create-namespace", "--wait", "--timeout", "3m"}
	for _, v := range append(append(deploy.LocalClusterValues(filepath.Dir(d.c.PluginRegistryDir), d.c.CDIDir, u.Port(), stateDir, webhookPort), deploy.SimulatorValues()...), set...) {
		args = append(args, "--set", v)
	}
	out, err := exec.CommandContext(ctx, helm, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("helm install: %w\n%s", err, out)
	}
	return nil
}

// driverPod waits for a ready driver pod other than the one with UID not.
func (d *nvidiaDemo) driverPod(ctx context.Context, not types.UID) (*corev1.Pod, error) {
	var pod *corev1.Pod
	err := poll(ctx, 2*time.Minute, func(ctx context.Context) (bool, error) {
		l, err := d.c.Client.CoreV1().Pods(deploy.Namespace).List(ctx, metav1.ListOptions{LabelSelector: deploy.PodSelector})
		if err != nil {
			return false, err
		}
		for i := range l.Items {
			p := &l.Items[i]
			if p.DeletionTimestamp != nil || p.UID == not {
				continue
			}
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
					pod = p
					return true, nil
				}
			}
		}
		return false, nil
	})
	if err != nil {
		return nil, fmt.Errorf("wait for a ready driver pod: %w", err)
	}
	return pod, nil
}

// restartDriver is the conformance suite's way to kill the driver: delete
// its pod at once; the DaemonSet starts another.
func (d *nvidiaDemo) restartDriver(ctx context.Context) error {
	l, err := d.c.Client.CoreV1().Pods(deploy.Namespace).List(ctx, metav1.ListOptions{LabelSelector: deploy.PodSelector})
	if err != nil {
		return err
	}
	for _, p := range l.Items {
		if err := d.c.Client.CoreV1().Pods(deploy.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	// The suite's contract (conformance.Config.RestartDriver): return once
	// the old driver is gone. Until its pod object is, its process may
	// still serve the socket the suite would dial next; wait for that and
	// for the DaemonSet's replacement to be ready.
	for _, p := range l.Items {
		err := poll(ctx, 2*time.Minute, func(ctx context.Context) (bool, error) {
			_, err := d.c.Client.CoreV1().Pods(deploy.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return true, nil
			}
			return false, err
		})
		if err != nil {
			return fmt.Errorf("wait for driver pod %s to be gone: %w", p.Name, err)
		}
		if _, err := d.driverPod(ctx, p.UID); err != nil {
			return err
		}
	}
	return nil
}

func (d *nvidiaDemo) publishedDevices(ctx context.Context) ([]resourceapi.Device, error) {
	l, err := d.c.Client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.driver=" + nvdriver.DriverName})
	if err != nil {
		return nil, fmt.Errorf("list ResourceSlices: %w", err)
	}
	var devs []resourceapi.Device
	for _, s := range l.Items {
		devs = append(devs, s.Spec.Devices...)
	}
	return devs, nil
}

func strAttr(dev resourceapi.Device, name string) string {
	if a, ok := dev.Attributes[resourceapi.QualifiedName(name)]; ok && a.StringValue != nil {
		return *a.StringValue
	}
	return ""
}

func intAttr(dev resourceapi.Device, name string) int64 {
	if a, ok := dev.Attributes[resourceapi.QualifiedName(name)]; ok && a.IntValue != nil {
		return *a.IntValue
	}
	return -1
}

// describeDevices prints, per GPU, how the driver publishes it.
func (d *nvidiaDemo) describeDevices(devs []resourceapi.Device) {
	type gpu struct {
		mode    string
		full    int
		mig     int
		dynamic int
		product string
	}
	gpus := map[int64]*gpu{}
	for _, dev := range devs {
		i := intAttr(dev, mig.AttrIndex)
		g := gpus[i]
		if g == nil {
			g = &gpu{}
			gpus[i] = g
		}
		g.mode, g.product = strAttr(dev, nvdriver.AttrMIGMode), strAttr(dev, nvdriver.AttrProductName)
		switch {
		case strAttr(dev, mig.AttrType) == nvdriver.TypeGPU:
			g.full++
		case len(dev.ConsumesCounters) > 0:
			g.dynamic++
		default:
			g.mig++
		}
	}
	idx := make([]int64, 0, len(gpus))
	for i := range gpus {
		idx = append(idx, i)
	}
	sort.Slice(idx, func(a, b int) bool { return idx[a] < idx[b] })
	for _, i := range idx {
		g := gpus[i]
		var what string
		switch g.mode {
		case nvdriver.ModeFull:
			what = "MIG off: one full-GPU device"
		case nvdriver.ModeStatic:
			what = fmt.Sprintf("static MIG: the administrator's %d MIG devices, as they are", g.mig)
		case nvdriver.ModeDynamic:
			switch {
			case g.dynamic > 0: // -mig-publication=placements (the chart's default)
				what = fmt.Sprintf("dynamic MIG: %d profile x placement devices sharing the GPU's counters, made at prepare", g.dynamic)
			case g.mig > 0: // -mig-publication=layout
				what = fmt.Sprintf("dynamic MIG, laid out on demand: the %d MIG devices of its current layout, made at prepare", g.mig)
			default:
				what = "dynamic MIG, laid out on demand: idle, offered whole"
			}
		default:
			what = fmt.Sprintf("%d devices", g.full+g.mig+g.dynamic)
		}
		d.linef("  GPU %d (%s): %s", i, g.product, what)
	}
}

// runWorkload runs one story pod, waits until it runs (or stays Pending,
// for the one that cannot fit) and shows what it got and the GPUs after.
func (d *nvidiaDemo) runWorkload(ctx context.Context, w deploy.Workload) error {
	cs := d.c.Client
	if w.Template != nil {
		if _, err := cs.ResourceV1().ResourceClaimTemplates(demoNS).Create(ctx, w.Template, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create ResourceClaimTemplate %s: %w", w.Name, err)
		}
	}
	t0 := time.Now()
	if _, err := cs.CoreV1().Pods(demoNS).Create(ctx, w.Pod, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create pod %s: %w", w.Name, err)
	}
	if !w.Fits {
		reason, err := waitUnschedulable(ctx, cs, w.Name)
		if err != nil {
			return err
		}
		d.stepf("pod %s asks for %s: stays Pending;", w.Name, w.Ask)
		d.linef("the scheduler says: %s", reason)
		return nil
	}
	var pod *corev1.Pod
	var seen deploy.Seen
	if err := poll(ctx, 3*time.Minute, func(ctx context.Context) (bool, error) {
		p, err := cs.CoreV1().Pods(demoNS).Get(ctx, w.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded {
			return false, fmt.Errorf("pod %s ended: %s %s", w.Name, p.Status.Phase, p.Status.Message)
		}
		pod = p
		if p.Status.Phase != corev1.PodRunning {
			return false, nil
		}
		logs, err := cs.CoreV1().Pods(demoNS).GetLogs(w.Name, &corev1.PodLogOptions{}).DoRaw(ctx)
		if err != nil {
			return false, nil
		}
		seen = deploy.ParseSeen(string(logs))
		return seen.Complete, nil
	}); err != nil {
		phase := "unknown"
		if pod != nil {
			phase = string(pod.Status.Phase)
		}
		return fmt.Errorf("pod %s not running with its devices (phase %s): %w", w.Name, phase, err)
	}
	claimName := ""
	for _, s := range pod.Status.ResourceClaimStatuses {
		if s.ResourceClaimName != nil {
			claimName = *s.ResourceClaimName
		}
	}
	how := "from its template"
	if s := pod.Status.ExtendedResourceClaimStatus; s != nil {
		claimName, how = s.ResourceClaimName, "made by the scheduler for the extended resource"
	}
	claim, err := cs.ResourceV1().ResourceClaims(demoNS).Get(ctx, claimName, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("get claim of pod %s: %w", w.Name, err)
	}
	var got []string
	if claim.Status.Allocation != nil {
		for _, r := range claim.Status.Allocation.Devices.Results {
			got = append(got, r.Device)
		}
	}
	d.stepf("pod %s asks for %s", w.Name, w.Ask)
	d.linef("Running in %s; claim %s (%s) got %s", since(t0), claim.Name, how, strings.Join(got, " + "))
	d.linef("the container saw devices %s (%s=%s: they come from CDI, not the legacy hook)", strings.Join(seen.UUIDs, ","), nvdriver.EnvVisibleDevices, seen.VisibleDevices)
	var env []string
	for k, v := range seen.Env {
		if k != nvdriver.EnvClaimFileDir {
			env = append(env, k+"="+v)
		}
	}
	sort.Strings(env)
	for _, e := range env {
		d.linef("                  %s", e)
	}
	if f := seen.Env[nvdriver.EnvClaimFileDir]; f != "" {
		d.linef("and its claim's devices file in %s: %s", f, oneLine(seen.DevicesFiles, 160))
	}
	for _, u := range seen.UUIDs {
		d.users[u] = w.Name
	}
	return d.picture("the GPUs now")
}

func oneLine(s string, max int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > max {
		s = s[:max] + "..."
	}
	return s
}

// migUUIDs returns the UUIDs of the simulator's MIG devices.
func (d *nvidiaDemo) migUUIDs() (map[string]bool, error) {
	sim, err := nvmlsim.Open(d.stateFile, nvmlsim.WithServer("dgx-h200"))
	if err != nil {
		return nil, fmt.Errorf("read the simulator's state: %w", err)
	}
	defer sim.Close()
	gpus, err := sim.GPUs()
	if err != nil {
		return nil, fmt.Errorf("read the simulator's GPUs: %w", err)
	}
	out := map[string]bool{}
	for _, g := range gpus {
		if mode, err := sim.MigMode(g.Index); err != nil || !mode.Current {
			continue
		}
		gis, err := sim.GPUInstances(g.Index)
		if err != nil {
			return nil, fmt.Errorf("MIG devices of GPU %d: %w", g.Index, err)
		}
		for _, gi := range gis {
			for _, ci := range gi.ComputeInstances {
				out[ci.UUID] = true
			}
		}
	}
	return out, nil
}

// picture draws every GPU from the simulator's state, as the host sees
// it: a full GPU as one box, a MIG GPU's instances on its eight memory
// slices (mig.Product.Picture), "*" and the pod's name on what a pod
// uses.
func (d *nvidiaDemo) picture(title string) error {
	sim, err := nvmlsim.Open(d.stateFile, nvmlsim.WithServer("dgx-h200"))
	if err != nil {
		return fmt.Errorf("read the simulator's state: %w", err)
	}
	defer sim.Close()
	p := sim.Product()
	gpus, err := sim.GPUs()
	if err != nil {
		return fmt.Errorf("read the simulator's GPUs: %w", err)
	}
	d.linef("%s (memory slices of each GPU; '*' in use; dots free):", title)
	for _, g := range gpus {
		label := fmt.Sprintf("GPU %d", g.Index)
		mode, err := sim.MigMode(g.Index)
		if err != nil {
			return fmt.Errorf("MIG mode of GPU %d: %w", g.Index, err)
		}
		if !mode.Current {
			text := "full GPU (MIG off)"
			if who := d.users[g.UUID]; who != "" {
				text = "full GPU* " + who
			}
			width := p.MemorySlices*9 - 1
			d.linef("  %-12s |%s|", label, text+strings.Repeat(" ", max(0, width-len(text))))
			continue
		}
		gis, err := sim.GPUInstances(g.Index)
		if err != nil {
			return fmt.Errorf("MIG devices of GPU %d: %w", g.Index, err)
		}
		var l mig.Layout
		var who []string
		for _, gi := range gis {
			in := mig.Instance{Start: gi.Placement.Start, Profile: fmt.Sprintf("id%d", gi.ProfileID)}
			for _, pr := range p.Profiles {
				if pr.ID == gi.ProfileID {
					in.Profile = pr.Name
				}
			}
			for _, ci := range gi.ComputeInstances {
				if u := d.users[ci.UUID]; u != "" {
					in.InUse = true
					who = append(who, fmt.Sprintf("%s@%d: %s", in.Profile, in.Start, u))
				}
			}
			l = append(l, in)
		}
		line := p.Picture(label+" MIG", l)
		if len(who) > 0 {
			line += " " + strings.Join(who, ", ")
		}
		d.linef("  %s", line)
	}
	return nil
}
