package driver_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2/ktesting"

	"github.com/drakit/drakit/cdi"
	. "github.com/drakit/drakit/driver"
	"github.com/drakit/drakit/driver/internal/checkpoint"
	"github.com/drakit/drakit/driver/internal/fakehw"
)

const testDriver = "test.drakit.dev"

type result struct {
	Request, Device string
	ShareID         *types.UID
}

// alloc describes one allocation result for a test claim.
type alloc struct {
	request, device string
	admin           bool
	share           string
	driver          string
}

func testClaim(uid string, allocs ...alloc) *resourceapi.ResourceClaim {
	c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "claim-" + uid, UID: types.UID(uid)}}
	c.Status.Allocation = &resourceapi.AllocationResult{}
	for _, a := range allocs {
		drv := a.driver
		if drv == "" {
			drv = testDriver
		}
		r := resourceapi.DeviceRequestAllocationResult{Request: a.request, Driver: drv, Pool: "node-a", Device: a.device}
		if a.admin {
			t := true
			r.AdminAccess = &t
		}
		if a.share != "" {
			s := types.UID(a.share)
			r.ShareID = &s
		}
		c.Status.Allocation.Devices.Results = append(c.Status.Allocation.Devices.Results, r)
	}
	return c
}

type env struct {
	dir, cdiDir string
	hw          *fakehw.HW
	eng         *TestEngine
}

func newEnv(t *testing.T) *env {
	t.Helper()
	dir := t.TempDir()
	e := &env{dir: dir, cdiDir: filepath.Join(dir, "cdi")}
	var err error
	if e.hw, err = fakehw.New(filepath.Join(dir, "hw")); err != nil {
		t.Fatal(err)
	}
	e.restart(t)
	return e
}

// restart builds a fresh engine on the same folders, as a new process
// would, and recovers.
func (e *env) restart(t *testing.T) {
	t.Helper()
	e.eng = e.engineWith(t, e.hw)
}

// engineWith builds an engine on e's folders with preparer p and
// recovers.
func (e *env) engineWith(t *testing.T, p Preparer) *TestEngine {
	t.Helper()
	store, err := checkpoint.Open(filepath.Join(e.dir, "checkpoint"))
	if err != nil {
		t.Fatal(err)
	}
	specs, err := cdi.NewWriter(e.cdiDir, testDriver, CDIClass)
	if err != nil {
		t.Fatal(err)
	}
	eng := NewTestEngine(testDriver, store, specs, p)
	_, ctx := ktesting.NewTestContext(t)
	if err := eng.Recover(ctx); err != nil {
		t.Fatalf("recover: %v", err)
	}
	return eng
}

