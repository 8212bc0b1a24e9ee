package driver_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2/ktesting"
	drahealthv1 "k8s.io/kubelet/pkg/apis/dra-health/v1"

	"github.com/drakit/drakit/device"
	. "github.com/drakit/drakit/driver"
	"github.com/drakit/drakit/driver/drivertest"
	"github.com/drakit/drakit/driver/internal/fakehw"
)

// recorder is a Preparer that records what each UnprepareDevice was
// given, in front of the fake hardware.
type recorder struct {
	*fakehw.HW
	mu         sync.Mutex
	unprepared []AllocatedDevice
}

func (r *recorder) UnprepareDevice(ctx context.Context, claim ClaimRef, dev AllocatedDevice,
	data json.RawMessage) error {
	r.mu.Lock()
	r.unprepared = append(r.unprepared, dev)
	r.mu.Unlock()
	return r.HW.UnprepareDevice(ctx, claim, dev, data)
}

// shareClaim is a claim with one share of device dev per share ID, each
// taking memory.
func shareClaim(uid, dev, memory string, shares ...string) *resourceapi.ResourceClaim {
	var allocs []alloc
	for i, s := range shares {
		allocs = append(allocs, alloc{request: fmt.Sprintf("r%d", i), device: dev, share: s})
	}
	c := testClaim(uid, allocs...)
	for i := range c.Status.Allocation.Devices.Results {
		c.Status.Allocation.Devices.Results[i].ConsumedCapacity =
			map[resourceapi.QualifiedName]resource.Quantity{"memory": resource.MustParse(memory)}
	}
	return c
}

func cdiIDs(r kubeletplugin.PrepareResult) []string {
	var out []string
	for _, d := range r.Devices {
		out = append(out, d.CDIDeviceIDs...)
	}
	return out
}

// TestSharesOfOneDevice: two claims each hold a share of one device;
// each share is prepared, named in CDI, checkpointed and unprepared on
// its own, with its share ID and consumed capacity, across a restart; a
// third claim with a share ID already held, or the device unshared, is
// refused.
func TestSharesOfOneDevice(t *testing.T) {
	e := newEnv(t)
	ctx := ctxFor(t)
	rec := &recorder{HW: e.hw}
	e.eng = e.engineWith(t, rec)
	a := shareClaim("a", "gpu", "4Gi", "share-a")
	b := shareClaim("b", "gpu", "8Gi", "share-b")
	ra := e.eng.Prepare(ctx, a)
	rb := e.eng.Prepare(ctx, b)
	if ra.Err != nil || rb.Err != nil {
		t.Fatalf("prepare: %v, %v", ra.Err, rb.Err)
	}
	for name, r := range map[string]kubeletplugin.PrepareResult{"a": ra, "b": rb} {
		if len(r.Devices) != 1 || r.Devices[0].ShareID == nil ||
			string(*r.Devices[0].ShareID) != "share-"+name {
			t.Errorf("claim %s: devices %+v, want one with share ID share-%s", name, r.Devices,
				name)
		}
		if ids := cdiIDs(r); len(ids) != 1 || !strings.HasSuffix(ids[0], "0-gpu-share-"+name) {
			t.Errorf("claim %s: CDI IDs %v, want one naming its share", name, ids)
		}
	}
	holders, err := e.hw.Holders()
	if err != nil {
		t.Fatal(err)
	}
	if want := []types.UID{"a", "b"}; !slices.Equal(holders["node-a_gpu"], want) {
		t.Errorf("device held by %v, want %v", holders["node-a_gpu"], want)
	}

	// A new process: the checkpoint holds both shares.
	e.eng = e.engineWith(t, rec)
	if again := e.eng.Prepare(ctx, a); again.Err != nil || !cmp.Equal(again, ra) {
		t.Errorf("repeated prepare after restart: %+v, want %+v", again, ra)
	}
	for _, c := range []*resourceapi.ResourceClaim{
		shareClaim("c", "gpu", "1Gi", "share-b"), // b's share ID
		testClaim("d", alloc{request: "r", device: "gpu"}),
	} {
		if r := e.eng.Prepare(ctx, c); !errors.Is(r.Err, ErrDeviceInUse) {
			t.Errorf("claim %s: %v, want %v", c.UID, r.Err, ErrDeviceInUse)
		}
	}
	if err := e.eng.Unprepare(ctx, ClaimRef{UID: "a"}); err != nil {
		t.Fatal(err)
	}
	if len(rec.unprepared) != 1 {
		t.Fatalf("unprepared %+v, want a's share", rec.unprepared)
	}
	got := rec.unprepared[0]
	mem := got.ConsumedCapacity["memory"]
	if got.ShareID == nil || *got.ShareID != "share-a" || mem.String() != "4Gi" {
		t.Errorf("unprepare got share %v with capacity %v, want share-a with memory 4Gi",
			got.ShareID, got.ConsumedCapacity)
	}
	if holders, _ := e.hw.Holders(); !slices.Equal(holders["node-a_gpu"], []types.UID{"b"}) {
		t.Errorf("after a's unprepare the device is held by %v, want b", holders["node-a_gpu"])
	}
	if got := e.records(t); len(got) != 1 || got["b"] == "" {
		t.Errorf("records %v, want b's only", got)
	}
	if v := e.hw.Violations(); len(v) > 0 {
		t.Errorf("hardware violations: %v", v)
	}
}

