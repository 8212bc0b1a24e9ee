package conformance_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
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
	if os.Getenv(busyEnv) == "1" {
		spin()
	}
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
	// it does not break): the run reports every check. Otherwise it
	// reports check, and only, if set, and sets up what they need.
	alone bool
	only  []string
	// cfg changes the run's configuration.
	cfg func(*conformance.Config)
	// load: a case whose verdict once rested on a guess about time
	// (issue 51), run again under CPU load (TestDrivers/load): the
	// verdicts of the checks in load must be the same as without it.
	load []string
}{
	{name: "forget-on-restart", defect: "forget-on-restart", check: "restart.unprepare"},
	{name: "non-idempotent", defect: "non-idempotent", check: "prepare.idempotent"},
	{name: "wrong-request-names", defect: "wrong-request-names", check: "prepare.request-names"},
	{name: "missing-request-names", defect: "missing-request-names", check: "prepare.request-names"},
	// One shared device and nothing else: the suite must still build a
	// claim with two requests, on two shares of that device.
	{name: "missing-request-names-shared", defect: "missing-request-names", args: []string{"-devices", "0", "-partitionable=false", "-health=false"}, check: "prepare.request-names"},
	{name: "cdi-unresolvable", defect: "cdi-unresolvable", check: "prepare.cdi-resolve"},
	{name: "bad-cdi-id", defect: "bad-cdi-id", check: "prepare.cdi-ids-format"},
	{name: "bad-attributes", defect: "bad-attributes", check: "slices.standard-attributes"},
	{name: "unprepare-unknown-fails", defect: "unprepare-unknown-fails", check: "unprepare.unknown-claim"},
	// The next check runs normally after the crash (the driver was
	// restarted).
	{name: "crash-on-empty", defect: "crash-on-empty", check: "robust.empty-request", only: []string{"robust.duplicate-uids"}},
	{name: "no-guard", defect: "no-guard", check: "prepare.device-in-use"},
	{name: "leak-cdi", defect: "leak-cdi", check: "unprepare.cleanup"},
	{name: "wrong-device", defect: "wrong-device", check: "prepare.devices-match"},
	{name: "skip-claim", defect: "skip-claim", check: "prepare.result-per-claim"},
	{name: "admin-guard", defect: "admin-guard", check: "allocation.admin-access"},
	{name: "other-driver", defect: "other-driver", check: "robust.other-driver"},
	{name: "broken-counters", defect: "broken-counters", check: "slices.counters"},
	{name: "health-unknown-device", defect: "health-unknown-device", check: "health.initial-report"},
	{name: "health-stale", defect: "health-stale", check: "health.refresh"},
	{name: "health-silent", defect: "health-silent", check: "health.coverage"},
	{name: "drop-share-id", defect: "drop-share-id", check: "allocation.share-id"},
	{name: "colliding-env", defect: "colliding-env", check: "prepare.cdi-env"},
	// A spec file shared by all claims, that stays: only its content
	// tells whether unprepare cleaned up.
	{name: "leak-cdi-entry", defect: "leak-cdi-entry", args: []string{"-shared-spec"}, check: "unprepare.cleanup"},
	{name: "restart-new-edits", defect: "restart-new-edits", check: "restart.still-prepared"},
	// Only restart.device-names: the checks after the restart allocate
	// the devices the restarted driver publishes.
	{name: "unstable-names", defect: "unstable-names", check: "restart.device-names", alone: true},
	{name: "health-unknown-refresh", defect: "health-unknown-refresh", check: "health.refresh"},
	// The liveness probe after registration.endpoint (and after each
	// check until the first prepare) ends the driver: reported by
	// robust.liveness-probe, the checks it followed pass.
	{name: "crash-before-prepare", defect: "crash-before-prepare", check: livenessProbe, alone: true},
	// Two shares of one device in one claim, one variable per share in
	// one CDI device.
	{name: "env-per-share", defect: "env-per-share", check: "prepare.cdi-env", alone: true},

	// Issue 51: verdicts that rested on guesses about time.
	// 1. The restarted driver renames its devices, and publishes them
	// only 10 s after it registered again: judged once the API server
	// shows its write, not 5 s after it registered (then its earlier
	// slices passed restart.device-names, and robust.still-serving
	// failed on a claim allocated from them).
	{name: "slow-unstable-names", defect: "unstable-names", args: []string{"-republish-delay", "10s"}, check: "restart.device-names", alone: true,
		load: []string{"restart.device-names", "robust.still-serving"}},
	// 5. The probe's crash, whose process lingers 3 s after its
	// connections broke: blamed on the probe (robust.liveness-probe),
	// not on the check it followed (registration.endpoint was, after 1 s).
	{name: "slow-crash", defect: "slow-crash", check: livenessProbe, alone: true,
		load: []string{"registration.endpoint", "registration.notify", "slices.published", livenessProbe}},
	// 6. A crash the liveness probe caused is reported with the robust
	// checks skipped.
	{name: "crash-before-prepare-skip-robust", defect: "crash-before-prepare", check: livenessProbe, only: []string{"registration"},
		cfg: func(c *conformance.Config) { c.Skip = []string{"robust"} }, load: []string{"registration.endpoint", livenessProbe}},
	// 8. A share's amount under one variable name: two unequal shares in
	// a claim show it, two equal ones did not.
	{name: "share-amount-env", defect: "share-amount-env", check: "prepare.cdi-env", alone: true, load: []string{"prepare.cdi-env", "allocation.share-env"}},
	// 3. A variable named after the claim UID: shells do not pass it on.
	{name: "env-name-uid", defect: "env-name-uid", check: "prepare.cdi-env-names", alone: true, load: []string{"prepare.cdi-env-names"}},

	// Issue 49: drivers that share devices (KEP-5075).
	{name: "two-shares-max", defect: "two-shares-max", check: "allocation.shared"},
	{name: "unprepare-device-shares", defect: "unprepare-device-shares", check: "allocation.share-unprepare"},
	{name: "restart-forget-shares", defect: "restart-forget-shares", check: "restart.shares"},
	// A share ID that is not the allocation's is a warning of
	// allocation.share-id only: containers get the device either way.
	{name: "wrong-share-id", defect: "wrong-share-id", check: "allocation.share-id", alone: true},
	{name: "share-env-index", defect: "share-env-index", check: "allocation.share-env", alone: true},
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
		"allocation.share-unprepare": conformance.Skip, "allocation.share-env": conformance.Skip, "restart.shares": conformance.Skip,
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
		"allocation.share-unprepare": conformance.Skip, "allocation.share-env": conformance.Skip, "restart.shares": conformance.Skip,
		"prepare.concurrent": conformance.Skip, "prepare.extra-claims": conformance.Skip,
	}},
	{"pods-only", []string{"-pods-only"}, true, nil},
	{"no-cdi", []string{"-no-cdi"}, true, map[string]conformance.Status{
		"allocation.share-id": conformance.Skip, "allocation.share-unprepare": conformance.Skip, "allocation.share-env": conformance.Skip,
		"prepare.cdi-ids-format": conformance.Skip, "prepare.cdi-resolve": conformance.Skip, "prepare.cdi-inject": conformance.Skip,
		"prepare.cdi-env": conformance.Skip, "prepare.cdi-env-names": conformance.Skip,
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
		"allocation.share-unprepare": conformance.Skip, "allocation.share-env": conformance.Skip, "restart.shares": conformance.Skip,
		"prepare.concurrent": conformance.Skip,
	}},
	// Every share of the shared device gets one static CDI device:
	// unpreparing one share must not take it away from the others.
	{"static-share-cdi", []string{"-static-share-cdi"}, true, nil},
	// After a restart it publishes 10 s after it registered, the same
	// devices (so it writes nothing): judged on the slices from before,
	// and said so; robust.still-serving allocates from them.
	{"republish-delay", []string{"-republish-delay", "10s"}, true, nil},
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
		PublishTimeout:   publishTimeout(extraArgs),
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

