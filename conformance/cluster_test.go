package conformance_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/drakit/drakit/conformance"
	"github.com/drakit/drakit/internal/cluster"
	"github.com/drakit/drakit/internal/cluster/clustertest"
)

// clusterCases are the test driver's variants that cluster mode is run
// against, each deployed as a DaemonSet of its own driver name on the
// real node. For a defect, cluster mode must fail the check named in
// want (only the checks in only are reported), and socket mode, run
// against the same deployed driver, must catch it with check socket; a
// correct variant must get exactly want (a defect too, where want is
// set). Defects that no pod can show
// are listed, with the reason, in doc.go. Keep in sync with the table
// there.
var clusterCases = []struct {
	name   string
	args   []string // test driver flags
	only   []string // cluster checks reported; nil: all
	want   map[string]conformance.Status
	socket string // defects: the socket-mode check that catches it
	// noCDI: cluster mode also catches it without the node's CDI specs.
	noCDI bool
	// ci: run in the README's test command; the others only with
	// DRAKIT_CONFORMANCE_MATRIX=1.
	ci bool
	// host: the driver runs as a process on the node, not as a pod;
	// cluster mode restarts it with ClusterConfig.RestartDriver.
	host bool
}{
	// Correct drivers.
	{name: "correct", ci: true},
	{name: "names-if-needed", args: []string{"-names-if-needed"}, only: []string{"pod.request-names", "pod.two-claims"}, ci: true},
	{name: "shared-spec", args: []string{"-shared-spec"}, only: []string{"pod.unprepare", "pod.driver-restart", "pod.restart-same-edits"}},
	{name: "no-cdi", args: []string{"-no-cdi"}, only: []string{"pod.starts", "pod.cdi-edits", "pod.two-devices", "pod.request-names", "pod.unprepare"},
		want: map[string]conformance.Status{"pod.cdi-edits": conformance.Skip, "pod.two-devices": conformance.Skip, "pod.request-names": conformance.Skip}},
	{name: "pods-only", args: []string{"-pods-only"}, only: []string{"pod.starts", "pod.shared-claim", "pod.two-claims"}},
	{name: "health-empty", args: []string{"-health-empty"}, only: []string{"pod.starts", "pod.health"},
		want: map[string]conformance.Status{"pod.health": conformance.Skip}},
	{name: "one-device", args: []string{"-devices", "1", "-partitionable=false", "-shared=false", "-health=false"},
		want: map[string]conformance.Status{
			"pod.isolation": conformance.Skip, "pod.two-devices": conformance.Skip, "pod.request-names": conformance.Skip,
			"pod.two-claims": conformance.Skip, "pod.two-claims-env": conformance.Skip, "pod.restart-same-edits": conformance.Skip, "pod.health": conformance.Skip,
		}},

	// Defects a pod shows.
	// Its devices collide across claims too (pod.two-claims-env, SHOULD,
	// judged with the CDI specs only).
	{name: "colliding-env", args: []string{"-defect", "colliding-env"}, only: []string{"pod.two-devices"}, socket: "prepare.cdi-env", noCDI: true, ci: true},
	{name: "colliding-env-claims", args: []string{"-defect", "colliding-env"}, only: []string{"pod.two-claims-env"}, socket: "prepare.cdi-env",
		want: map[string]conformance.Status{"pod.two-claims-env": conformance.Warn}},
	{name: "cdi-unresolvable", args: []string{"-defect", "cdi-unresolvable"}, only: []string{"pod.starts"}, socket: "prepare.cdi-resolve", noCDI: true},
	{name: "bad-cdi-id", args: []string{"-defect", "bad-cdi-id"}, only: []string{"pod.starts"}, socket: "prepare.cdi-ids-format"},
	{name: "wrong-request-names", args: []string{"-defect", "wrong-request-names"}, only: []string{"pod.request-names"}, socket: "prepare.request-names", noCDI: true, ci: true},
	{name: "missing-request-names", args: []string{"-defect", "missing-request-names"}, only: []string{"pod.request-names"}, socket: "prepare.request-names"},
	{name: "skip-claim", args: []string{"-defect", "skip-claim"}, only: []string{"pod.two-claims"}, socket: "prepare.result-per-claim"},
	{name: "leak-cdi", args: []string{"-defect", "leak-cdi"}, only: []string{"pod.unprepare"}, socket: "unprepare.cleanup"},
	{name: "leak-cdi-entry", args: []string{"-defect", "leak-cdi-entry", "-shared-spec"}, only: []string{"pod.unprepare"}, socket: "unprepare.cleanup"},
	{name: "admin-guard", args: []string{"-defect", "admin-guard"}, only: []string{"pod.admin-access"}, socket: "allocation.admin-access"},
	{name: "forget-on-restart", args: []string{"-defect", "forget-on-restart"}, only: []string{"pod.driver-restart"}, socket: "restart.unprepare", ci: true},
	{name: "restart-new-edits", args: []string{"-defect", "restart-new-edits"}, only: []string{"pod.restart-same-edits"}, socket: "restart.still-prepared", noCDI: true},
	{name: "unstable-names", args: []string{"-defect", "unstable-names"}, only: []string{"pod.restart-device-names"}, socket: "restart.device-names"},

	// The driver as a host process, restarted by a restart hook (kill -9
	// and start): the restart checks judge it as they judge a pod.
	{name: "host", host: true, only: []string{"pod.driver-restart", "pod.restart-same-edits", "pod.restart-device-names"}, ci: true},
	{name: "host-forget-on-restart", host: true, args: []string{"-defect", "forget-on-restart"}, only: []string{"pod.driver-restart"}, socket: "restart.unprepare", ci: true},
}