// TestTwoSharesInOneClaim: a claim may hold two shares of one device,
// each with a CDI device of its own; a preparer that sets one variable
// for both is refused (a container would see one value), leaving
// nothing behind; a device allocated twice without shares is an invalid
// allocation.
func TestTwoSharesInOneClaim(t *testing.T) {
	e := newEnv(t)
	ctx := ctxFor(t)
	two := shareClaim("two", "gpu", "2Gi", "s1", "s2")
	r := e.eng.Prepare(ctx, two)
	if r.Err == nil || !strings.Contains(r.Err.Error(), "both set variable FAKE_DEVICE") {
		t.Fatalf("two shares with one variable: %v, want a refusal naming FAKE_DEVICE", r.Err)
	}
	if got := e.records(t); len(got) != 0 {
		t.Errorf("refused claim left records %v", got)
	}
	if holders, _ := e.hw.Holders(); len(holders) != 0 {
		t.Errorf("refused claim left the hardware configured: %v", holders)
	}
	if files := e.specFiles(t); len(files) != 0 {
		t.Errorf("refused claim left CDI specs %v", files)
	}

	e.hw.EnvPerShare = true
	r = e.eng.Prepare(ctx, two)
	if r.Err != nil {
		t.Fatalf("two shares with a variable each: %v", r.Err)
	}
	if ids := cdiIDs(r); len(ids) != 2 || ids[0] == ids[1] {
		t.Errorf("CDI IDs %v, want one per share", ids)
	}

	twice := testClaim("twice", alloc{request: "x", device: "nic"}, alloc{request: "y",
		device: "nic"})
	r = e.eng.Prepare(ctx, twice)
	if r.Err == nil || !strings.Contains(r.Err.Error(), "without distinct share IDs") {
		t.Errorf("a device allocated twice to one claim: %v, want an invalid allocation", r.Err)
	}
	if v := e.hw.Violations(); len(v) > 0 {
		t.Errorf("hardware violations: %v", v)
	}
}

// TestCheckpointOfPreviousRelease loads a shared claim's record and CDI
// spec as the release before consumed capacity was kept wrote them
// (testdata/previous-release, written by that release's engine): the
// claim is still prepared, a repeated prepare gets its recorded answer,
// and its unprepare gives the vendor the share ID, without capacity.
func TestCheckpointOfPreviousRelease(t *testing.T) {
	e := newEnv(t)
	ctx := ctxFor(t)
	const uid = "7c1e0b3a-93f4-4d2e-8d0f-2a5b6c7d8e90"
	if err := exec.Command("cp", "-r", "testdata/previous-release/checkpoint",
		"testdata/previous-release/cdi", e.dir).Run(); err != nil {
		t.Fatal(err)
	}
	rec := &recorder{HW: e.hw}
	e.eng = e.engineWith(t, rec)
	if got := e.records(t); got[uid] != "Prepared" {
		t.Fatalf("records %v, want the claim prepared", got)
	}
	claim := shareClaim(uid, "gpu-0", "12Gi", "5d2f6a1b-0c3e-4f7a-9b8d-1e2f3a4b5c6d")
	claim.Status.Allocation.Devices.Results[0].Request = "small"
	r := e.eng.Prepare(ctx, claim)
	want := []string{"test.drakit.dev/claim=" + uid + "_0-gpu-0"}
	if r.Err != nil || !slices.Equal(cdiIDs(r), want) {
		t.Fatalf("repeated prepare: %v %v, want the recorded %v", r.Err, cdiIDs(r), want)
	}
	if _, err := os.Stat(filepath.Join(e.cdiDir,
		"test.drakit.dev+claim+"+uid+".json")); err != nil {
		t.Errorf("the recorded CDI spec: %v", err)
	}
	if err := e.eng.Unprepare(ctx, ClaimRef{UID: uid}); err != nil {
		t.Fatal(err)
	}
	if len(rec.unprepared) != 1 || rec.unprepared[0].ShareID == nil ||
		*rec.unprepared[0].ShareID != "5d2f6a1b-0c3e-4f7a-9b8d-1e2f3a4b5c6d" ||
		rec.unprepared[0].ConsumedCapacity != nil {
		t.Errorf("unprepare got %+v, want the share ID and no capacity", rec.unprepared)
	}
	if got := e.records(t); len(got) != 0 {
		t.Errorf("records left %v", got)
	}
}