// publishTimeout is the runs' Config.PublishTimeout: a driver that
// publishes the same slices after a restart writes nothing, and
// restart.device-names waits this long (after the new process
// registered) before it judges the slices from before, so it is short;
// the first publish takes a second or two. A driver that delays its
// publish (-publish-delay, -republish-delay: 10 s) gets twice that.
func publishTimeout(args []string) time.Duration {
	for _, a := range args {
		if strings.HasSuffix(a, "publish-delay") {
			return 30 * time.Second
		}
	}
	return 15 * time.Second
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// loadVariants are the correct variants whose verdicts once rested on a
// guess about time, with the checks TestDrivers/load runs again under
// CPU load.
var loadVariants = map[string][]string{
	"republish-delay": {"restart.device-names", "robust.still-serving"},
}

// TestDrivers runs the suite against every correct variant of the test
// driver (none may fail a MUST check) and every broken one (its check must
// catch it), side by side on one control plane; then, under CPU load (a
// busy process per core), the cases whose verdicts once rested on a
// guess about time, whose verdicts must be those without the load.
func TestDrivers(t *testing.T) {
	t.Parallel() // a control plane of its own
	// DRAListTypeAttributes on, for the pcie-root-list variant.
	c := clustertest.Start(t, cluster.WithFeatureGates(map[string]bool{conformance.GateListTypeAttributes: true}))
	if err := c.AddFakeNode(t.Context(), nodeName, nil, nil); err != nil {
		t.Fatalf("add fake node: %v", err)
	}
	verdicts := &verdictLog{m: map[string]map[string]conformance.Status{}}
	var loads []loadCase

	t.Run("all", func(t *testing.T) {
		st := newSubtests(t, concurrentRuns)
		defer st.wait()
		for _, v := range variants {
			st.run("correct/"+v.name, func(t *testing.T) {
				cfg := variantConfig(t, c, "", v.name, v.args, v.extra)
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
				verdicts.put("correct/"+v.name, rep)
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
				if v.name == "republish-delay" {
					res, _ := rep.Result("restart.device-names")
					if !strings.Contains(res.Message, "not republished within") {
						t.Errorf("restart.device-names does not say it judged the slices from before the restart: %s", res.Message)
					}
				}
			})
			if only := loadVariants[v.name]; only != nil {
				loads = append(loads, loadCase{name: "correct/" + v.name, only: only, config: func(t *testing.T) conformance.Config {
					return variantConfig(t, c, "l", v.name, v.args, v.extra)
				}})
			}
		}

		testRunner(st, c, verdicts)

		for _, d := range defects {
			st.run("defect/"+d.name, func(t *testing.T) {
				cfg := defectConfig(t, c, "", d.name, d.defect, d.args, d.cfg)
				if !d.alone {
					cfg.Only = append([]string{d.check}, d.only...)
				}
				rep, err := conformance.Run(t.Context(), cfg)
				if err != nil {
					t.Fatalf("Run: %v", err)
				}
				verdicts.put("defect/"+d.name, rep)
				checkDefect(t, rep, d.name, d.defect, d.check, d.alone)
			})
			if d.load != nil {
				loads = append(loads, loadCase{name: "defect/" + d.name, only: d.load, config: func(t *testing.T) conformance.Config {
					return defectConfig(t, c, "l", d.name, d.defect, d.args, d.cfg)
				}})
			}
		}
	})
	t.Run("cluster-mode-canceled", func(t *testing.T) { testClusterRunCanceled(t, c) })
	if t.Failed() {
		return
	}
	loads = append(loads, loadCase{name: "runner/backgrounding-hook", only: backgroundingHookLoad, config: func(t *testing.T) conformance.Config {
		return backgroundingHookConfig(t, c, "l-hook")
	}})

	// The same verdicts with a busy process per core beside the runs.
	t.Run("load", func(t *testing.T) {
		busy(t)
		st := newSubtests(t, concurrentRuns)
		defer st.wait()
		for _, lc := range loads {
			st.run(lc.name, func(t *testing.T) {
				cfg := lc.config(t)
				cfg.Only = lc.only
				rep, err := conformance.Run(t.Context(), cfg)
				if err != nil {
					t.Fatalf("Run: %v", err)
				}
				want := verdicts.get(lc.name, lc.only)
				got := map[string]conformance.Status{}
				for _, id := range lc.only {
					if res, ok := rep.Result(id); ok {
						got[id] = res.Status
						t.Logf("under load: %s %s: %s", id, res.Status, res.Message)
					}
				}
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("verdicts under load differ from those without it (-without +with):\n%s", diff)
				}
			})
		}
	})
}

