package conformance_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"

	"github.com/drakit/drakit/conformance"
	"github.com/drakit/drakit/conformance/internal/testdriver"
	"github.com/drakit/drakit/internal/cluster"
	"github.com/drakit/drakit/internal/cluster/clustertest"
)

// The test binary doubles as the test driver: started with this variable
// set it runs testdriver.Main instead of the tests, so that the suite can
// kill and restart a real process.
const driverEnv = "DRAKIT_CONFORMANCE_TESTDRIVER"

func TestMain(m *testing.M) {
	if os.Getenv(driverEnv) == "1" {
		if err := testdriver.Main(os.Args[1:]); err != nil {
			fmt.Fprintf(os.Stderr, "testdriver: %v\n", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// defects lists the broken variants of the test driver and the check that
// must catch each (fail for MUST, warn for SHOULD). Keep in sync with the
// table in doc.go.
var defects = []struct {
	name, defect string
	args         []string // further flags of the test driver
	check        string
	// alone: no other check fails (the defect is not blamed on checks
	// it does not break).
	alone bool
}{
	{"forget-on-restart", "forget-on-restart", nil, "restart.unprepare", false},
	{"non-idempotent", "non-idempotent", nil, "prepare.idempotent", false},
	{"wrong-request-names", "wrong-request-names", nil, "prepare.request-names", false},
	{"missing-request-names", "missing-request-names", nil, "prepare.request-names", false},
	// One shared device and nothing else: the suite must still build a
	// claim with two requests, on two shares of that device.
	{"missing-request-names-shared", "missing-request-names", []string{"-devices", "0", "-partitionable=false", "-health=false"}, "prepare.request-names", false},
	{"cdi-unresolvable", "cdi-unresolvable", nil, "prepare.cdi-resolve", false},
	{"bad-cdi-id", "bad-cdi-id", nil, "prepare.cdi-ids-format", false},
	{"bad-attributes", "bad-attributes", nil, "slices.standard-attributes", false},
	{"unprepare-unknown-fails", "unprepare-unknown-fails", nil, "unprepare.unknown-claim", false},
	{"crash-on-empty", "crash-on-empty", nil, "robust.empty-request", false},
	{"no-guard", "no-guard", nil, "prepare.device-in-use", false},
	{"leak-cdi", "leak-cdi", nil, "unprepare.cleanup", false},
	{"wrong-device", "wrong-device", nil, "prepare.devices-match", false},
	{"skip-claim", "skip-claim", nil, "prepare.result-per-claim", false},
	{"admin-guard", "admin-guard", nil, "allocation.admin-access", false},
	{"other-driver", "other-driver", nil, "robust.other-driver", false},
	{"broken-counters", "broken-counters", nil, "slices.counters", false},
	{"health-unknown-device", "health-unknown-device", nil, "health.initial-report", false},
	{"health-stale", "health-stale", nil, "health.refresh", false},
	{"health-silent", "health-silent", nil, "health.coverage", false},
	{"drop-share-id", "drop-share-id", nil, "allocation.share-id", false},
	{"colliding-env", "colliding-env", nil, "prepare.cdi-env", false},
	// A spec file shared by all claims, that stays: only its content
	// tells whether unprepare cleaned up.
	{"leak-cdi-entry", "leak-cdi-entry", []string{"-shared-spec"}, "unprepare.cleanup", false},
	{"restart-new-edits", "restart-new-edits", nil, "restart.still-prepared", false},
	// Only restart.device-names: the checks after the restart allocate
	// the devices the restarted driver publishes.
	{"unstable-names", "unstable-names", nil, "restart.device-names", true},
	{"health-unknown-refresh", "health-unknown-refresh", nil, "health.refresh", false},
	// The liveness probe after registration.endpoint (and after each
	// check until the first prepare) ends the driver: reported by
	// robust.liveness-probe, the checks it followed pass.
	{"crash-before-prepare", "crash-before-prepare", nil, livenessProbe, true},
	// Two shares of one device in one claim, one variable per share in
	// one CDI device.
	{"env-per-share", "env-per-share", nil, "prepare.cdi-env", true},
}

const livenessProbe = "robust.liveness-probe"

// variants lists correct drivers: each must pass every MUST check. want
// holds exactly the checks that do not pass, with their status: skips
// where the suite cannot set the situation up, warnings where the
// variant departs from advice. Keep in sync with the table in doc.go.
var variants = []struct {
	name  string
	args  []string
	extra bool // run the extra claim (needs two free devices)
	want  map[string]conformance.Status
}{
	{"full", nil, true, nil},
	{"one-device", []string{"-devices", "1", "-partitionable=false", "-shared=false", "-health=false"}, false, map[string]conformance.Status{
		"slices.counters": conformance.Skip, "allocation.counters": conformance.Skip,
		"allocation.shared": conformance.Skip, "allocation.share-id": conformance.Skip,
		"prepare.request-names": conformance.Skip, "prepare.concurrent": conformance.Skip, "prepare.extra-claims": conformance.Skip,
		"health.initial-report": conformance.Skip, "health.coverage": conformance.Skip, "health.refresh": conformance.Skip,
	}},
	{"one-shared-device", []string{"-devices", "0", "-partitionable=false", "-health=false"}, false, map[string]conformance.Status{
		"slices.counters": conformance.Skip, "allocation.counters": conformance.Skip,
		"prepare.extra-claims": conformance.Skip, "prepare.device-in-use": conformance.Skip,
		"health.initial-report": conformance.Skip, "health.coverage": conformance.Skip, "health.refresh": conformance.Skip,
	}},
	{"omit-share-id", []string{"-omit-share-id"}, true, map[string]conformance.Status{
		"allocation.share-id": conformance.Warn,
	}},
	{"no-request-policy", []string{"-no-request-policy"}, true, nil},
	{"counters-only", []string{"-devices", "0", "-shared=false"}, false, map[string]conformance.Status{
		"allocation.every-device": conformance.Skip,
		"allocation.shared":       conformance.Skip, "allocation.share-id": conformance.Skip,
		"prepare.concurrent": conformance.Skip, "prepare.extra-claims": conformance.Skip,
	}},
	{"pods-only", []string{"-pods-only"}, true, nil},
	{"no-cdi", []string{"-no-cdi"}, true, map[string]conformance.Status{
		"allocation.share-id":    conformance.Skip,
		"prepare.cdi-ids-format": conformance.Skip, "prepare.cdi-resolve": conformance.Skip, "prepare.cdi-inject": conformance.Skip,
		"prepare.cdi-env": conformance.Skip,
	}},
	{"names-if-needed", []string{"-names-if-needed"}, true, nil},
	{"health-empty", []string{"-health-empty"}, true, map[string]conformance.Status{
		"health.coverage": conformance.Warn, "health.refresh": conformance.Skip,
	}},
	{"shared-spec", []string{"-shared-spec"}, true, nil},
	// Run with Config.FeatureGates[DRAListTypeAttributes] (the test's
	// cluster has it on).
	{"pcie-root-list", []string{"-pcie-root-list"}, true, nil},
	// Two partitionable cards, each listing its whole device first: the
	// main claims take halves, and the extra claim (one device) still
	// fits next to them.
	{"cards", []string{"-devices", "0", "-shared=false", "-partitionable=false", "-cards", "2"}, true, map[string]conformance.Status{
		"allocation.every-device": conformance.Skip,
		"allocation.shared":       conformance.Skip, "allocation.share-id": conformance.Skip,
		"prepare.concurrent": conformance.Skip,
	}},
}

const nodeName = "conformance-node"

// config returns a Config that starts the test driver named name (a DNS
// label) with defect (or none) and further flags.
func config(t *testing.T, c *cluster.Cluster, name, defect string, extraArgs ...string) (conformance.Config, *bytes.Buffer) {
	t.Helper()
	// Unix socket paths are limited to 108 bytes: keep the folder short.
	dir, err := os.MkdirTemp("", "cf")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	name += ".conformance.drakit.dev"
	reg, plugins, cdi := filepath.Join(dir, "reg"), filepath.Join(dir, "p"), filepath.Join(dir, "cdi")
	for _, d := range []string{reg, plugins, cdi} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	args := []string{os.Args[0],
		"-driver-name", name, "-node-name", nodeName, "-kubeconfig", c.Kubeconfig,
		"-registrar-dir", reg, "-plugin-dir", plugins, "-cdi-dir", cdi,
		"-health-timeout", "2s", "-v", "2"}
	if defect != "" {
		args = append(args, "-defect", defect)
	}
	args = append(args, extraArgs...)
	var out bytes.Buffer
	var progress bytes.Buffer
	cfg := conformance.Config{
		DriverName:       name,
		NodeName:         nodeName,
		Client:           c.Client,
		RegistrationPath: reg,
		CDIDirs:          []string{cdi},
		StartCommand:     args,
		StartEnv:         []string{driverEnv + "=1"},
		DriverOutput:     &syncWriter{w: &out},
		DriverLog:        filepath.Join(dir, "driver.log"),
		Progress:         &progress,
		PublishTimeout:   30 * time.Second,
		ExtraClaims: []resourceapi.ResourceClaimSpec{{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{
			{Name: "pair", Exactly: &resourceapi.ExactDeviceRequest{AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 2}},
		}}}},
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("progress:\n%s", progress.String())
			t.Logf("driver output (tail):\n%s", tail(out.String(), 4000))
		}
	})
	return cfg, &out
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// TestDrivers runs the suite against every correct variant of the test
// driver (none may fail a MUST check) and every broken one (its check must
// catch it), side by side on one control plane.
func TestDrivers(t *testing.T) {
	// DRAListTypeAttributes on, for the pcie-root-list variant.
	c := clustertest.Start(t, cluster.WithFeatureGates(map[string]bool{conformance.GateListTypeAttributes: true}))
	if err := c.AddFakeNode(t.Context(), nodeName, nil, nil); err != nil {
		t.Fatalf("add fake node: %v", err)
	}

	for _, v := range variants {
		t.Run("correct/"+v.name, func(t *testing.T) {
			t.Parallel()
			cfg, _ := config(t, c, "v-"+v.name, "", v.args...)
			if !v.extra {
				cfg.ExtraClaims = nil
			}
			if v.name == "cards" {
				cfg.ExtraClaims = []resourceapi.ResourceClaimSpec{claimFor(1)}
			}
			if v.name == "pcie-root-list" {
				cfg.FeatureGates = map[string]bool{conformance.GateListTypeAttributes: true}
			}
			var rep *conformance.Report
			if v.name == "full" {
				// The vendor's entry point: one subtest per check.
				rep = conformance.Test(t, cfg)
			} else {
				var err error
				if rep, err = conformance.Run(t.Context(), cfg); err != nil {
					t.Fatalf("Run: %v", err)
				}
			}
			got := map[string]conformance.Status{}
			for _, res := range rep.Results {
				if res.Status != conformance.Pass {
					got[res.ID] = res.Status
					t.Logf("%s %s: %s", res.ID, res.Status, res.Message)
				}
				if strings.Contains(res.Message, "<nil>") {
					t.Errorf("%s: message contains <nil>: %s", res.ID, res.Message)
				}
			}
			want := v.want
			if want == nil {
				want = map[string]conformance.Status{}
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("checks that did not pass (-want +got):\n%s", diff)
			}
			if rep.Failed() {
				t.Errorf("a correct driver failed the run")
			}
			if len(rep.Results) != len(conformance.Checks()) {
				t.Errorf("got %d results, want one per check (%d)", len(rep.Results), len(conformance.Checks()))
			}
		})
	}

	t.Run("runner", func(t *testing.T) {
		t.Parallel()
		testRunner(t, c)
	})

	for _, d := range defects {
		t.Run("defect/"+d.name, func(t *testing.T) {
			t.Parallel()
			cfg, _ := config(t, c, "d-"+d.name, d.defect, d.args...)
			rep, err := conformance.Run(t.Context(), cfg)
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
			res, ok := rep.Result(d.check)
			if !ok {
				t.Fatalf("no result for check %s", d.check)
			}
			want := conformance.Fail
			if res.Level == conformance.Should {
				want = conformance.Warn
			}
			if res.Status != want {
				t.Errorf("defect %s (%s): check %s is %s (%s), want %s", d.defect, testdriver.Defects[d.defect], d.check, res.Status, res.Message, want)
			} else {
				t.Logf("caught by %s: %s", d.check, res.Message)
			}
			if rep.Failed() != (want == conformance.Fail) {
				t.Errorf("report Failed() = %v, want %v", rep.Failed(), want == conformance.Fail)
			}
			if d.alone {
				for _, other := range rep.Results {
					if other.ID != d.check && other.Status == conformance.Fail {
						t.Errorf("defect %s fails %s too: %s", d.defect, other.ID, other.Message)
					}
				}
			}
			if d.defect == "crash-before-prepare" {
				for _, id := range []string{"registration.endpoint", "registration.notify"} {
					if r, _ := rep.Result(id); r.Status != conformance.Pass {
						t.Errorf("%s: %s %s; want pass (the liveness probe after it ended the driver, not its own call)", id, r.Status, r.Message)
					}
				}
				if !strings.Contains(res.Message, "the liveness probe after check registration.endpoint (NodeUnprepareResources for claim alive-probe, never prepared) ended the driver") {
					t.Errorf("%s does not name the probe after registration.endpoint: %s", d.check, res.Message)
				}
			}
			if d.defect == "crash-on-empty" {
				// The crash is blamed on the check that caused it; the
				// driver is restarted and the next check runs normally.
				if !strings.Contains(res.Message, "stopped serving during this check") {
					t.Errorf("crash not reported as such: %s", res.Message)
				}
				if next, _ := rep.Result("robust.duplicate-uids"); next.Status != conformance.Pass {
					t.Errorf("check after the crash: %s %s, want pass (driver restarted)", next.Status, next.Message)
				}
			}
			for _, res := range rep.Results {
				if strings.Contains(res.Message, "<nil>") {
					t.Errorf("%s: message contains <nil>: %s", res.ID, res.Message)
				}
			}
		})
	}
}

// testRunner runs the suite in the ways that are not one run per
// variant: against a driver it does not start, as one deployed as a
// DaemonSet pod (the test runs it, and gives the suite a restart hook
// that kills it and starts it again, as a forced pod deletion and the
// DaemonSet would, and a command that reads the CDI folder as a tar
// archive, as kubectl exec ... tar would); against a driver that dies for
// good; and one check alone.
func testRunner(t *testing.T, c *cluster.Cluster) {
	t.Run("deployed", func(t *testing.T) {
		t.Parallel()
		cfg, _ := config(t, c, "deployed", "")
		cmdline, env, output, cdiDir := cfg.StartCommand, cfg.StartEnv, cfg.DriverOutput, cfg.CDIDirs[0]
		var proc *exec.Cmd
		start := func() error {
			proc = exec.Command(cmdline[0], cmdline[1:]...)
			proc.Env = append(os.Environ(), env...)
			proc.Stdout, proc.Stderr = output, output
			proc.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			return proc.Start()
		}
		stop := func(sig syscall.Signal) {
			_ = syscall.Kill(-proc.Process.Pid, sig)
			_ = proc.Wait()
		}
		if err := start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { stop(syscall.SIGTERM) })
		cfg.StartCommand, cfg.StartEnv, cfg.CDIDirs = nil, nil, nil
		restarts := 0
		cfg.RestartDriver = func(context.Context) error {
			restarts++
			stop(syscall.SIGKILL)
			return start()
		}
		cfg.ReadCDICommand = []string{"tar", "-C", cdiDir, "-cf", "-", "."}
		rep, err := conformance.Run(t.Context(), cfg)
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
		for _, res := range rep.Results {
			if res.Status != conformance.Pass {
				t.Errorf("%s %s: %s", res.ID, res.Status, res.Message)
			}
		}
		if restarts != 1 {
			t.Errorf("restart hook called %d times, want 1", restarts)
		}
		if rep.DriverLog != "" {
			t.Errorf("the suite did not start the driver but names a log: %s", rep.DriverLog)
		}
	})

	// A driver that crashes and cannot be started again ends the run at
	// once, with the reason and the tail of its output. (It may start
	// twice: once for the run, once for the restart checks.)
	t.Run("gone", func(t *testing.T) {
		t.Parallel()
		cfg, _ := config(t, c, "gone", "crash-on-empty")
		marker := filepath.Join(t.TempDir(), "started")
		cfg.StartCommand = append([]string{"sh", "-c", `if [ "$(cat "$0" 2>/dev/null | wc -l)" -ge 2 ]; then echo "refusing to start a third time" >&2; exit 3; fi; echo started >> "$0"; exec "$@"`, marker}, cfg.StartCommand...)
		rep, err := conformance.Run(t.Context(), cfg)
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
		if res, _ := rep.Result("robust.empty-request"); res.Status != conformance.Fail {
			t.Errorf("robust.empty-request: %s %s, want fail", res.Status, res.Message)
		}
		if res, _ := rep.Result("robust.still-serving"); res.Status != conformance.Skip || !strings.Contains(res.Message, "the driver is gone") {
			t.Errorf("robust.still-serving after the driver is gone: %s %s, want a skip saying so", res.Status, res.Message)
		}
		t.Logf("Report.Aborted: %s", rep.Aborted)
		if !strings.Contains(rep.Aborted, "refusing to start a third time") {
			t.Errorf("Report.Aborted = %q, want the tail of the driver's output", rep.Aborted)
		}
		data, err := os.ReadFile(rep.DriverLog)
		if err != nil || !strings.Contains(string(data), "refusing to start a third time") {
			t.Errorf("driver log %s: %v; want the driver's output in it", rep.DriverLog, err)
		}
		_ = os.Remove(rep.DriverLog)
	})

	// A claim that does not fit next to the main claims of a
	// partitionable driver: the failure names the devices the suite's
	// claims hold and the counter they use up.
	t.Run("no-room", func(t *testing.T) {
		t.Parallel()
		cfg, _ := config(t, c, "no-room", "", "-devices", "0", "-shared=false", "-partitionable=false", "-cards", "2", "-health=false")
		// The main claims take three of the four halves.
		cfg.Only = []string{"prepare.result-per-claim", "prepare.extra-claims"}
		cfg.ExtraClaims = []resourceapi.ResourceClaimSpec{claimFor(2)}
		rep, err := conformance.Run(t.Context(), cfg)
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
		res, _ := rep.Result("prepare.extra-claims")
		t.Logf("%s: %s", res.Status, res.Message)
		if res.Status != conformance.Fail {
			t.Fatalf("prepare.extra-claims: %s, want fail", res.Status)
		}
		for _, want := range []string{"-main-1: ", "counter-exhausted", "counter set " + nodeName + "/card-"} {
			if !strings.Contains(res.Message, want) {
				t.Errorf("the failure does not say %q", want)
			}
		}
	})

	// One check alone (Config.Only; "go test -run TestConformance/ID"
	// with Test) sets up what it needs and runs.
	t.Run("only", func(t *testing.T) {
		t.Parallel()
		cfg, _ := config(t, c, "only", "")
		cfg.Only = []string{"prepare.idempotent"}
		rep, err := conformance.Run(t.Context(), cfg)
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
		if len(rep.Results) != 1 || rep.Results[0].ID != "prepare.idempotent" || rep.Results[0].Status != conformance.Pass {
			t.Errorf("got %+v, want prepare.idempotent alone, passed", rep.Results)
		}
	})
}

// claimFor is a claim spec for n devices of the suite's class.
func claimFor(n int64) resourceapi.ResourceClaimSpec {
	return resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{
		{Name: "extra", Exactly: &resourceapi.ExactDeviceRequest{AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: n}},
	}}}
}

// syncWriter serializes writes of the driver's stdout and stderr.
type syncWriter struct {
	mu sync.Mutex
	w  *bytes.Buffer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}