func (e *env) specFiles(t *testing.T) []string {
	t.Helper()
	entries, err := os.ReadDir(e.cdiDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, x := range entries {
		out = append(out, x.Name())
	}
	return out
}

func (e *env) records(t *testing.T) map[types.UID]checkpoint.State {
	t.Helper()
	recs, corrupt, err := e.eng.Store().Load()
	if err != nil || len(corrupt) > 0 {
		t.Fatalf("load checkpoint: %v %v", err, corrupt)
	}
	out := map[types.UID]checkpoint.State{}
	for _, r := range recs {
		out[r.ClaimUID] = r.State
	}
	return out
}

func ctxFor(t *testing.T) context.Context {
	_, ctx := ktesting.NewTestContext(t)
	return ctx
}

func summarize(r kubeletplugin.PrepareResult) []result {
	var out []result
	for _, d := range r.Devices {
		out = append(out, result{Request: d.Requests[0], Device: d.DeviceName, ShareID: d.ShareID})
	}
	return out
}

func TestPrepareResultAndIdempotency(t *testing.T) {
	e := newEnv(t)
	ctx := ctxFor(t)
	share := types.UID("share-1")
	claim := testClaim("c1",
		alloc{request: "gpu/large", device: "dev-0"},
		alloc{request: "nic", device: "dev-1", share: "share-1"},
		alloc{request: "other", device: "x", driver: "other.example.com"},
	)
	first := e.eng.Prepare(ctx, claim)
	if first.Err != nil {
		t.Fatalf("prepare: %v", first.Err)
	}
	want := []result{{Request: "gpu/large", Device: "dev-0"}, {Request: "nic", Device: "dev-1", ShareID: &share}}
	if d := cmp.Diff(want, summarize(first)); d != "" {
		t.Errorf("prepared devices (-want +got):\n%s", d)
	}
	for _, d := range first.Devices {
		if len(d.CDIDeviceIDs) != 1 {
			t.Errorf("device %s: CDI IDs %v, want one", d.DeviceName, d.CDIDeviceIDs)
		}
	}
	// The CDI IDs resolve and set the env var.
	for i, dev := range []string{"dev-0", "dev-1"} {
		env := injectEnv(t, e.cdiDir, first.Devices[i].CDIDeviceIDs...)
		if d := cmp.Diff([]string{"FAKE_DEVICE=" + dev}, env); d != "" {
			t.Errorf("container env of %s (-want +got):\n%s", dev, d)
		}
	}
	// Repeat: same result, no second vendor prepare (fakehw would log a
	// violation), also after a restart.
	again := e.eng.Prepare(ctx, claim)
	if d := cmp.Diff(first, again); d != "" {
		t.Errorf("repeated prepare differs (-first +again):\n%s", d)
	}
	e.restart(t)
	afterRestart := e.eng.Prepare(ctx, claim)
	if d := cmp.Diff(first, afterRestart); d != "" {
		t.Errorf("prepare after restart differs (-first +again):\n%s", d)
	}
	if v := e.hw.Violations(); len(v) > 0 {
		t.Errorf("hardware violations: %v", v)
	}
	if d := cmp.Diff(map[types.UID]checkpoint.State{"c1": checkpoint.StatePrepared}, e.records(t)); d != "" {
		t.Errorf("checkpoint (-want +got):\n%s", d)
	}

	// Unprepare after a restart works from the checkpoint alone.
	e.restart(t)
	ref := ClaimRef{UID: "c1", Namespace: "ns", Name: "claim-c1"}
	for i := range 2 {
		if err := e.eng.Unprepare(ctx, ref); err != nil {
			t.Fatalf("unprepare #%d: %v", i, err)
		}
	}
	if err := e.eng.Unprepare(ctx, ClaimRef{UID: "never-prepared"}); err != nil {
		t.Errorf("unprepare of unknown claim: %v", err)
	}
	if files := e.specFiles(t); len(files) != 0 {
		t.Errorf("CDI specs left after unprepare: %v", files)
	}
	if recs := e.records(t); len(recs) != 0 {
		t.Errorf("records left after unprepare: %v", recs)
	}
	holders, _ := e.hw.Holders()
	if len(holders) != 0 {
		t.Errorf("devices still configured after unprepare: %v", holders)
	}
}

func injectEnv(t *testing.T, dir string, ids ...string) []string {
	t.Helper()
	spec := newOCISpec()
	if err := cdi.Inject(spec, []string{dir}, ids...); err != nil {
		t.Fatalf("inject %v: %v", ids, err)
	}
	var out []string
	for _, e := range spec.Process.Env {
		if len(e) > 12 && e[:12] == "FAKE_DEVICE=" {
			out = append(out, e)
		}
	}
	slices.Sort(out)
	return out
}

func TestGuard(t *testing.T) {
	tests := []struct {
		name    string
		first   alloc
		second  alloc
		wantErr bool
	}{
		{name: "exclusive twice", first: alloc{request: "r", device: "d"}, second: alloc{request: "r", device: "d"}, wantErr: true},
		{name: "other device", first: alloc{request: "r", device: "d"}, second: alloc{request: "r", device: "e"}},
		{name: "admin access second", first: alloc{request: "r", device: "d"}, second: alloc{request: "r", device: "d", admin: true}},
		{name: "admin access first", first: alloc{request: "r", device: "d", admin: true}, second: alloc{request: "r", device: "d"}},
		{name: "distinct shares", first: alloc{request: "r", device: "d", share: "s1"}, second: alloc{request: "r", device: "d", share: "s2"}},
		{name: "same share", first: alloc{request: "r", device: "d", share: "s1"}, second: alloc{request: "r", device: "d", share: "s1"}, wantErr: true},
		{name: "shared after exclusive", first: alloc{request: "r", device: "d"}, second: alloc{request: "r", device: "d", share: "s2"}, wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			ctx := ctxFor(t)
			if r := e.eng.Prepare(ctx, testClaim("a", tc.first)); r.Err != nil {
				t.Fatalf("first prepare: %v", r.Err)
			}
			r := e.eng.Prepare(ctx, testClaim("b", tc.second))
			if tc.wantErr {
				if !errors.Is(r.Err, ErrDeviceInUse) {
					t.Fatalf("second prepare error = %v, want ErrDeviceInUse", r.Err)
				}
				if _, ok := e.records(t)["b"]; ok {
					t.Errorf("refused claim left a record")
				}
				// The guard also holds after a restart (from the checkpoint).
				e.restart(t)
				if r := e.eng.Prepare(ctx, testClaim("b", tc.second)); !errors.Is(r.Err, ErrDeviceInUse) {
					t.Errorf("after restart: error = %v, want ErrDeviceInUse", r.Err)
				}
				// Once the first claim is gone, the second prepares.
				if err := e.eng.Unprepare(ctx, ClaimRef{UID: "a"}); err != nil {
					t.Fatal(err)
				}
				if r := e.eng.Prepare(ctx, testClaim("b", tc.second)); r.Err != nil {
					t.Errorf("after first unprepared: %v", r.Err)
				}
			} else if r.Err != nil {
				t.Fatalf("second prepare: %v", r.Err)
			}
			if v := e.hw.Violations(); len(v) > 0 {
				t.Errorf("hardware violations: %v", v)
			}
		})
	}
}