// TestConcurrentShares prepares and unprepares many shares of one device
// at once (run it with -race): each claim ends prepared exactly once,
// the hardware never sees a share twice, and a restart in the middle
// keeps every share.
func TestConcurrentShares(t *testing.T) {
	e := newEnv(t)
	ctx := ctxFor(t)
	const n = 16
	claims := make([]*resourceapi.ResourceClaim, n)
	for i := range claims {
		claims[i] = shareClaim(fmt.Sprintf("c%02d", i), "gpu", "1Gi", fmt.Sprintf("share-%02d", i))
	}
	run := func(f func(c *resourceapi.ResourceClaim) error) {
		t.Helper()
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i, c := range claims {
			wg.Go(func() { errs[i] = f(c) })
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Fatal(err)
		}
	}
	prepare := func(c *resourceapi.ResourceClaim) error { return e.eng.Prepare(ctx, c).Err }
	run(prepare)
	run(prepare) // repeated: the recorded answers
	e.restart(t)
	holders, err := e.hw.Holders()
	if err != nil {
		t.Fatal(err)
	}
	if len(holders["node-a_gpu"]) != n || len(e.records(t)) != n {
		t.Errorf("after a restart: %d holders, %d records, want %d", len(holders["node-a_gpu"]),
			len(e.records(t)), n)
	}
	// Half go while the other half is prepared again.
	run(func(c *resourceapi.ResourceClaim) error {
		if c.UID < "c08" {
			return e.eng.Unprepare(ctx, ClaimRef{UID: c.UID})
		}
		return e.eng.Prepare(ctx, c).Err
	})
	if holders, _ := e.hw.Holders(); len(holders["node-a_gpu"]) != n/2 || len(e.records(t)) != n/2 {
		t.Errorf("after half unprepared: holders %v, records %v", holders, e.records(t))
	}
	if v := e.hw.Violations(); len(v) > 0 {
		t.Errorf("hardware violations: %v", v)
	}
}