// TestCluster runs cluster mode on the local real node against the test
// driver deployed as DaemonSets (or host processes), one per case of
// clusterCases, side by side: the correct variants get the results they
// should, and each defect is caught by cluster mode and by socket mode
// run against the same deployed driver, so that both modes agree. The
// README's test command runs the cases marked ci;
// DRAKIT_CONFORMANCE_MATRIX=1 runs all, DRAKIT_CONFORMANCE_CASES=a,b
// those named.
func TestCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster with a real node")
	}
	all := os.Getenv("DRAKIT_CONFORMANCE_MATRIX") == "1"
	// DRAKIT_CONFORMANCE_CASES=a,b runs those cases only.
	var only []string
	if v := os.Getenv("DRAKIT_CONFORMANCE_CASES"); v != "" {
		only = strings.Split(v, ",")
	}
	bin := buildStaticTestDriver(t)
	c := clustertest.Start(t, cluster.WithNode())
	ctx, cancel := context.WithTimeout(t.Context(), 12*time.Minute)
	defer cancel()

	type deployed struct {
		driver string
		set    testDriverSet // a DaemonSet's pods
		host   *hostDriver   // or a host process
	}
	drivers := map[string]deployed{}
	for _, tc := range clusterCases {
		switch {
		case only != nil && !slices.Contains(only, tc.name):
			continue
		case only == nil && !tc.ci && !all:
			continue
		}
		driver := tc.name + ".cluster.drakit.dev"
		if tc.host {
			drivers[tc.name] = deployed{driver: driver, host: startHostDriver(t, c, bin, driver, tc.args...)}
			continue
		}
		drivers[tc.name] = deployed{driver: driver, set: deployTestDriver(t, ctx, c, bin, driver, "cluster-"+tc.name, tc.args...)}
	}
	for name, d := range drivers {
		if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
			l, err := c.Client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.driver=" + d.driver})
			return err == nil && len(l.Items) > 0, nil
		}); err != nil {
			t.Fatalf("driver %s (%s) publishes no slices: %v", d.driver, name, err)
		}
	}

	// Lines of the agreement table, printed at the end.
	var mu sync.Mutex
	var table []string
	row := func(line string) {
		mu.Lock()
		defer mu.Unlock()
		table = append(table, line)
	}
	t.Cleanup(func() {
		for _, l := range table {
			t.Log(l)
		}
	})

	// All cases at once, each subtest in a goroutine of its own (not
	// t.Parallel, which go test limits to GOMAXPROCS at a time): the
	// runs mostly wait for pods and the driver restarts.
	var wg sync.WaitGroup
	for _, tc := range clusterCases {
		d, ok := drivers[tc.name]
		if !ok {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			t.Run(tc.name, func(t *testing.T) {
				cdiModes := []bool{true}
				if tc.noCDI {
					cdiModes = append(cdiModes, false)
				}
				var verdicts []string
				for _, cdi := range cdiModes {
					cc := conformance.ClusterConfig{
						DriverName: d.driver, NodeName: c.NodeName, Client: c.Client,
						Image: c.Images.Busybox, PodTimeout: time.Minute, Only: tc.only,
						DriverNamespace: testDriverNS, DriverPodSelector: d.set.selector(),
					}
					if d.host != nil {
						cc.DriverNamespace, cc.DriverPodSelector, cc.RestartDriver = "", "", d.host.restart
					}
					if cdi {
						cc.CDIDirs = []string{c.CDIDir}
					}
					if tc.socket != "" {
						// A defect's pod may never start: wait less.
						cc.PodTimeout = 40 * time.Second
					}
					rep, err := conformance.RunCluster(ctx, cc)
					if err != nil {
						t.Fatalf("RunCluster: %v", err)
					}
					got := map[string]conformance.Status{}
					for _, res := range rep.Results {
						t.Logf("cluster mode (CDI specs read: %v): %s %s: %s", cdi, res.ID, res.Status, res.Message)
						if res.Status != conformance.Pass {
							got[res.ID] = res.Status
							verdicts = append(verdicts, res.ID+" "+string(res.Status))
						}
					}
					want := tc.want
					if tc.socket != "" && want == nil {
						want = map[string]conformance.Status{tc.only[0]: conformance.Fail}
					}
					if want == nil {
						want = map[string]conformance.Status{}
					}
					if diff := cmp.Diff(want, got); diff != "" {
						t.Errorf("cluster mode (CDI specs read: %v): checks that did not pass (-want +got):\n%s", cdi, diff)
					}
					wantN := len(tc.only)
					if tc.only == nil {
						wantN = len(conformance.ClusterChecks())
					}
					if len(rep.Results) != wantN {
						t.Errorf("%d results, want %d", len(rep.Results), wantN)
					}
				}
				// Its pods are gone and its namespace is being deleted.
				sel := labels.SelectorFromSet(map[string]string{conformance.ClusterDriverLabel: d.driver}).String()
				left, err := c.Client.CoreV1().Pods("").List(ctx, metav1.ListOptions{LabelSelector: sel})
				if err != nil {
					t.Fatal(err)
				}
				for _, p := range left.Items {
					t.Errorf("pod %s/%s left after the run", p.Namespace, p.Name)
				}
				nss, err := c.Client.CoreV1().Namespaces().List(ctx, metav1.ListOptions{LabelSelector: sel})
				if err != nil {
					t.Fatal(err)
				}
				for _, ns := range nss.Items {
					if ns.DeletionTimestamp == nil {
						t.Errorf("namespace %s left after the run", ns.Name)
					}
				}
				if tc.socket == "" {
					row(tc.name + ": cluster mode " + verdictLine(verdicts))
					return
				}

				// Socket mode against the same deployed driver.
				restart := func(ctx context.Context) error { return d.host.restart(ctx) }
				if d.host == nil {
					pod, err := d.set.running(ctx, "")
					if err != nil {
						t.Fatal(err)
					}
					restart = func(ctx context.Context) error {
						err := c.Client.CoreV1().Pods(testDriverNS).Delete(ctx, pod, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
						if err != nil && !apierrors.IsNotFound(err) {
							return err
						}
						pod, err = d.set.running(ctx, pod)
						return err
					}
				}
				rep, err := conformance.Run(ctx, conformance.Config{
					DriverName: d.driver, NodeName: c.NodeName, Client: c.Client,
					RegistrationPath: c.PluginRegistryDir, CDIDirs: []string{c.CDIDir},
					Only: []string{tc.socket}, PublishTimeout: time.Minute,
					RestartDriver: restart,
				})
				if err != nil {
					t.Fatalf("Run: %v", err)
				}
				res, _ := rep.Result(tc.socket)
				if res.Status != conformance.Fail {
					t.Errorf("socket mode: %s %s (%s), want fail", tc.socket, res.Status, res.Message)
				} else {
					t.Logf("socket mode caught it: %s", res.Message)
				}
				row(tc.name + ": cluster mode " + verdictLine(verdicts) + "; socket mode " + tc.socket + " " + string(res.Status))
			})
		}()
	}
	wg.Wait()
}