func TestRollback(t *testing.T) {
	e := newEnv(t)
	ctx := ctxFor(t)
	e.hw.FailPrepare = func(dev AllocatedDevice) error {
		if dev.Device == "dev-2" {
			return errors.New("simulated hardware failure")
		}
		return nil
	}
	claim := testClaim("c1", alloc{request: "a", device: "dev-0"}, alloc{request: "b", device: "dev-1"}, alloc{request: "c", device: "dev-2"})
	r := e.eng.Prepare(ctx, claim)
	if r.Err == nil {
		t.Fatal("prepare succeeded, want the simulated failure")
	}
	holders, _ := e.hw.Holders()
	if len(holders) != 0 {
		t.Errorf("devices still configured after rollback: %v", holders)
	}
	if files := e.specFiles(t); len(files) != 0 {
		t.Errorf("CDI specs after rollback: %v", files)
	}
	if recs := e.records(t); len(recs) != 0 {
		t.Errorf("records after rollback: %v", recs)
	}
	// Devices are free again for another claim; the retry succeeds.
	if r := e.eng.Prepare(ctx, testClaim("c2", alloc{request: "a", device: "dev-0"})); r.Err != nil {
		t.Errorf("other claim after rollback: %v", r.Err)
	}
	e.hw.FailPrepare = nil
	if r := e.eng.Prepare(ctx, testClaim("c3", alloc{request: "b", device: "dev-1"}, alloc{request: "c", device: "dev-2"})); r.Err != nil {
		t.Errorf("retry: %v", r.Err)
	}
	if got := testutilCount(t, e.eng, "prepare", ReasonVendor); got != 1 {
		t.Errorf("errors_total{prepare,%s} = %v, want 1", ReasonVendor, got)
	}
	if v := e.hw.Violations(); len(v) > 0 {
		t.Errorf("hardware violations: %v", v)
	}
}

func TestFailedRollbackIsRetried(t *testing.T) {
	e := newEnv(t)
	ctx := ctxFor(t)
	e.hw.FailPrepare = func(dev AllocatedDevice) error {
		if dev.Device == "dev-1" {
			return errors.New("prepare failure")
		}
		return nil
	}
	e.hw.FailUnprepare = func(AllocatedDevice) error { return errors.New("unprepare failure") }
	claim := testClaim("c1", alloc{request: "a", device: "dev-0"}, alloc{request: "b", device: "dev-1"})
	if r := e.eng.Prepare(ctx, claim); r.Err == nil {
		t.Fatal("prepare succeeded")
	}
	// dev-0 stays reserved: another claim cannot take it.
	if r := e.eng.Prepare(ctx, testClaim("c2", alloc{request: "a", device: "dev-0"})); !errors.Is(r.Err, ErrDeviceInUse) {
		t.Errorf("other claim on half-undone device: %v, want ErrDeviceInUse", r.Err)
	}
	// After a restart the undo is retried and succeeds.
	e.hw.FailPrepare, e.hw.FailUnprepare = nil, nil
	e.restart(t)
	if recs := e.records(t); len(recs) != 0 {
		t.Errorf("records after recovery: %v", recs)
	}
	if r := e.eng.Prepare(ctx, testClaim("c2", alloc{request: "a", device: "dev-0"})); r.Err != nil {
		t.Errorf("other claim after recovery: %v", r.Err)
	}
	if v := e.hw.Violations(); len(v) > 0 {
		t.Errorf("hardware violations: %v", v)
	}
}

