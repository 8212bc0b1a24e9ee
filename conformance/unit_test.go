package conformance

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	drapbv1 "k8s.io/kubelet/pkg/apis/dra/v1"
	"k8s.io/utils/ptr"
)

func TestCatalogue(t *testing.T) {
	seen := map[string]bool{}
	for _, c := range Checks() {
		if seen[c.ID] {
			t.Errorf("duplicate check ID %s", c.ID)
		}
		seen[c.ID] = true
		if c.Description == "" || c.Rule == "" || (c.Level != Must && c.Level != Should) {
			t.Errorf("check %s is incomplete: %+v", c.ID, c)
		}
		if !strings.HasPrefix(c.ID, c.Category+".") {
			t.Errorf("check %s has category %q", c.ID, c.Category)
		}
	}
}

func TestStandardAttributes(t *testing.T) {
	str := func(s string) resourceapi.DeviceAttribute { return resourceapi.DeviceAttribute{StringValue: &s} }
	num := func(i int64) resourceapi.DeviceAttribute { return resourceapi.DeviceAttribute{IntValue: &i} }
	tests := []struct {
		name  string
		attr  resourceapi.QualifiedName
		value resourceapi.DeviceAttribute
		bad   bool
		lists bool // DRAListTypeAttributes on
	}{
		{"pcieRoot ok", "resource.kubernetes.io/pcieRoot", str("pci0000:3a"), false, false},
		{"pcieRoot upper case", "resource.kubernetes.io/pcieRoot", str("pci0000:3A"), true, false},
		{"pcieRoot no prefix", "resource.kubernetes.io/pcieRoot", str("0000:00"), true, false},
		{"pcieRoot int", "resource.kubernetes.io/pcieRoot", num(0), true, false},
		{"pcieRoot list with the gate", "resource.kubernetes.io/pcieRoot", resourceapi.DeviceAttribute{StringValues: []string{"pci0000:00", "pci0000:80"}}, false, true},
		{"pcieRoot list without the gate", "resource.kubernetes.io/pcieRoot", resourceapi.DeviceAttribute{StringValues: []string{"pci0000:00"}}, true, false},
		{"pcieRoot list with a bad root", "resource.kubernetes.io/pcieRoot", resourceapi.DeviceAttribute{StringValues: []string{"pci0000:00", "0000:80"}}, true, true},
		{"pciBusID ok", "resource.kubernetes.io/pciBusID", str("0000:3b:00.1"), false, false},
		{"pciBusID short", "resource.kubernetes.io/pciBusID", str("3b:00.1"), true, false},
		{"pciBusID function 8", "resource.kubernetes.io/pciBusID", str("0000:3b:00.8"), true, false},
		{"pciBusID int", "resource.kubernetes.io/pciBusID", num(59), true, false},
		{"numaNode ok", "resource.kubernetes.io/numaNode", num(1), false, false},
		{"numaNode list", "resource.kubernetes.io/numaNode", resourceapi.DeviceAttribute{IntValues: []int64{0, 1}}, false, false},
		{"numaNode negative", "resource.kubernetes.io/numaNode", num(-1), true, false},
		{"numaNode string", "resource.kubernetes.io/numaNode", str("0"), true, false},
		{"other standard attribute", "resource.kubernetes.io/other", str("x"), false, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			msg := checkStandardAttribute(tc.attr, tc.value, tc.lists)
			if (msg != "") != tc.bad {
				t.Errorf("got %q, want bad=%v", msg, tc.bad)
			}
		})
	}
}