// TestKillWithSharesHeld kills the driver with SIGKILL at the durable
// steps of one share's prepare and unprepare while another claim holds a
// share of the same device; after the restart the other share is still
// prepared exactly once, the killed one is undone (or finished) and
// prepared or unprepared again by the kubelet's next call, and nothing is
// lost or left behind (checkNode).
func TestKillWithSharesHeld(t *testing.T) {
	c := sharedCluster(t)
	for _, tc := range []struct {
		point   string
		prepare bool // killed in a's prepare, else in a's unprepare
	}{
		// TestKillAtEveryStep tries every point; these are the windows
		// of one share beside another: before the vendor, after it,
		// after the CDI spec, after the record, and in the undo.
		{"prepare/intent-written", true}, {"prepare/device-prepared", true},
		{"prepare/cdi-written", true}, {"prepare/completed", true},
		{"unprepare/device-unprepared", false},
	} {
		t.Run(strings.ReplaceAll(tc.point, "/", "-"), func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
			defer cancel()
			ns := newNamespace(ctx, t, c)
			d := newDirs(t)
			hw := newHW(t, d)
			share := func(id, mem string) drivertest.Device {
				return drivertest.Device{Device: "dev-0", ShareID: types.UID(id),
					ConsumedCapacity: map[string]string{"memory": mem}}
			}
			a := createClaim(ctx, t, c, ns, "a", share("5d2f6a1b-0c3e-4f7a-9b8d-1e2f3a4b5c6a",
				"4Gi"))
			b := createClaim(ctx, t, c, ns, "b", share("5d2f6a1b-0c3e-4f7a-9b8d-1e2f3a4b5c6b",
				"8Gi"))
			base := childConfig{Kubeconfig: c.Kubeconfig, Dirs: d, Devices: 2}
			dial := func() *drivertest.Kubelet {
				k, err := drivertest.Dial(d.draSocket())
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { k.Close() })
				return k
			}
			faulty := base
			faulty.Fault, faulty.FaultHit = tc.point, 1
			if tc.prepare {
				faulty.FaultHit = 2 // b's prepare passes first
			}
			ch := startChildWith(t, faulty)
			k := dial()
			if _, err := k.Prepare(ctx, b); err != nil {
				t.Fatal(err)
			}
			var err error
			if tc.prepare {
				_, err = k.Prepare(ctx, a)
			} else {
				if _, err := k.Prepare(ctx, a); err != nil {
					t.Fatal(err)
				}
				err = k.Unprepare(ctx, a)
			}
			if err == nil {
				t.Fatalf("the call survived fault point %s", tc.point)
			}
			ch.waitDead(t)

			startChildWith(t, base)
			k = dial()
			want := map[*resourceapi.ResourceClaim][]string{b: {"dev-0"}}
			if tc.point == "prepare/completed" {
				want[a] = []string{"dev-0"}
			}
			checkNode(ctx, t, d, hw, want)
			if tc.prepare {
				if _, err := k.Prepare(ctx, a); err != nil {
					t.Fatalf("retried prepare: %v", err)
				}
				checkNode(ctx, t, d, hw, map[*resourceapi.ResourceClaim][]string{a: {"dev-0"},
					b: {"dev-0"}})
			}
			if err := k.Unprepare(ctx, a); err != nil {
				t.Fatalf("unprepare after the restart: %v", err)
			}
			checkNode(ctx, t, d, hw, map[*resourceapi.ResourceClaim][]string{b: {"dev-0"}})
			if err := k.Unprepare(ctx, b); err != nil {
				t.Fatal(err)
			}
			checkNode(ctx, t, d, hw, nil)
		})
	}
}

// TestHealthOfASharedDevice: a device's health is the health of every
// share of it. The kubelet's stream reports the device (pool and name:
// shares have no health of their own in the API, and the kubelet gives
// each claim allocated the device its health), the slice taints it so
// that no new share is allocated, and both prepared shares stay prepared.
func TestHealthOfASharedDevice(t *testing.T) {
	c, ctx, ns, d, hw := setupE2E(t)
	reports := make(chan []device.HealthReport, 1)
	inv := testInventory(1)
	inv.Pools[0].Devices[0].AllowMultipleAllocations()
	disc, err := device.NewHealthDiscoverer(inv, device.HealthChannel(reports))
	if err != nil {
		t.Fatal(err)
	}
	startDriver(ctx, t, c, d, disc, hw)
	k, err := drivertest.Dial(d.draSocket())
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	var claims []*resourceapi.ResourceClaim
	for i, s := range []string{"share-a", "share-b"} {
		id := types.UID(fmt.Sprintf("5d2f6a1b-0c3e-4f7a-9b8d-1e2f3a4b5c6%d", i))
		cl := createClaim(ctx, t, c, ns, s, drivertest.Device{Device: "dev-0", ShareID: id})
		if _, err := k.Prepare(ctx, cl); err != nil {
			t.Fatal(err)
		}
		claims = append(claims, cl)
	}
	stream := watchHealth(ctx, t, d.draSocket())
	reports <- []device.HealthReport{{Device: device.DeviceID{Pool: testNode, Device: "dev-0"},
		Health: device.Unhealthy, Time: time.Now()}}
	got := stream.until("dev-0", "UNHEALTHY", is(drahealthv1.HealthStatus_UNHEALTHY))
	if got.Device.PoolName != testNode {
		t.Errorf("health of pool %q, want %q", got.Device.PoolName, testNode)
	}
	if err := pollUntil(ctx, func() bool {
		s, err := slicesOfNode(ctx, c)
		return err == nil && len(taintsOf(s)["dev-0"]) > 0
	}); err != nil {
		t.Errorf("the shared device is not tainted: %v", err)
	}
	// Both shares are still prepared: a repeated prepare answers from
	// the checkpoint.
	for _, cl := range claims {
		if _, err := k.Prepare(ctx, cl); err != nil {
			t.Errorf("claim %s after the report: %v", cl.Name, err)
		}
	}
	if holders, _ := hw.Holders(); len(holders[testNode+"_dev-0"]) != 2 {
		t.Errorf("device held by %v, want both shares", holders)
	}
	if err := k.Unprepare(ctx, claims...); err != nil {
		t.Fatal(err)
	}
}