func TestRecoverHalfwayAndOrphans(t *testing.T) {
	e := newEnv(t)
	ctx := ctxFor(t)
	// A prepared claim, then fake a crash in the middle of another
	// prepare: intent on disk, device configured, spec written.
	if r := e.eng.Prepare(ctx, testClaim("keep", alloc{request: "a", device: "dev-0"})); r.Err != nil {
		t.Fatal(r.Err)
	}
	half := testClaim("half", alloc{request: "a", device: "dev-1"})
	if _, err := e.hw.PrepareDevice(ctx, Claim{ClaimRef: ClaimRef{UID: "half"}}, AllocatedDevice{Pool: "node-a", Device: "dev-1", Request: "a"}); err != nil {
		t.Fatal(err)
	}
	if err := e.eng.Store().WriteIntent(&checkpoint.Record{ClaimUID: "half", Namespace: "ns", Name: half.Name, State: checkpoint.StatePrepareStarted,
		Devices: []checkpoint.Device{{Request: "a", Pool: "node-a", Device: "dev-1"}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.eng.Specs().Write(ctx, cdi.Claim{UID: "half", Devices: []cdi.Device{{Name: "0-dev-1", Edits: (&cdi.Edits{}).Env("X", "1")}}}); err != nil {
		t.Fatal(err)
	}
	// An orphan spec with no record at all.
	if _, err := e.eng.Specs().Write(ctx, cdi.Claim{UID: "orphan", Devices: []cdi.Device{{Name: "d", Edits: (&cdi.Edits{}).Env("X", "1")}}}); err != nil {
		t.Fatal(err)
	}
	// A corrupt record.
	if err := os.WriteFile(filepath.Join(e.dir, "checkpoint", "bad.json"), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	e.restart(t)
	if d := cmp.Diff(map[types.UID]checkpoint.State{"keep": checkpoint.StatePrepared}, e.records(t)); d != "" {
		t.Errorf("records after recovery (-want +got):\n%s", d)
	}
	specs, err := e.eng.Specs().Claims(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]types.UID{"keep"}, specs); d != "" {
		t.Errorf("CDI specs after recovery (-want +got):\n%s", d)
	}
	holders, _ := e.hw.Holders()
	if d := cmp.Diff(map[string][]types.UID{"node-a_dev-0": {"keep"}}, holders); d != "" {
		t.Errorf("configured devices after recovery (-want +got):\n%s", d)
	}
	if got := testutilCount(t, e.eng, "recover", ReasonCorrupt); got != 1 {
		t.Errorf("errors_total{recover,%s} = %v, want 1", ReasonCorrupt, got)
	}
	q, _ := e.eng.Store().Quarantined()
	if len(q) != 1 {
		t.Errorf("quarantined files = %v, want one", q)
	}
}

func TestConfig(t *testing.T) {
	claim := testClaim("c1", alloc{request: "gpu/small", device: "d0"}, alloc{request: "nic", device: "d1"})
	raw := func(s string) runtime.RawExtension { return runtime.RawExtension{Raw: []byte(s)} }
	claim.Status.Allocation.Devices.Config = []resourceapi.DeviceAllocationConfiguration{
		{Source: resourceapi.AllocationConfigSourceClaim, Requests: []string{"gpu"}, DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{Driver: testDriver, Parameters: raw(`{"mode":"claim"}`)}}},
		{Source: resourceapi.AllocationConfigSourceClass, DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{Driver: testDriver, Parameters: raw(`{"mode":"class","level":2}`)}}},
		{Source: resourceapi.AllocationConfigSourceClaim, DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{Driver: "other.example.com", Parameters: raw(`{"x":1}`)}}},
	}
	devs, err := DevicesFromClaim(testDriver, claim)
	if err != nil {
		t.Fatal(err)
	}
	type cfg struct {
		Mode  string `json:"mode"`
		Level int    `json:"level"`
	}
	tests := []struct {
		dev  int
		want cfg
	}{
		{dev: 0, want: cfg{Mode: "claim", Level: 2}},
		{dev: 1, want: cfg{Mode: "class", Level: 2}},
	}
	for _, tc := range tests {
		var got cfg
		if err := DecodeConfig(devs[tc.dev], &got); err != nil {
			t.Fatalf("decode: %v", err)
		}
		if d := cmp.Diff(tc.want, got); d != "" {
			t.Errorf("device %d config (-want +got):\n%s", tc.dev, d)
		}
	}
	bad := devs[0]
	bad.Config = append(bad.Config, OpaqueConfig{Parameters: json.RawMessage(`{"mdoe":"typo"}`)})
	var got cfg
	err = DecodeConfig(bad, &got)
	if !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("decode with unknown field: %v, want ErrInvalidConfig", err)
	}
	if want := `request "gpu/small": claim config #2`; !contains(err.Error(), want) || !contains(err.Error(), "mdoe") {
		t.Errorf("error %q does not name the request, source and field", err)
	}
}