// variantConfig is the configuration of the correct variant name; its
// driver's name starts with prefix (a run under load has a driver name
// of its own: the slices of the run before stay).
func variantConfig(t *testing.T, c *cluster.Cluster, prefix, name string, args []string, extra bool) conformance.Config {
	cfg, _ := config(t, c, prefix+"v-"+name, "", args...)
	if !extra {
		cfg.ExtraClaims = nil
	}
	if name == "cards" {
		cfg.ExtraClaims = []resourceapi.ResourceClaimSpec{claimFor(1)}
	}
	if name == "pcie-root-list" {
		cfg.FeatureGates = map[string]bool{conformance.GateListTypeAttributes: true}
	}
	return cfg
}

// defectConfig is the configuration of the defect case name; its driver's
// name starts with prefix (see variantConfig).
func defectConfig(t *testing.T, c *cluster.Cluster, prefix, name, defect string, args []string, change func(*conformance.Config)) conformance.Config {
	cfg, _ := config(t, c, prefix+"d-"+name, defect, args...)
	if change != nil {
		change(&cfg)
	}
	return cfg
}

// checkDefect asserts that check caught defect in rep (fail for MUST,
// warn for SHOULD), with alone that no other check failed, and what the
// crash defects' messages must say.
func checkDefect(t *testing.T, rep *conformance.Report, name, defect, check string, alone bool) {
	t.Helper()
	res, ok := rep.Result(check)
	if !ok {
		t.Fatalf("no result for check %s", check)
	}
	want := conformance.Fail
	if res.Level == conformance.Should {
		want = conformance.Warn
	}
	if res.Status != want {
		t.Errorf("defect %s (%s): check %s is %s (%s), want %s", defect, testdriver.Defects[defect], check, res.Status, res.Message, want)
	} else {
		t.Logf("caught by %s: %s", check, res.Message)
	}
	if rep.Failed() != (want == conformance.Fail) {
		t.Errorf("report Failed() = %v, want %v", rep.Failed(), want == conformance.Fail)
	}
	if alone {
		for _, other := range rep.Results {
			if other.ID != check && other.Status == conformance.Fail {
				t.Errorf("defect %s fails %s too: %s", defect, other.ID, other.Message)
			}
		}
	}
	switch defect {
	case "crash-before-prepare", "slow-crash":
		for _, id := range []string{"registration.endpoint", "registration.notify"} {
			if r, ok := rep.Result(id); ok && r.Status != conformance.Pass {
				t.Errorf("%s: %s %s; want pass (the liveness probe after it ended the driver, not its own call)", id, r.Status, r.Message)
			}
		}
		if !strings.Contains(res.Message, "the liveness probe after check registration.endpoint (NodeUnprepareResources for claim alive-probe, never prepared) ended the driver") {
			t.Errorf("%s does not name the probe after registration.endpoint: %s", check, res.Message)
		}
	case "crash-on-empty":
		// The crash is blamed on the check that caused it; the driver is
		// restarted and the next check runs normally.
		if !strings.Contains(res.Message, "stopped serving during this check") {
			t.Errorf("crash not reported as such: %s", res.Message)
		}
		if next, _ := rep.Result("robust.duplicate-uids"); next.Status != conformance.Pass {
			t.Errorf("check after the crash: %s %s, want pass (driver restarted)", next.Status, next.Message)
		}
	}
	if name == "slow-unstable-names" {
		if !strings.Contains(res.Message, "its write seen") {
			t.Errorf("%s does not say it judged the restarted driver's own write: %s", check, res.Message)
		}
	}
	for _, res := range rep.Results {
		if strings.Contains(res.Message, "<nil>") {
			t.Errorf("%s: message contains <nil>: %s", res.ID, res.Message)
		}
	}
}

