package driver_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

	"github.com/drakit/drakit/cdi"
	. "github.com/drakit/drakit/driver"
	"github.com/drakit/drakit/driver/internal/checkpoint"
	"github.com/drakit/drakit/driver/internal/fakehw"
)

// This file holds the engine-level tests of an administrator's bad day
// (issue 17): misplaced records, read-only and full file systems,
// allocations of devices the driver never published.

// mountTmpfs mounts a tmpfs of the given size on a new folder and
// unmounts it when the test ends; it skips the test where mounting is not
// permitted (not root, no CAP_SYS_ADMIN).
func mountTmpfs(t *testing.T, size string) string {
	t.Helper()
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size+",mode=0755", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("needs to mount a tmpfs (root with CAP_SYS_ADMIN): %v: %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
	return dir
}

// remount makes a tmpfs from mountTmpfs read-only ("ro") or writable
// again ("rw"): a real EROFS, which chmod cannot give a root process.
func remount(t *testing.T, dir, mode string) {
	t.Helper()
	if out, err := exec.Command("mount", "-o", "remount,"+mode, dir).CombinedOutput(); err != nil {
		t.Fatalf("remount %s %s: %v: %s", dir, mode, err, out)
	}
}

// envOn is an engine with its checkpoint under ckptRoot and its CDI specs
// in cdiDir, and its fake hardware elsewhere.
func envOn(t *testing.T, ckptRoot, cdiDir string) *env {
	t.Helper()
	hw, err := fakehw.New(filepath.Join(t.TempDir(), "hw"))
	if err != nil {
		t.Fatal(err)
	}
	e := &env{dir: ckptRoot, cdiDir: cdiDir, hw: hw}
	e.restart(t)
	return e
}

func (e *env) holders(t *testing.T) map[string][]types.UID {
	t.Helper()
	h, err := e.hw.Holders()
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range h {
		if len(v) == 0 {
			delete(h, k)
		}
	}
	return h
}

// TestMisplacedRecord: a claim's record stored under another claim's
// file name is the corrupt record of both claims. The claim it holds
// keeps its CDI spec and is undone before it is prepared again, so its
// device is never prepared twice.
func TestMisplacedRecord(t *testing.T) {
	e := newEnv(t)
	ctx := ctxFor(t)
	a := testClaim("aaaa", alloc{request: "r", device: "dev-0"})
	if r := e.eng.Prepare(ctx, a); r.Err != nil {
		t.Fatal(r.Err)
	}
	ckpt := filepath.Join(e.dir, "checkpoint")
	if err := os.Rename(filepath.Join(ckpt, "aaaa.json"), filepath.Join(ckpt, "bbbb.json")); err != nil {
		t.Fatal(err)
	}
	e.restart(t)
	lost, err := e.eng.Store().Lost()
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(lost)
	if d := cmp.Diff([]types.UID{"aaaa", "bbbb"}, lost); d != "" {
		t.Errorf("lost claims (-want +got):\n%s", d)
	}
	specs, err := e.eng.Specs().Claims(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(specs, "aaaa") {
		t.Errorf("CDI spec of the claim whose record was misplaced removed at start; specs: %v", specs)
	}
	// The kubelet prepares it again (a pod restart): undone, prepared once.
	if r := e.eng.Prepare(ctx, a); r.Err != nil {
		t.Fatalf("prepare again: %v", r.Err)
	}
	if v := e.hw.Violations(); len(v) > 0 {
		t.Errorf("hardware violations: %v", v)
	}
	if d := cmp.Diff(map[string][]types.UID{"node-a_dev-0": {"aaaa"}}, e.holders(t)); d != "" {
		t.Errorf("configured devices (-want +got):\n%s", d)
	}
	if err := e.eng.Unprepare(ctx, ClaimRef{UID: "aaaa", Namespace: "ns", Name: "claim-aaaa"}); err != nil {
		t.Fatal(err)
	}
	if h := e.holders(t); len(h) != 0 {
		t.Errorf("devices configured after unprepare: %v", h)
	}
}

// TestUnpublishedDeviceRefused: an allocation of a device the driver
// does not publish never reaches the vendor.
func TestUnpublishedDeviceRefused(t *testing.T) {
	e := newEnv(t)
	ctx := ctxFor(t)
	e.eng.SetPublished(func(pool, dev string) bool { return pool == "node-a" && dev == "dev-0" })
	called := false
	e.hw.FailPrepare = func(AllocatedDevice) error { called = true; return nil }
	for _, c := range []struct{ name, pool, device string }{
		{"unknown device", "node-a", "ghost"},
		{"other pool", "node-b", "dev-0"},
	} {
		t.Run(c.name, func(t *testing.T) {
			claim := testClaim("c-"+c.device, alloc{request: "ok", device: "dev-0"}, alloc{request: "bad", device: c.device})
			claim.Status.Allocation.Devices.Results[1].Pool = c.pool
			r := e.eng.Prepare(ctx, claim)
			if r.Err == nil || !strings.Contains(r.Err.Error(), c.pool+"/"+c.device+` (request "bad") is not published`) {
				t.Fatalf("prepare = %v, want an error naming the unpublished device", r.Err)
			}
			if called {
				t.Error("the vendor's PrepareDevice was called")
			}
			if n := e.eng.ErrorCount("prepare", ReasonAllocation); n == 0 {
				t.Errorf("errors_total{prepare,%s} = 0", ReasonAllocation)
			}
			if recs := e.records(t); len(recs) != 0 {
				t.Errorf("records after refusal: %v", recs)
			}
		})
	}
}

// TestUnprepareOnFullDisk: with the checkpoint's file system full, the
// unprepare intent is appended to the record file where its last page has
// room, else the file is renamed; unprepare frees the devices, and a crash
// after the intent is finished by the next process.
func TestUnprepareOnFullDisk(t *testing.T) {
	root := mountTmpfs(t, "256k")
	e := envOn(t, root, filepath.Join(t.TempDir(), "cdi"))
	ctx := ctxFor(t)
	for _, uid := range []string{"c1", "c2"} {
		if r := e.eng.Prepare(ctx, testClaim(uid, alloc{request: "r", device: "dev-" + uid})); r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	// c2's record file fills its last page (a record file may end in
	// white space), so that its intent cannot be appended.
	c2 := filepath.Join(root, "checkpoint", "c2.json")
	st, err := os.Stat(c2)
	if err != nil {
		t.Fatal(err)
	}
	pad := make([]byte, 4096-st.Size()%4096)
	for i := range pad {
		pad[i] = ' '
	}
	f, err := os.OpenFile(c2, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(pad); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	fill(t, filepath.Join(root, "filler"))
	if r := e.eng.Prepare(ctx, testClaim("c3", alloc{request: "r", device: "dev-c3"})); !errors.Is(r.Err, syscall.ENOSPC) {
		t.Fatalf("prepare on a full disk = %v, want ENOSPC (is the disk full?)", r.Err)
	}

	if err := e.eng.Unprepare(ctx, ClaimRef{UID: "c1", Namespace: "ns", Name: "claim-c1"}); err != nil {
		t.Fatalf("unprepare on a full disk: %v", err)
	}
	fill(t, filepath.Join(root, "filler2")) // c1's record freed a page
	// A failure after the intent: the next process finishes the unprepare.
	e.hw.FailUnprepare = func(AllocatedDevice) error { return errors.New("device busy") }
	if err := e.eng.Unprepare(ctx, ClaimRef{UID: "c2", Namespace: "ns", Name: "claim-c2"}); err == nil {
		t.Fatal("unprepare with a failing device succeeded")
	}
	if d := cmp.Diff(map[types.UID]checkpoint.State{"c2": checkpoint.StateUnprepareStarted}, e.records(t)); d != "" {
		t.Errorf("records after a failed unprepare on a full disk (-want +got):\n%s", d)
	}
	if _, err := os.Stat(strings.TrimSuffix(c2, ".json") + ".unprepare"); err != nil {
		t.Errorf("c2's record was not renamed: %v", err)
	}
	e.hw.FailUnprepare = nil
	e.restart(t)
	if recs := e.records(t); len(recs) != 0 {
		t.Errorf("records after recovery: %v", recs)
	}
	if h := e.holders(t); len(h) != 0 {
		t.Errorf("devices configured: %v", h)
	}
	if files := e.specFiles(t); len(files) != 0 {
		t.Errorf("CDI specs left: %v", files)
	}
	if v := e.hw.Violations(); len(v) > 0 {
		t.Errorf("hardware violations: %v", v)
	}
}

// fill writes path until its file system is full.
func fill(t *testing.T, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 4096)
	for {
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			return
		}
	}
}

// TestReadOnlyCDIFolderAtStart: an orphaned spec that cannot be removed
// (EROFS) does not stop recovery; it is logged, counted and removed by a
// later collection once the folder is writable.
func TestReadOnlyCDIFolderAtStart(t *testing.T) {
	cdiDir := mountTmpfs(t, "1m")
	e := envOn(t, t.TempDir(), cdiDir)
	ctx := ctxFor(t)
	w, err := cdi.NewWriter(cdiDir, testDriver, CDIClass)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(ctx, cdi.Claim{UID: "orphan", Devices: []cdi.Device{{Name: "d"}}}); err != nil {
		t.Fatal(err)
	}
	remount(t, cdiDir, "ro")
	e.restart(t) // fails the test if recovery returns an error
	if n := e.eng.ErrorCount("housekeeping", ReasonCDI); n != 1 {
		t.Errorf("errors_total{housekeeping,%s} = %v, want 1", ReasonCDI, n)
	}
	if files := e.specFiles(t); len(files) != 1 {
		t.Fatalf("CDI folder holds %v, want the orphan", files)
	}
	remount(t, cdiDir, "rw")
	e.eng.Collect(ctx)
	if files := e.specFiles(t); len(files) != 0 {
		t.Errorf("orphaned spec not collected once the folder is writable: %v", files)
	}
}

// TestRollbackOnReadOnlyCDIFolder: a prepare whose CDI spec cannot be
// written is rolled back completely: removing the spec that was never
// written is not a failure.
func TestRollbackOnReadOnlyCDIFolder(t *testing.T) {
	cdiDir := mountTmpfs(t, "1m")
	remount(t, cdiDir, "ro")
	e := envOn(t, t.TempDir(), cdiDir)
	ctx := ctxFor(t)
	r := e.eng.Prepare(ctx, testClaim("c1", alloc{request: "r", device: "dev-0"}))
	if !errors.Is(r.Err, syscall.EROFS) {
		t.Fatalf("prepare = %v, want EROFS", r.Err)
	}
	if strings.Contains(r.Err.Error(), "rollback failed") {
		t.Errorf("rollback reported a failure: %v", r.Err)
	}
	if recs := e.records(t); len(recs) != 0 {
		t.Errorf("records after rollback: %v", recs)
	}
	if h := e.holders(t); len(h) != 0 {
		t.Errorf("devices configured after rollback: %v", h)
	}
	if n := e.eng.ErrorCount("prepare", ReasonRollback); n != 0 {
		t.Errorf("errors_total{prepare,%s} = %v, want 0", ReasonRollback, n)
	}
}

// TestCorruptRecordLogLine: the log line about a quarantined record says
// what happens to its claim (undone from its allocation), not that it is
// treated as not prepared.
func TestCorruptRecordLogLine(t *testing.T) {
	e := newEnv(t)
	if r := e.eng.Prepare(ctxFor(t), testClaim("c1", alloc{request: "r", device: "dev-0"})); r.Err != nil {
		t.Fatal(r.Err)
	}
	if err := os.WriteFile(filepath.Join(e.dir, "checkpoint", "c1.json"), []byte(`{"kind":`), 0o600); err != nil {
		t.Fatal(err)
	}
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true)))
	ctx := klog.NewContext(context.Background(), logger)
	store, err := checkpoint.Open(filepath.Join(e.dir, "checkpoint"))
	if err != nil {
		t.Fatal(err)
	}
	if err := NewTestEngine(testDriver, store, e.eng.Specs(), e.hw).Recover(ctx); err != nil {
		t.Fatal(err)
	}
	logged := logger.GetSink().(ktesting.Underlier).GetBuffer().String()
	if !strings.Contains(logged, "undone from its allocation") || strings.Contains(logged, "treated as not prepared") {
		t.Errorf("log about the corrupt record does not say the claim is undone from its allocation:\n%s", logged)
	}
}