func contains(s, sub string) bool {
	return len(s) >= len(sub) && (s == sub || len(sub) == 0 || indexOf(s, sub) >= 0)
}

func indexOf(s, sub string) int {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return i
		}
	}
	return -1
}

func testutilCount(t *testing.T, e *TestEngine, op, reason string) float64 {
	t.Helper()
	return e.ErrorCount(op, reason)
}

var _ = fmt.Sprintf

// TestEngineConcurrent races prepares of distinct claims, repeats of the
// same claim, and pairs of claims that want the same device: each pair
// must end with exactly one winner. Run it with -race.
func TestEngineConcurrent(t *testing.T) {
	e := newEnv(t)
	ctx := ctxFor(t)
	const n = 40
	var wg sync.WaitGroup
	results := make([][2]kubeletplugin.PrepareResult, n)
	for i := range n {
		// Claims 2i and 2i+1 both want device i.
		for j := range 2 {
			claim := testClaim(fmt.Sprintf("c-%d-%d", i, j), alloc{request: "r", device: fmt.Sprintf("dev-%d", i)})
			wg.Go(func() { results[i][j] = e.eng.Prepare(ctx, claim) })
			wg.Go(func() { e.eng.Prepare(ctx, claim) }) // a repeat, racing
		}
	}
	wg.Wait()
	for i, pair := range results {
		ok := 0
		for _, r := range pair {
			if r.Err == nil {
				ok++
			} else if !errors.Is(r.Err, ErrDeviceInUse) {
				t.Errorf("device %d: unexpected error %v", i, r.Err)
			}
		}
		if ok != 1 {
			t.Errorf("device %d: %d claims prepared, want exactly 1", i, ok)
		}
	}
	holders, _ := e.hw.Holders()
	if len(holders) != n {
		t.Errorf("%d devices configured, want %d", len(holders), n)
	}
	for i := range n {
		for j := range 2 {
			wg.Go(func() {
				if err := e.eng.Unprepare(ctx, ClaimRef{UID: types.UID(fmt.Sprintf("c-%d-%d", i, j))}); err != nil {
					t.Error(err)
				}
			})
		}
	}
	wg.Wait()
	if holders, _ := e.hw.Holders(); len(holders) != 0 {
		t.Errorf("devices configured after unprepare: %v", holders)
	}
	if v := e.hw.Violations(); len(v) > 0 {
		t.Errorf("hardware violations: %v", v)
	}
}

// TestRecoverLostSpec: a prepared claim whose CDI spec vanished (the CDI
// folder deleted or wiped without a reboot) or is torn gets its spec
// written again at start, from its checkpoint record, with the same IDs:
// its devices still serve the containers that use them, so it is never
// undone for it (issue 35: a restart undid both claims and destroyed a
// MIG device a running pod used). After a reboot, every claim is undone
// (TestRebootUndoesClaims).
func TestRecoverLostSpec(t *testing.T) {
	for _, damage := range []string{"missing", "torn", "folder deleted"} {
		t.Run(damage, func(t *testing.T) {
			e := newEnv(t)
			ctx := ctxFor(t)
			claim := testClaim("c1", alloc{request: "a", device: "dev-0"})
			first := e.eng.Prepare(ctx, claim)
			if first.Err != nil {
				t.Fatal(first.Err)
			}
			path, err := e.eng.Specs().SpecPath("c1")
			if err != nil {
				t.Fatal(err)
			}
			switch damage {
			case "missing":
				err = os.Remove(path)
			case "torn":
				err = os.WriteFile(path, []byte(`{"cdiVersion":"0.`), 0o644)
			default:
				err = os.RemoveAll(e.cdiDir)
			}
			if err != nil {
				t.Fatal(err)
			}
			holders, _ := e.hw.Holders()
			e.restart(t)
			if recs := e.records(t); recs["c1"] != checkpoint.StatePrepared {
				t.Errorf("records after recovery: %v, want c1 still prepared", recs)
			}
			if after, _ := e.hw.Holders(); !cmp.Equal(after, holders) {
				t.Errorf("devices configured after recovery: %v, want %v (not undone)", after, holders)
			}
			if env := injectEnv(t, e.cdiDir, first.Devices[0].CDIDeviceIDs...); len(env) != 1 {
				t.Errorf("env of the claim's IDs after recovery: %v", env)
			}
		})
	}
}