// concurrentRuns is how many runs of the suite TestDrivers runs at a
// time: they mostly wait (for a publication, health reports, a
// restart), so more than the cores.
const concurrentRuns = 8

// subtests runs subtests in goroutines of their own, up to a number at a
// time (not t.Parallel, which go test limits to GOMAXPROCS at a time:
// two on the CI machines).
type subtests struct {
	t   *testing.T
	sem chan struct{}
	wg  sync.WaitGroup
}

func newSubtests(t *testing.T, n int) *subtests {
	return &subtests{t: t, sem: make(chan struct{}, n)}
}

// run runs fn as subtest name once a place is free.
func (s *subtests) run(name string, fn func(t *testing.T)) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.sem <- struct{}{}
		defer func() { <-s.sem }()
		s.t.Run(name, fn)
	}()
}

// wait returns when every subtest has finished.
func (s *subtests) wait() { s.wg.Wait() }

// loadCase is a run of TestDrivers/load: a configuration, and the checks
// whose verdicts must be those of the run without load of the same name.
type loadCase struct {
	name   string
	only   []string
	config func(t *testing.T) conformance.Config
}

// verdictLog keeps the verdicts of the runs without load, by run name.
type verdictLog struct {
	mu sync.Mutex
	m  map[string]map[string]conformance.Status
}

