package conformance_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
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

// defectChecks maps each defect of the test driver to the check that must
// catch it. Keep in sync with the table in doc.go.
var defectChecks = map[string]string{
	"forget-on-restart":       "restart.unprepare",
	"non-idempotent":          "prepare.idempotent",
	"wrong-request-names":     "prepare.request-names",
	"missing-request-names":   "prepare.request-names",
	"cdi-unresolvable":        "prepare.cdi-resolve",
	"bad-cdi-id":              "prepare.cdi-ids-format",
	"bad-attributes":          "slices.standard-attributes",
	"unprepare-unknown-fails": "unprepare.unknown-claim",
	"crash-on-empty":          "robust.empty-request",
	"no-guard":                "prepare.device-in-use",
	"leak-cdi":                "unprepare.cleanup",
	"wrong-device":            "prepare.devices-match",
	"skip-claim":              "prepare.result-per-claim",
	"admin-guard":             "allocation.admin-access",
	"other-driver":            "robust.other-driver",
	"broken-counters":         "slices.counters",
	"health-unknown-device":   "health.initial-report",
	"health-stale":            "health.refresh",
	"health-silent":           "health.coverage",
	"drop-share-id":           "allocation.shared",
}

const nodeName = "conformance-node"

// config returns a Config that starts the test driver with defect.
func config(t *testing.T, c *cluster.Cluster, defect string, extraArgs ...string) (conformance.Config, *bytes.Buffer) {
	t.Helper()
	// Unix socket paths are limited to 108 bytes: keep the folder short.
	dir, err := os.MkdirTemp("", "cf")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	name := "ok.conformance.drakit.dev"
	if len(extraArgs) > 0 {
		name = "minimal.conformance.drakit.dev"
	}
	if defect != "" {
		name = defect + ".conformance.drakit.dev"
	}
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

func TestDrivers(t *testing.T) {
	c := clustertest.Start(t)
	if err := c.AddFakeNode(t.Context(), nodeName, nil, nil); err != nil {
		t.Fatalf("add fake node: %v", err)
	}

	t.Run("correct", func(t *testing.T) {
		t.Parallel()
		cfg, _ := config(t, c, "")
		start := time.Now()
		// The vendor's entry point: one subtest per check.
		rep := conformance.Test(t, cfg)
		t.Logf("full run against the correct driver took %s", time.Since(start).Round(time.Millisecond))
		var got []string
		for _, res := range rep.Results {
			if res.Status != conformance.Pass {
				got = append(got, fmt.Sprintf("%s %s: %s", res.ID, res.Status, res.Message))
			}
		}
		// Every check applies to the test driver.
		var want []string
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("checks that did not pass (-want +got):\n%s", diff)
		}
		if rep.Failed() {
			t.Errorf("report says failed")
		}
		if len(rep.Results) != len(conformance.Checks()) {
			t.Errorf("got %d results, want one per check (%d)", len(rep.Results), len(conformance.Checks()))
		}
	})

	// A driver with a single plain device and no health service: the
	// checks that need more skip, none fails.
	t.Run("one-device", func(t *testing.T) {
		t.Parallel()
		cfg, _ := config(t, c, "", "-devices", "1", "-partitionable=false", "-shared=false", "-health=false")
		cfg.ExtraClaims = nil
		rep, err := conformance.Run(t.Context(), cfg)
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
		var got []string
		for _, res := range rep.Results {
			if res.Status != conformance.Pass {
				got = append(got, fmt.Sprintf("%s %s", res.ID, res.Status))
			}
		}
		want := []string{
			"slices.counters skip", "allocation.counters skip", "allocation.shared skip",
			"prepare.concurrent skip", "prepare.extra-claims skip",
			"health.initial-report skip", "health.coverage skip", "health.refresh skip",
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("checks that did not pass (-want +got):\n%s", diff)
		}
	})

	defects := make([]string, 0, len(defectChecks))
	for d := range defectChecks {
		defects = append(defects, d)
	}
	sort.Strings(defects)
	for _, defect := range defects {
		id := defectChecks[defect]
		t.Run(defect, func(t *testing.T) {
			t.Parallel()
			cfg, _ := config(t, c, defect)
			rep, err := conformance.Run(t.Context(), cfg)
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
			res, ok := rep.Result(id)
			if !ok {
				t.Fatalf("no result for check %s", id)
			}
			want := conformance.Fail
			if res.Level == conformance.Should {
				want = conformance.Warn
			}
			if res.Status != want {
				t.Errorf("defect %s (%s): check %s is %s (%s), want %s", defect, testdriver.Defects[defect], id, res.Status, res.Message, want)
			} else {
				t.Logf("caught by %s: %s", id, res.Message)
			}
			if rep.Failed() != (want == conformance.Fail) {
				t.Errorf("report Failed() = %v, want %v", rep.Failed(), want == conformance.Fail)
			}
		})
	}
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