// A prepared claim whose CDI folder is deleted while the driver runs: the
// kubelet's next prepare of it (a second pod, a restarted container)
// writes the spec again and answers the same IDs, without undoing
// anything (it answered success and the IDs did not resolve).
func TestRePrepareWritesLostSpec(t *testing.T) {
	e := newEnv(t)
	ctx := ctxFor(t)
	claim := testClaim("c1", alloc{request: "a", device: "dev-0"}, alloc{request: "b", device: "dev-1"})
	first := e.eng.Prepare(ctx, claim)
	if first.Err != nil {
		t.Fatal(first.Err)
	}
	holders, _ := e.hw.Holders()
	if err := os.RemoveAll(e.cdiDir); err != nil {
		t.Fatal(err)
	}
	again := e.eng.Prepare(ctx, claim)
	if again.Err != nil {
		t.Fatal(again.Err)
	}
	if !cmp.Equal(again.Devices, first.Devices) {
		t.Errorf("re-prepare answered %+v, want %+v", again.Devices, first.Devices)
	}
	var ids []string
	for _, d := range again.Devices {
		ids = append(ids, d.CDIDeviceIDs...)
	}
	if env := injectEnv(t, e.cdiDir, ids...); len(env) == 0 { // injectEnv fails for an ID that does not resolve
		t.Errorf("env of the claim's IDs after the re-prepare: %v", env)
	}
	if after, _ := e.hw.Holders(); !cmp.Equal(after, holders) {
		t.Errorf("devices configured after the re-prepare: %v, want %v", after, holders)
	}
}

// TestRecordsImmutableOncePublished reads the engine's records under its
// lock while claims are prepared and unprepared: a record the engine
// publishes must not change afterwards (run with -race: before records
// were published as immutable values, prepare filled in the devices of
// the published intent without the lock).
func TestRecordsImmutableOncePublished(t *testing.T) {
	e := newEnv(t)
	ctx := ctxFor(t)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			for _, r := range e.eng.Records() {
				for _, d := range r.Devices {
					if d.Pool == "" || d.Device == "" {
						t.Errorf("record of %s has a device without pool or name", r.ClaimUID)
					}
				}
			}
		}
	})
	for i := range 50 {
		c := testClaim(fmt.Sprintf("imm-%d", i), alloc{request: "a", device: fmt.Sprintf("gpu-%d", i%4)})
		if res := e.eng.Prepare(ctx, c); res.Err != nil {
			t.Fatal(res.Err)
		}
		if err := e.eng.Unprepare(ctx, ClaimRef{UID: c.UID, Namespace: c.Namespace, Name: c.Name}); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()
}

// Prepare tells the engine's callback about opaque configuration for a
// driver that allocated none of the claim's devices, and prepares the
// claim all the same.
func TestPrepareReportsUnusedConfig(t *testing.T) {
	e := newEnv(t)
	ctx := ctxFor(t)
	var got []string
	e.eng.OnUnusedConfig(func(_ context.Context, _ *resourceapi.ResourceClaim, drivers []string) { got = drivers })
	claim := testClaim("c1", alloc{request: "gpu", device: "dev-0"})
	claim.Status.Allocation.Devices.Config = []resourceapi.DeviceAllocationConfiguration{{Source: resourceapi.AllocationConfigSourceClaim,
		DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{Driver: "gpu.nvidia.com", Parameters: runtime.RawExtension{Raw: []byte(`{}`)}}}}}
	if r := e.eng.Prepare(ctx, claim); r.Err != nil {
		t.Fatalf("prepare: %v", r.Err)
	}
	if len(got) != 1 || got[0] != "gpu.nvidia.com" {
		t.Errorf("unused configuration reported for %v, want [gpu.nvidia.com]", got)
	}
}