func (v *verdictLog) put(name string, rep *conformance.Report) {
	got := map[string]conformance.Status{}
	for _, res := range rep.Results {
		got[res.ID] = res.Status
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	v.m[name] = got
}

// get returns the verdicts of run name for the checks ids.
func (v *verdictLog) get(name string, ids []string) map[string]conformance.Status {
	v.mu.Lock()
	defer v.mu.Unlock()
	out := map[string]conformance.Status{}
	for _, id := range ids {
		if st, ok := v.m[name][id]; ok {
			out[id] = st
		}
	}
	return out
}

// busyEnv makes the test binary spin (see TestMain): one such process
// per core loads the machine.
const busyEnv = "DRAKIT_CONFORMANCE_BUSY"

// spin keeps a core busy, except while the machine already has two
// runnable threads per core besides it: then the machine is loaded
// without it (the README's test command runs packages side by side), and
// it sleeps instead of taking CPU from them. It never returns.
func spin() {
	floor := 2 * runtime.NumCPU()
	for {
		if n, err := runnable(); err == nil && n-1 >= floor {
			time.Sleep(10 * time.Millisecond)
			continue
		}
		for end := time.Now().Add(10 * time.Millisecond); time.Now().Before(end); {
		}
	}
}

// runnable returns the number of threads running or ready to run on the
// machine now (procs_running in /proc/stat).
func runnable() (int, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "procs_running "); ok {
			return strconv.Atoi(strings.TrimSpace(v))
		}
	}
	return 0, errors.New("no procs_running in /proc/stat")
}