// hostDriver is the test driver running as a process on the real node,
// registered with its kubelet, as a driver run by systemd would be.
type hostDriver struct {
	t    *testing.T
	args []string
	mu   sync.Mutex
	cmd  *exec.Cmd
	out  *syncWriter
}

// startHostDriver starts the test driver bin named driver on the node of
// c, with further test driver flags args, and stops it by PID when the
// test ends.
func startHostDriver(t *testing.T, c *cluster.Cluster, bin, driver string, args ...string) *hostDriver {
	t.Helper()
	h := &hostDriver{t: t, out: &syncWriter{w: &bytes.Buffer{}}, args: append([]string{bin, "-driver-name", driver, "-node-name", c.NodeName,
		"-kubeconfig", c.Kubeconfig, "-registrar-dir", c.PluginRegistryDir, "-plugin-dir", filepath.Join(c.PluginsDir, driver),
		"-cdi-dir", c.CDIDir, "-health-timeout", "2s"}, args...)}
	if err := h.start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		h.stop(syscall.SIGTERM)
		if t.Failed() {
			t.Logf("host driver %s output (tail):\n%s", driver, tail(h.out.w.String(), 3000))
		}
	})
	return h
}

func (h *hostDriver) start() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.cmd = exec.Command(h.args[0], h.args[1:]...)
	h.cmd.Stdout, h.cmd.Stderr = h.out, h.out
	h.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	return h.cmd.Start()
}

func (h *hostDriver) stop(sig syscall.Signal) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.cmd == nil {
		return
	}
	_ = syscall.Kill(-h.cmd.Process.Pid, sig)
	_ = h.cmd.Wait()
	h.cmd = nil
}

// restart is a restart hook: kill -9, then start again.
func (h *hostDriver) restart(context.Context) error {
	h.stop(syscall.SIGKILL)
	return h.start()
}

// verdictLine lists the checks that did not pass, or says all passed.
func verdictLine(v []string) string {
	if len(v) == 0 {
		return "all pass"
	}
	return strings.Join(v, ", ")
}