func TestTranslate(t *testing.T) {
	maps := []PathMapping{{From: "/var/lib/kubelet", To: "/tmp/k"}, {From: "/", To: "/host"}}
	tests := map[string]string{
		"/var/lib/kubelet/plugins/x/dra.sock": "/tmp/k/plugins/x/dra.sock",
		"/var/lib/kubelet":                    "/tmp/k",
		"/var/lib/kubeletx/a":                 "/host/var/lib/kubeletx/a",
		"relative":                            "relative",
	}
	for in, want := range tests {
		if got := translate(in, maps); got != want {
			t.Errorf("translate(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	var client kubernetes.Interface = &kubernetes.Clientset{}
	tests := []struct {
		name string
		cfg  Config
		want []string // substrings of the error; nil: valid
	}{
		{"empty", Config{}, []string{"DriverName: required", "NodeName: required", "Client: required", "RegistrationPath: required"}},
		{"bad driver name", Config{DriverName: "Not_DNS", NodeName: "n", Client: client, RegistrationPath: "/x"}, []string{"DriverName:"}},
		{"unknown skip", Config{DriverName: "a.b", NodeName: "n", Client: client, RegistrationPath: "/x", Skip: []string{"nope"}}, []string{`Skip: "nope"`}},
		{"unknown only", Config{DriverName: "a.b", NodeName: "n", Client: client, RegistrationPath: "/x", Only: []string{"prepare.nope"}}, []string{`Only: "prepare.nope"`}},
		{"two restart hooks", Config{DriverName: "a.b", NodeName: "n", Client: client, RegistrationPath: "/x", RestartCommand: []string{"true"}, RestartDriver: func(context.Context) error { return nil }}, []string{"RestartDriver and RestartCommand"}},
		{"valid", Config{DriverName: "a.b", NodeName: "n", Client: client, RegistrationPath: "/x", Skip: []string{"restart", "prepare.idempotent"}, Only: []string{"prepare"}}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.validate()
			if tc.want == nil {
				if err != nil {
					t.Fatalf("unexpected error %v", err)
				}
				if tc.cfg.Repeat != 3 || tc.cfg.CallTimeout != 45*time.Second {
					t.Errorf("defaults not filled: %+v", tc.cfg)
				}
				return
			}
			if !errors.Is(err, ErrConfig) {
				t.Fatalf("got %v, want ErrConfig", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

func allocatedClaim(results ...resourceapi.DeviceRequestAllocationResult) *resourceapi.ResourceClaim {
	c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "c", UID: "u1"}}
	seen := map[string]bool{}
	for _, r := range results {
		base, _, _ := strings.Cut(r.Request, "/")
		if !seen[base] {
			c.Spec.Devices.Requests = append(c.Spec.Devices.Requests, resourceapi.DeviceRequest{Name: base})
			seen[base] = true
		}
	}
	c.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: results}}
	return c
}

func TestCheckResponse(t *testing.T) {
	const drv = "d.example.com"
	two := allocatedClaim(
		resourceapi.DeviceRequestAllocationResult{Request: "a", Driver: drv, Pool: "p", Device: "d0"},
		resourceapi.DeviceRequestAllocationResult{Request: "b/sub", Driver: drv, Pool: "p", Device: "d1"},
		resourceapi.DeviceRequestAllocationResult{Request: "b/sub", Driver: "other.example.com", Pool: "x", Device: "y"},
	)
	dev := func(pool, name string, reqs ...string) *drapbv1.Device {
		return &drapbv1.Device{PoolName: pool, DeviceName: name, RequestNames: reqs}
	}
	tests := []struct {
		name    string
		devices []*drapbv1.Device
		want    []string // substrings, one per failure
	}{
		{"correct", []*drapbv1.Device{dev("p", "d0", "a"), dev("p", "d1", "b")}, nil},
		{"missing device", []*drapbv1.Device{dev("p", "d0", "a")}, []string{"p/d1 is missing"}},
		{"extra device", []*drapbv1.Device{dev("p", "d0", "a"), dev("p", "d1", "b"), dev("x", "y", "b")}, []string{"returned device x/y"}},
		{"subrequest name", []*drapbv1.Device{dev("p", "d0", "a"), dev("p", "d1", "b/sub")}, []string{`return "b"`}},
		{"wrong request", []*drapbv1.Device{dev("p", "d0", "b"), dev("p", "d1", "b")}, []string{`names request "b", but`}},
		{"no request names", []*drapbv1.Device{dev("p", "d0"), dev("p", "d1", "b")}, []string{"names no request"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var f failures
			res := &drapbv1.NodePrepareResourceResponse{Devices: tc.devices}
			checkDevicesMatch(&f, drv, two, res)
			checkRequestNames(&f, drv, two, res)
			if len(f) != len(tc.want) {
				t.Fatalf("got failures %q, want %d matching %q", f, len(tc.want), tc.want)
			}
			for i, w := range tc.want {
				if !strings.Contains(f[i], w) {
					t.Errorf("failure %q does not contain %q", f[i], w)
				}
			}
		})
	}
}

func TestCheckResponseSharedDevice(t *testing.T) {
	const drv = "d.example.com"
	s1, s2 := types.UID("s1"), types.UID("s2")
	claim := allocatedClaim(
		resourceapi.DeviceRequestAllocationResult{Request: "a", Driver: drv, Pool: "p", Device: "shared", ShareID: &s1},
		resourceapi.DeviceRequestAllocationResult{Request: "b", Driver: drv, Pool: "p", Device: "shared", ShareID: &s2},
	)
	dev := func(share *string, reqs ...string) *drapbv1.Device {
		return &drapbv1.Device{PoolName: "p", DeviceName: "shared", ShareId: share, RequestNames: reqs}
	}
	tests := []struct {
		name    string
		devices []*drapbv1.Device
		want    []string // substrings, one per failure of devices-match and request-names
		shares  int      // failures of the share ID check
	}{
		{"with share IDs", []*drapbv1.Device{dev(ptr.To("s1"), "a"), dev(ptr.To("s2"), "b")}, nil, 0},
		{"without share IDs", []*drapbv1.Device{dev(nil, "b"), dev(nil, "a")}, nil, 2},
		{"without share IDs and request names", []*drapbv1.Device{dev(nil), dev(nil)}, []string{"names no request", "names no request"}, 2},
		{"request names swapped", []*drapbv1.Device{dev(ptr.To("s1"), "b"), dev(ptr.To("s2"), "a")}, []string{`names request "b"`, `names request "a"`}, 0},
		// A share ID that is no allocation's is misreported in the
		// PodResources API only: the device still pairs with the
		// allocation left, and only the share ID check fails.
		{"unknown share ID", []*drapbv1.Device{dev(ptr.To("s1"), "a"), dev(ptr.To("s3"), "b")}, nil, 1},
		{"share IDs swapped", []*drapbv1.Device{dev(ptr.To("s2"), "a"), dev(ptr.To("s1"), "b")}, []string{`names request "a"`, `names request "b"`}, 0},
		{"one of two", []*drapbv1.Device{dev(nil, "a")}, []string{"p/shared share s2 is missing"}, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var f, shares failures
			res := &drapbv1.NodePrepareResourceResponse{Devices: tc.devices}
			checkDevicesMatch(&f, drv, claim, res)
			checkRequestNames(&f, drv, claim, res)
			checkShareIDs(&shares, drv, claim, res)
			if len(f) != len(tc.want) {
				t.Fatalf("got failures %q, want %d matching %q", f, len(tc.want), tc.want)
			}
			for i, w := range tc.want {
				if !strings.Contains(f[i], w) {
					t.Errorf("failure %q does not contain %q", f[i], w)
				}
			}
			if len(shares) != tc.shares {
				t.Errorf("share ID check: got %q, want %d failures", shares, tc.shares)
			}
		})
	}
}

func TestCheckResponseNoDevices(t *testing.T) {
	const drv = "d.example.com"
	claim := allocatedClaim(resourceapi.DeviceRequestAllocationResult{Request: "a", Driver: drv, Pool: "p", Device: "d0"})
	var f failures
	if empty := checkDevicesMatch(&f, drv, claim, &drapbv1.NodePrepareResourceResponse{}); !empty || len(f) > 0 {
		t.Errorf("no devices for an allocated claim: empty=%v failures %q, want empty=true and none (api.proto allows zero devices)", empty, f)
	}
}

// TestShares: the suite's shares of a device that allows multiple
// allocations are unequal where the request policy allows (so that a
// setting derived from a share's amount differs between them), valid
// for the policy, and fit together in the capacity.
func TestShares(t *testing.T) {
	q := resource.MustParse
	policy := func(p resourceapi.CapacityRequestPolicy) *resourceapi.CapacityRequestPolicy { return &p }
	tests := []struct {
		name  string
		cap   resourceapi.DeviceCapacity
		want  []string // amounts; nil when no two fit
		equal bool
	}{
		{"no policy: 1:2:3", resourceapi.DeviceCapacity{Value: q("12Gi")}, []string{"2Gi", "4Gi", "6Gi"}, false},
		{"default only: any amount", resourceapi.DeviceCapacity{Value: q("12Gi"), RequestPolicy: policy(resourceapi.CapacityRequestPolicy{Default: ptr.To(q("1Gi"))})}, []string{"2Gi", "4Gi", "6Gi"}, false},
		{"range: min, 2 min, 3 min", resourceapi.DeviceCapacity{Value: q("10Gi"), RequestPolicy: policy(resourceapi.CapacityRequestPolicy{Default: ptr.To(q("1Gi")), ValidRange: &resourceapi.CapacityRequestPolicyRange{Min: ptr.To(q("1Gi"))}})}, []string{"1Gi", "2Gi", "3Gi"}, false},
		{"range with step", resourceapi.DeviceCapacity{Value: q("100"), RequestPolicy: policy(resourceapi.CapacityRequestPolicy{Default: ptr.To(q("10")), ValidRange: &resourceapi.CapacityRequestPolicyRange{Min: ptr.To(q("10")), Step: ptr.To(q("5"))}})}, []string{"10", "15", "20"}, false},
		{"range: two fit", resourceapi.DeviceCapacity{Value: q("5Gi"), RequestPolicy: policy(resourceapi.CapacityRequestPolicy{Default: ptr.To(q("2Gi")), ValidRange: &resourceapi.CapacityRequestPolicyRange{Min: ptr.To(q("2Gi"))}})}, []string{"2Gi", "2Gi"}, true},
		{"fractional range", resourceapi.DeviceCapacity{Value: q("1"), RequestPolicy: policy(resourceapi.CapacityRequestPolicy{Default: ptr.To(q("100m")), ValidRange: &resourceapi.CapacityRequestPolicyRange{Min: ptr.To(q("100m")), Step: ptr.To(q("100m"))}})}, []string{"100m", "200m", "300m"}, false},
		{"valid values", resourceapi.DeviceCapacity{Value: q("8"), RequestPolicy: policy(resourceapi.CapacityRequestPolicy{Default: ptr.To(q("2")), ValidValues: []resource.Quantity{q("2"), q("4"), q("8")}})}, []string{"2", "4"}, false},
		{"one valid value twice", resourceapi.DeviceCapacity{Value: q("8"), RequestPolicy: policy(resourceapi.CapacityRequestPolicy{Default: ptr.To(q("4")), ValidValues: []resource.Quantity{q("4"), q("8")}})}, []string{"4", "4"}, true},
		{"only whole device", resourceapi.DeviceCapacity{Value: q("8"), RequestPolicy: policy(resourceapi.CapacityRequestPolicy{Default: ptr.To(q("8")), ValidValues: []resource.Quantity{q("8")}})}, nil, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, equal, why := shares(&resourceapi.Device{Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{"c": tc.cap}}, 3)
			if tc.want == nil {
				if why == "" {
					t.Errorf("got shares %v, want a reason why no two fit", got)
				}
				return
			}
			var amounts []string
			for _, m := range got {
				q := m["c"]
				amounts = append(amounts, q.String())
			}
			if diff := cmp.Diff(tc.want, amounts); diff != "" || equal != tc.equal {
				t.Errorf("shares (-want +got):\n%s(equal %v, want %v; %s)", diff, equal, tc.equal, why)
			}
		})
	}
}

func TestNormalizeIgnoresOrder(t *testing.T) {
	a := &drapbv1.NodePrepareResourcesResponse{Claims: map[string]*drapbv1.NodePrepareResourceResponse{"u": {Devices: []*drapbv1.Device{
		{PoolName: "p", DeviceName: "a", CdiDeviceIds: []string{"v/c=1", "v/c=2"}},
		{PoolName: "p", DeviceName: "b", ShareId: ptr.To("s")},
	}}}}
	b := &drapbv1.NodePrepareResourcesResponse{Claims: map[string]*drapbv1.NodePrepareResourceResponse{"u": {Devices: []*drapbv1.Device{
		{PoolName: "p", DeviceName: "b", ShareId: ptr.To("s")},
		{PoolName: "p", DeviceName: "a", CdiDeviceIds: []string{"v/c=2", "v/c=1"}},
	}}}}
	if diff := cmp.Diff(normalize(a), normalize(b)); diff != "" {
		t.Errorf("same answer in another order differs:\n%s", diff)
	}
	b.Claims["u"].Devices[1].CdiDeviceIds = []string{"v/c=3"}
	if cmp.Equal(normalize(a), normalize(b)) {
		t.Errorf("different CDI IDs compare equal")
	}
}

func TestCDIChecks(t *testing.T) {
	dir := t.TempDir()
	spec := `{"cdiVersion":"0.6.0","kind":"example.com/gpu","devices":[{"name":"g0","containerEdits":{"env":["A=1"]}}]}`
	if err := os.WriteFile(filepath.Join(dir, "example.com-gpu.json"), []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
	cache, specErrs, err := cdiCache([]string{dir})
	if err != nil || specErrs != "" {
		t.Fatalf("cdiCache: %v %s", err, specErrs)
	}
	tests := []struct {
		ids  []string
		want int
	}{
		{[]string{"example.com/gpu=g0"}, 0},
		{[]string{"example.com/gpu=g1"}, 1},
		{[]string{"example.com/gpu/g0"}, 2}, // malformed and unresolvable
	}
	for _, tc := range tests {
		var f failures
		checkCDIFormat(&f, tc.ids)
		checkCDIResolve(&f, cache, specErrs, []string{dir}, tc.ids)
		if len(f) != tc.want {
			t.Errorf("%q: got failures %q, want %d", tc.ids, f, tc.want)
		}
	}
	var f failures
	checkCDIInject(&f, cache, []string{"example.com/gpu=g0"})
	if len(f) != 0 {
		t.Errorf("inject: %q", f)
	}

	// A spec in a default CDI folder the suite was not given earns a hint
	// that names it.
	other := t.TempDir()
	misplaced := filepath.Join(other, "example.com-gpu-claim.json")
	spec = `{"cdiVersion":"0.6.0","kind":"example.com/gpu","devices":[{"name":"g7","containerEdits":{"env":["A=7"]}}]}`
	if err := os.WriteFile(misplaced, []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
	f = nil
	checkCDIResolveHint(&f, cache, specErrs, []string{dir}, []string{"example.com/gpu=g7"}, []string{dir, other})
	if len(f) != 1 || !strings.Contains(f[0], "Hint: "+misplaced+" defines it") {
		t.Errorf("misplaced spec: got %q, want one failure with a hint naming %s", f, misplaced)
	}
}

func TestEnsureRegistry(t *testing.T) {
	dir := t.TempDir()
	for _, p := range []string{filepath.Join(dir, "a", "plugins_registry"), filepath.Join(dir, "b", "x-reg.sock")} {
		if err := ensureRegistry(p); err != nil {
			t.Fatalf("ensureRegistry(%s): %v", p, err)
		}
	}
	if fi, err := os.Stat(filepath.Join(dir, "a", "plugins_registry")); err != nil || !fi.IsDir() {
		t.Errorf("registry folder not created: %v", err)
	}
	if fi, err := os.Stat(filepath.Join(dir, "b")); err != nil || !fi.IsDir() {
		t.Errorf("folder of the socket not created: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "b", "x-reg.sock")); err == nil {
		t.Errorf("a socket path must not become a folder")
	}
}

func sampleReport() *Report {
	mkRes := func(id string, s Status, msg string) Result {
		c, _ := lookupCheck(id)
		return Result{Check: c.Check, Status: s, Message: msg, Duration: 1500 * time.Millisecond}
	}
	return &Report{Driver: "gpu.example.com", Node: "node-1", Started: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), Duration: 12 * time.Second,
		Results: []Result{
			mkRes("registration.name", Pass, "name gpu.example.com"),
			mkRes("prepare.idempotent", Fail, "repeat 1 answered differently"),
			mkRes("prepare.device-in-use", Warn, "device prepared twice"),
			mkRes("restart.reregister", Skip, "needs Config.StartCommand"),
		}}
}

func TestReportWriters(t *testing.T) {
	rep := sampleReport()
	if !rep.Failed() {
		t.Errorf("a failed MUST check must fail the report")
	}
	var js bytes.Buffer
	if err := rep.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(js.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(rep, &back); diff != "" {
		t.Errorf("JSON round trip (-want +got):\n%s", diff)
	}

	var ju bytes.Buffer
	if err := rep.WriteJUnit(&ju); err != nil {
		t.Fatal(err)
	}
	var suites junitSuites
	if err := xml.Unmarshal(ju.Bytes(), &suites); err != nil {
		t.Fatalf("JUnit output does not parse: %v\n%s", err, ju.String())
	}
	type sum struct {
		Name                     string
		Tests, Failures, Skipped int
	}
	var got []sum
	for _, s := range suites.Suites {
		got = append(got, sum{s.Name, s.Tests, s.Failures, s.Skipped})
	}
	want := []sum{{"conformance.registration", 1, 0, 0}, {"conformance.prepare", 2, 1, 0}, {"conformance.restart", 1, 0, 1}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("JUnit suites (-want +got):\n%s", diff)
	}

	// The verdict says that restarts were not judged, and why.
	var summary bytes.Buffer
	if err := rep.WriteSummary(&summary); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(summary.String(), "FAILED (restarts not judged: restart.reregister skipped: needs Config.StartCommand): driver gpu.example.com") {
		t.Errorf("the verdict does not say the restart checks were skipped:\n%s", summary.String())
	}

	// A SHOULD violation alone never fails the report.
	rep.Results = rep.Results[2:]
	if rep.Failed() {
		t.Errorf("warnings and skips must not fail the report")
	}
}

func TestTailBuffer(t *testing.T) {
	tb := &tailBuffer{max: 64}
	for i := 0; i < 20; i++ {
		fmt.Fprintf(tb, "line %d\n", i)
	}
	if got := tb.lastLines(2); got != "  | line 18\n  | line 19" {
		t.Errorf("last lines: %q", got)
	}
	tb = &tailBuffer{max: 1 << 10}
	fmt.Fprint(tb, "starting\npanic: runtime error: index out of range [0] with length 0\n\ngoroutine 1 [running]:\nmain.f()\n\tf.go:1\nmain.main()\nrestarted\n")
	want := "  | panic: runtime error: index out of range [0] with length 0\n  | goroutine 1 [running]:\n  | ...\n  | main.main()\n  | restarted"
	if got := tb.lastLines(6); got != want {
		t.Errorf("a panic must be shown from its message, then the last lines:\ngot  %q\nwant %q", got, want)
	}
}

func TestBlameExit(t *testing.T) {
	// A driver process that exited after the last check answered.
	done := make(chan struct{})
	close(done)
	r := &runner{
		cfg:      Config{CallTimeout: time.Second},
		report:   &Report{Results: []Result{{Check: Check{ID: "robust.empty-request"}, Status: Pass, Message: "no crash"}}},
		procDone: done, procErr: errors.New("exit status 2"),
		logTail: &tailBuffer{max: 1 << 10},
	}
	fmt.Fprintln(r.logTail, "panic: boom")
	r.blameExit(t.Context())
	last := r.report.Results[0]
	if last.Status != Fail || !strings.Contains(last.Message, "exited right after this check: the driver process exit status 2") || !strings.Contains(last.Message, "panic: boom") {
		t.Errorf("previous check: %s %q, want it failed with the exit and the driver's last lines", last.Status, last.Message)
	}
	// The suite did not start it (no StartCommand, no restart hook):
	// the run ends.
	if r.gone == nil || !errors.Is(r.gone, errDriverGone) || r.report.Aborted == "" {
		t.Errorf("gone = %v, aborted = %q; want the run ended", r.gone, r.report.Aborted)
	}
}

// TestEnvCollisions: two devices of a claim that set one variable to
// different values collide (a container with both sees one); distinct
// names, or one value set by both (a claim-wide setting), do not.
func TestEnvCollisions(t *testing.T) {
	dir := t.TempDir()
	spec := `{"cdiVersion":"0.6.0","kind":"example.com/dev","devices":[
		{"name":"a","containerEdits":{"env":["DEV=a","DEV_A=a","CLAIM=c"]}},
		{"name":"b","containerEdits":{"env":["DEV=b","DEV_B=b","CLAIM=c"]}},
		{"name":"shares","containerEdits":{"env":["SHARE=s1","SHARE=s2","SAME=x","SAME=x"]}}]}`
	if err := os.WriteFile(filepath.Join(dir, "example.json"), []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
	cache, _, err := cdiCache([]string{dir})
	if err != nil {
		t.Fatal(err)
	}
	dev := func(name string) *drapbv1.Device {
		return &drapbv1.Device{PoolName: "p", DeviceName: name, CdiDeviceIds: []string{"example.com/dev=" + name}}
	}
	got, err := envCollisions(cache, []*drapbv1.Device{dev("a"), dev("b")})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || !strings.Contains(got[0], "DEV is set by 2 devices") || !strings.Contains(got[0], "loses p/a's DEV=a") {
		t.Errorf("collisions = %q, want DEV only, p/a's value lost", got)
	}
	if got, err := envCollisions(cache, []*drapbv1.Device{dev("a")}); err != nil || len(got) != 0 {
		t.Errorf("one device: %q, %v; want no collision", got, err)
	}
	// Two shares of one device served by one CDI device that sets the
	// variable once per share: the container sees the last share only.
	share := func(id string) *drapbv1.Device {
		d := dev("shared")
		d.ShareId, d.CdiDeviceIds = &id, []string{"example.com/dev=shares"}
		return d
	}
	got, err = envCollisions(cache, []*drapbv1.Device{share("s1"), share("s2")})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || !strings.Contains(got[0], "SHARE is set 2 times by one CDI device; a container sees SHARE=s2 and loses SHARE=s1 (CDI device example.com/dev=shares, returned for p/shared share s1, p/shared share s2)") {
		t.Errorf("collisions = %q, want SHARE only, set twice by one CDI device", got)
	}
}

// TestCDIStateContent: cleanup is judged by the devices the specs
// define: an entry left in a spec file that stays is a leftover; a new
// file that stays but defines none of them is not.
func TestCDIStateContent(t *testing.T) {
	shared := func(devs ...string) []byte {
		var d []string
		for _, n := range devs {
			d = append(d, `{"name":"`+n+`","containerEdits":{"env":["X_`+strings.ToUpper(n)+`=1"]}}`)
		}
		return []byte(`{"cdiVersion":"0.6.0","kind":"example.com/dev","devices":[` + strings.Join(d, ",") + `]}`)
	}
	before := parseCDIState(map[string][]byte{"/cdi/shared.json": shared("static")})
	prepared := parseCDIState(map[string][]byte{"/cdi/shared.json": shared("static", "claim1"), "/cdi/new.json": shared("other")})
	made := created(before, prepared)
	if diff := cmp.Diff(cdiMade{files: []string{"/cdi/new.json"}, devices: []string{"example.com/dev=claim1", "example.com/dev=other"}}, made, cmp.AllowUnexported(cdiMade{})); diff != "" {
		t.Fatalf("created (-want +got):\n%s", diff)
	}
	r := &runner{}
	for name, tc := range map[string]struct {
		after map[string][]byte
		left  int
	}{
		"entry left in the shared file": {map[string][]byte{"/cdi/shared.json": shared("static", "claim1")}, 1},
		"all gone, shared file kept":    {map[string][]byte{"/cdi/shared.json": shared("static")}, 0},
		"new file kept, empty of them":  {map[string][]byte{"/cdi/shared.json": shared("static"), "/cdi/new.json": shared("unrelated")}, 0},
	} {
		r.cfg.ReadCDI = func(context.Context) (map[string][]byte, error) { return tc.after, nil }
		if devs, _ := r.leftover(t.Context(), made); len(devs) != tc.left {
			t.Errorf("%s: leftover %q, want %d", name, devs, tc.left)
		}
	}
}

// TestPinSelector: a device is pinned by an attribute value no other
// device has; with none, nothing pins it.
func TestPinSelector(t *testing.T) {
	str := func(s string) resourceapi.DeviceAttribute { return resourceapi.DeviceAttribute{StringValue: &s} }
	c := &clusterRun{cfg: ClusterConfig{DriverName: "gpu.example.com"}, devices: map[string]*resourceapi.Device{
		"gpu-0": {Name: "gpu-0", Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{"model": str("h200"), "uuid": str("GPU-0")}},
		"gpu-1": {Name: "gpu-1", Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{"model": str("h200"), "uuid": str("GPU-1")}},
		"sim-0": {Name: "sim-0", Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{"model": str("h200")}},
	}}
	sel := c.pinSelector("gpu-1")
	if len(sel) != 1 || sel[0].CEL.Expression != `device.attributes["gpu.example.com"]["uuid"] == "GPU-1"` {
		t.Errorf("pinSelector(gpu-1) = %+v", sel)
	}
	if sel := c.pinSelector("sim-0"); sel != nil {
		t.Errorf("pinSelector(sim-0) = %+v, want nil (no attribute tells it apart)", sel)
	}
	if got := c.identifiers("gpu-0"); !slices.Equal(got, []string{"GPU-0", "gpu-0"}) {
		t.Errorf("identifiers(gpu-0) = %q", got)
	}
	if !c.seen(map[string]string{"NVIDIA_VISIBLE_DEVICES": "GPU-1,GPU-0"}, "gpu-0") || c.seen(map[string]string{"X": "GPU-1"}, "gpu-0") {
		t.Errorf("seen: a device is seen by its identifiers in a list, and only by its own")
	}
	if got := c.sharedAttribute(); got != "gpu.example.com/model" {
		t.Errorf("sharedAttribute = %q, want gpu.example.com/model", got)
	}
}

// TestOwnMade: of the CDI devices that appeared while a pod started, the
// pod's are those carrying its claims' UIDs; without such, those that
// carry no UID; never those of another claim (a run for another driver).
func TestOwnMade(t *testing.T) {
	const mine, other = "11111111-2222-3333-4444-555555555555", "66666666-7777-8888-9999-000000000000"
	claims := []*resourceapi.ResourceClaim{{ObjectMeta: metav1.ObjectMeta{UID: mine}}}
	after := &cdiState{devices: map[string]string{
		"v/c=" + mine + "-dev-0":  "/cdi/a.json",
		"v/c=" + other + "-dev-1": "/cdi/b.json",
		"v/c=gpu-0":               "/cdi/claim_" + mine + ".json",
		"v/c=gpu-1":               "/cdi/plain.json",
		"v/c=gpu-2":               "/cdi/claim_" + other + ".json",
	}}
	tests := []struct {
		name string
		made []string
		want []string
	}{
		{"by device name and file name", []string{"v/c=" + mine + "-dev-0", "v/c=" + other + "-dev-1", "v/c=gpu-0", "v/c=gpu-1"}, []string{"v/c=" + mine + "-dev-0", "v/c=gpu-0"}},
		{"no UID of its own: those without a UID", []string{"v/c=" + other + "-dev-1", "v/c=gpu-1", "v/c=gpu-2"}, []string{"v/c=gpu-1"}},
		{"only another claim's", []string{"v/c=" + other + "-dev-1", "v/c=gpu-2"}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := ownMade(cdiMade{devices: tc.made}, after, claims)
			if diff := cmp.Diff(tc.want, got.devices); diff != "" {
				t.Errorf("devices (-want +got):\n%s", diff)
			}
		})
	}
}

// TestClusterCatalogue: cluster checks have unique IDs, a rule that
// cites its source, and needs only earlier checks.
func TestClusterCatalogue(t *testing.T) {
	seen := map[string]bool{}
	for _, c := range ClusterChecks() {
		if seen[c.ID] {
			t.Errorf("duplicate check %s", c.ID)
		}
		for _, n := range c.Needs {
			if !seen[n] {
				t.Errorf("%s needs %s, which is not an earlier check", c.ID, n)
			}
		}
		seen[c.ID] = true
		if !strings.Contains(c.Rule, "pkg/kubelet") && !strings.Contains(c.Rule, "api.proto") && !strings.Contains(c.Rule, "KEP-") && !strings.Contains(c.Rule, "resource.k8s.io") && !strings.Contains(c.Rule, "CDI") {
			t.Errorf("%s: rule cites no source (kubelet file, api.proto, KEP, API or CDI spec): %s", c.ID, c.Rule)
		}
	}
}

// TestClusterPlan: Only reports the checks it names and runs, unreported,
// the earlier ones they need; Skip runs neither a check nor its needs.
func TestClusterPlan(t *testing.T) {
	keys := func(m map[string]bool) []string {
		var out []string
		for k := range m {
			out = append(out, k)
		}
		slices.Sort(out)
		return out
	}
	tests := []struct {
		name          string
		only, skip    []string
		run, reported []string
	}{
		{"only admin access", []string{"pod.admin-access"}, nil,
			[]string{"pod.admin-access", "pod.starts", "pod.unprepare"}, []string{"pod.admin-access"}},
		{"only restart names", []string{"pod.restart-device-names"}, nil,
			[]string{"pod.driver-restart", "pod.restart-device-names", "pod.starts", "pod.unprepare"}, []string{"pod.restart-device-names"}},
		{"skip a need", []string{"pod.admin-access"}, []string{"pod.unprepare"},
			[]string{"pod.admin-access"}, []string{"pod.admin-access"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := &clusterRun{cfg: ClusterConfig{Only: tc.only, Skip: tc.skip}}
			run, reported := c.plan()
			if diff := cmp.Diff(tc.run, keys(run)); diff != "" {
				t.Errorf("run (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.reported, keys(reported)); diff != "" {
				t.Errorf("reported (-want +got):\n%s", diff)
			}
		})
	}
}

// TestRefusedSlices: a refusal of a ResourceSlice in the driver's output
// (klog's text format escapes the quotes) is found, the last one wins,
// and other errors about slices are not taken for one.
func TestRefusedSlices(t *testing.T) {
	r := &runner{logTail: &tailBuffer{max: 1 << 12}}
	if got := r.refusedSlices(); got != "" {
		t.Errorf("empty output: %q", got)
	}
	fmt.Fprintln(r.logTail, `E1204 18:35:44.101 1 draplugin.go:1220] "Publishing failed" err="update ResourceSlice: Operation cannot be fulfilled on resourceslices.resource.k8s.io \"s\": the object has been modified"`)
	if got := r.refusedSlices(); got != "" {
		t.Errorf("a conflict taken for a refusal: %q", got)
	}
	fmt.Fprintln(r.logTail, `E1204 18:35:44.123 1 draplugin.go:1220] "ResourceSlice publishing failed" err="create ResourceSlice: ResourceSlice.resource.k8s.io \"old\" is invalid: [spec.devices[0]: x]"`)
	fmt.Fprintln(r.logTail, `E1204 18:35:45.123 1 draplugin.go:1220] "ResourceSlice publishing failed" err="create ResourceSlice: ResourceSlice.resource.k8s.io \"n-1\" is invalid: [spec.devices[0].attributes[resource.kubernetes.io/pcieRoot]: Invalid value: \"\": must specify one of: `+"`int`"+`]"`)
	want := `ResourceSlice.resource.k8s.io "n-1" is invalid: [spec.devices[0].attributes[resource.kubernetes.io/pcieRoot]: Invalid value: "": must specify one of: ` + "`int`" + `]`
	if got := r.refusedSlices(); got != want {
		t.Errorf("refusal:\ngot  %s\nwant %s", got, want)
	}
}

// TestWrittenSince: the new process's publication after a restart is
// recognized by a write the API server shows (a new resourceVersion, a
// new slice, a slice gone), whatever the pool's generation.
func TestWrittenSince(t *testing.T) {
	slice := func(uid, rv string) *resourceapi.ResourceSlice {
		return &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{UID: types.UID(uid), ResourceVersion: rv}}
	}
	before := marksOf([]*resourceapi.ResourceSlice{slice("a", "1"), slice("b", "2")})
	for _, c := range []struct {
		name   string
		slices []*resourceapi.ResourceSlice
		want   bool
	}{
		{"nothing written", []*resourceapi.ResourceSlice{slice("b", "2"), slice("a", "1")}, false},
		{"updated in place (same generation)", []*resourceapi.ResourceSlice{slice("a", "3"), slice("b", "2")}, true},
		{"replaced", []*resourceapi.ResourceSlice{slice("a", "1"), slice("c", "4")}, true},
		{"one deleted", []*resourceapi.ResourceSlice{slice("a", "1")}, true},
		{"one added", []*resourceapi.ResourceSlice{slice("a", "1"), slice("b", "2"), slice("c", "5")}, true},
	} {
		if got := writtenSince(before, c.slices); got != c.want {
			t.Errorf("%s: writtenSince = %v, want %v", c.name, got, c.want)
		}
	}
}

// TestBrokeDuringCall: only a connection that broke while the call was
// under way is a crash the call caused; a connection that could not be
// made, or a call that timed out, is not.
func TestBrokeDuringCall(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{status.Error(codes.Unavailable, "error reading from server: EOF"), true},
		{status.Error(codes.Unavailable, "connection error: desc = \"transport: Error while dialing: dial unix /x: connect: connection refused\""), false},
		{status.Error(codes.Unavailable, "connection error: desc = \"transport: Error while dialing: dial unix /x: connect: no such file or directory\""), false},
		{status.Error(codes.DeadlineExceeded, "context deadline exceeded"), false},
		{status.Error(codes.Internal, "boom"), false},
	} {
		if got := brokeDuringCall(c.err); got != c.want {
			t.Errorf("brokeDuringCall(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

// TestParseEnv: the container's environment is read from its
// /proc/<pid>/environ as od prints it (NUL-separated, a value with a
// newline intact, a name a shell drops kept), the shell's env apart.
func TestParseEnv(t *testing.T) {
	environ := "PATH=/bin\x00VENDOR_1b4e28ba-2fa1=dev-0\x00MULTI=a\nb\x00"
	var hexed strings.Builder
	for i, b := range []byte(environ) {
		if i%16 == 0 {
			hexed.WriteString("\n")
		}
		fmt.Fprintf(&hexed, " %02x", b)
	}
	logs := "PATH=/bin\nMULTI=a\nb\n" + environMark + hexed.String() + "\n" + envEndMark + "\n"
	env, shell, ok := parseEnv(logs)
	if !ok {
		t.Fatalf("environ not parsed from %q", logs)
	}
	want := map[string]string{"PATH": "/bin", "VENDOR_1b4e28ba-2fa1": "dev-0", "MULTI": "a\nb"}
	if diff := cmp.Diff(want, env); diff != "" {
		t.Errorf("environ (-want +got):\n%s", diff)
	}
	if _, ok := shell["VENDOR_1b4e28ba-2fa1"]; ok || shell["PATH"] != "/bin" {
		t.Errorf("shell env: %v", shell)
	}
	// An image without od: the shell's env.
	env, _, ok = parseEnv("A=1\n" + environMark + "\nsh: od: not found\n" + envEndMark + "\n")
	if ok || env["A"] != "1" {
		t.Errorf("without od: %v %v, want the shell's env", env, ok)
	}
}

// TestRunHook: a hook that leaves a process in the background holding
// its output returns when it exits; one that does not return in time is
// killed and reported as the hook's failure, with its output.
func TestRunHook(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pid")
	if err := runHook(t.Context(), "the restart command", []string{"sh", "-c", "sleep 300 & echo $! > " + pidFile}, time.Minute); err != nil {
		t.Fatalf("backgrounding hook: %v", err)
	}
	data, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		t.Fatal(err)
	}
	// The hook returned while the child it left, which holds its
	// output, still runs.
	if err := syscall.Kill(pid, 0); err != nil {
		t.Errorf("the background child %d is gone (%v): the hook was waited for until it ended", pid, err)
	}
	_ = syscall.Kill(pid, syscall.SIGKILL)
	err = runHook(t.Context(), "the restart command", []string{"sh", "-c", "echo restarting; exec sleep 30"}, time.Second)
	if !isHookError(err) || !strings.Contains(err.Error(), "did not return within 1s") || !strings.Contains(err.Error(), "restarting") {
		t.Errorf("hanging hook: %v; want a hook error naming the bound and its output", err)
	}
	err = runHook(t.Context(), "the restart command", []string{"sh", "-c", "echo no such driver >&2; exit 3"}, 10*time.Second)
	if !isHookError(err) || !strings.Contains(err.Error(), "exit status 3") || !strings.Contains(err.Error(), "no such driver") {
		t.Errorf("failing hook: %v", err)
	}
}