// busy loads the machine until the test ends: a busy process per core
// (stopped by PID), which spins unless the machine has two runnable
// threads per core without it (spin). At the end it logs the load the
// test ran under: the mean number of runnable threads per core, sampled
// every 100 ms, never under one per core while the busy processes run.
func busy(t *testing.T) {
	t.Helper()
	for range runtime.NumCPU() {
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), busyEnv+"=1")
		if err := cmd.Start(); err != nil {
			t.Fatalf("start a busy process: %v", err)
		}
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		})
	}
	done := make(chan struct{})
	var samples, sum int
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
			}
			if n, err := runnable(); err == nil {
				samples++
				sum += n
			}
		}
	}()
	t.Cleanup(func() {
		close(done)
		wg.Wait()
		if samples > 0 {
			t.Logf("load: %.1f runnable threads per core on average (%d samples)",
				float64(sum)/float64(samples)/float64(runtime.NumCPU()), samples)
		}
	})
}

// testRunner runs the suite in the ways that are not one run per
// variant: against a driver it does not start, as one deployed as a
// DaemonSet pod (the test runs it, and gives the suite a restart hook
// that kills it and starts it again, as a forced pod deletion and the
// DaemonSet would, and a command that reads the CDI folder as a tar
// archive, as kubectl exec ... tar would); against a driver that dies for
// good; and one check alone.
func testRunner(st *subtests, c *cluster.Cluster, verdicts *verdictLog) {
	// A restart command that starts the new driver in the background,
	// which keeps the command's output open: the suite waits for the
	// command, not for its output (it hung, and the report blamed the
	// driver). Bounded, so that a suite that hangs fails here.
	st.run("runner/backgrounding-hook", func(t *testing.T) {
		cfg := backgroundingHookConfig(t, c, "hook")
		ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
		defer cancel()
		rep, err := conformance.Run(ctx, cfg)
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
		verdicts.put("runner/backgrounding-hook", rep)
		for _, res := range rep.Results {
			if res.Status != conformance.Pass {
				t.Errorf("%s %s: %s", res.ID, res.Status, res.Message)
			}
		}
		if rep.Aborted != "" {
			t.Errorf("run aborted: %s", rep.Aborted)
		}
	})

	st.run("runner/deployed", func(t *testing.T) {
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
	st.run("runner/gone", func(t *testing.T) {
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
	st.run("runner/no-room", func(t *testing.T) {
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
	st.run("runner/only", func(t *testing.T) {
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

// backgroundingHookLoad are the checks TestDrivers/load runs again with
// the backgrounding restart command.
var backgroundingHookLoad = []string{"restart.reregister", "restart.still-prepared", "restart.device-names", "restart.unprepare", "robust.still-serving"}

// backgroundingHookConfig starts the test driver itself, in the
// background of a shell, and returns a Config whose RestartCommand kills
// it and starts a new one the same way, as an operator's hook might:
// kill -9 $(cat PIDFILE); DRIVER & echo $! > PIDFILE. The last driver
// is stopped by the PID in the file when the test ends.
func backgroundingHookConfig(t *testing.T, c *cluster.Cluster, name string) conformance.Config {
	t.Helper()
	cfg, _ := config(t, c, name, "")
	pidFile := filepath.Join(t.TempDir(), "driver.pid")
	const script = `kill -9 "$(cat "$0" 2>/dev/null)" 2>/dev/null; env ` + driverEnv + `=1 "$@" & echo $! > "$0"`
	hook := append([]string{"sh", "-c", script, pidFile}, cfg.StartCommand...)
	// Output to /dev/null: a pipe would be held by the driver.
	if err := exec.Command(hook[0], hook[1:]...).Run(); err != nil {
		t.Fatalf("start the driver: %v", err)
	}
	t.Cleanup(func() {
		if data, err := os.ReadFile(pidFile); err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(data))); err == nil {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
	cfg.StartCommand, cfg.StartEnv, cfg.DriverLog, cfg.DriverOutput = nil, nil, "", nil
	cfg.RestartCommand = hook
	return cfg
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
