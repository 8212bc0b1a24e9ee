package cdi

import (
	"context"
	"errors"
	"fmt"
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
	oci "github.com/opencontainers/runtime-spec/specs-go"
	"k8s.io/apimachinery/pkg/types"
	"tags.cncf.io/container-device-interface/pkg/parser"
)

const (
	uid1 = types.UID("0b7e5a0c-7f42-4a8e-9a51-3c2b1d0e9f11")
	uid2 = types.UID("5d1c2e3f-aaaa-4bbb-8ccc-123456789abc")
)

func newTestWriter(t *testing.T, dir, vendor, class string) *Writer {
	t.Helper()
	w, err := NewWriter(dir, vendor, class)
	if err != nil {
		t.Fatalf("NewWriter: %v", err)
	}
	return w
}

func baseOCI() *oci.Spec {
	return &oci.Spec{
		Process: &oci.Process{Env: []string{"PATH=/bin"}},
		Linux:   &oci.Linux{},
	}
}

func envOf(s *oci.Spec) []string { return s.Process.Env }

func mountsOf(s *oci.Spec) []string {
	var out []string
	for _, m := range s.Mounts {
		out = append(out, m.Source+":"+m.Destination+":"+strings.Join(m.Options, ","))
	}
	return out
}

func devicesOf(s *oci.Spec) []string {
	var out []string
	for _, d := range s.Linux.Devices {
		out = append(out, d.Path+":"+d.Type)
	}
	return out
}

// TestWriteAndInject writes the specs of two claims and injects some of
// their devices the way a container runtime does, with the real CDI
// library, then checks the container's env, mounts and device nodes.
func TestWriteAndInject(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	w := newTestWriter(t, dir, "gpu.example.com", "gpu")
	host := t.TempDir()

	ids1, err := w.Write(ctx, Claim{
		UID: uid1, Namespace: "default", Name: "claim-1",
		Common: new(Edits).Env("CLAIM", "one"),
		Devices: []Device{
			{Name: "gpu-0", Edits: new(Edits).Env("GPU", "0").
				DeviceNode(DeviceNode{Path: "/dev/gpu0", HostPath: "/dev/null"}).
				Mount(host, "/usr/lib/gpu", "ro", "bind")},
			{Name: "pool-b/gpu-1", Edits: new(Edits).Env("GPU1", "1").DeviceNode(DeviceNode{Path: "/dev/zero"})},
		},
	})
	if err != nil {
		t.Fatalf("Write claim 1: %v", err)
	}
	wantIDs := []string{
		"gpu.example.com/gpu=" + string(uid1) + "_gpu-0",
		"gpu.example.com/gpu=" + string(uid1) + "_pool-b_2fgpu-1",
	}
	if diff := cmp.Diff(wantIDs, ids1); diff != "" {
		t.Errorf("IDs (-want +got):\n%s", diff)
	}
	for _, id := range ids1 {
		if !parser.IsQualifiedName(id) {
			t.Errorf("%q is not a qualified CDI name", id)
		}
	}
	ids2, err := w.Write(ctx, Claim{UID: uid2, Devices: []Device{{Name: "gpu-0", Edits: new(Edits).Env("GPU", "other")}}})
	if err != nil {
		t.Fatalf("Write claim 2: %v", err)
	}
	if ids2[0] == ids1[0] {
		t.Errorf("two claims share the device ID %s", ids2[0])
	}

	s := baseOCI()
	if err := Inject(s, []string{dir}, ids1...); err != nil {
		t.Fatalf("Inject: %v", err)
	}
	if diff := cmp.Diff([]string{"PATH=/bin", "CLAIM=one", "GPU=0", "GPU1=1"}, envOf(s)); diff != "" {
		t.Errorf("env (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{host + ":/usr/lib/gpu:ro,bind"}, mountsOf(s)); diff != "" {
		t.Errorf("mounts (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"/dev/gpu0:c", "/dev/zero:c"}, devicesOf(s)); diff != "" {
		t.Errorf("device nodes (-want +got):\n%s", diff)
	}

	// One device of claim 1 only: the common edits come once, the other
	// device's edits not at all.
	s = baseOCI()
	if err := Inject(s, []string{dir}, ids1[1]); err != nil {
		t.Fatalf("Inject: %v", err)
	}
	if diff := cmp.Diff([]string{"PATH=/bin", "CLAIM=one", "GPU1=1"}, envOf(s)); diff != "" {
		t.Errorf("env (-want +got):\n%s", diff)
	}

	// After removal the IDs no longer resolve; the other claim still does.
	if err := w.Remove(ctx, uid1); err != nil {
		t.Fatalf("Remove: %v", err)
	}
	if err := w.Remove(ctx, uid1); err != nil {
		t.Errorf("second Remove: %v", err)
	}
	if err := Inject(baseOCI(), []string{dir}, ids1[0]); err == nil || !strings.Contains(err.Error(), ids1[0]) {
		t.Errorf("Inject of a removed device = %v, want an error naming it", err)
	}
	if err := Inject(baseOCI(), []string{dir}, ids2...); err != nil {
		t.Errorf("Inject claim 2: %v", err)
	}
}

func TestRewriteReplaces(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	w := newTestWriter(t, dir, "vendor.com", "dev")
	if _, err := w.Write(ctx, Claim{UID: uid1, Devices: []Device{{Name: "a", Edits: new(Edits).Env("V", "1")}}}); err != nil {
		t.Fatal(err)
	}
	ids, err := w.Write(ctx, Claim{UID: uid1, Devices: []Device{{Name: "a", Edits: new(Edits).Env("V", "2")}}})
	if err != nil {
		t.Fatal(err)
	}
	s := baseOCI()
	if err := Inject(s, []string{dir}, ids...); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"PATH=/bin", "V=2"}, envOf(s)); diff != "" {
		t.Errorf("env (-want +got):\n%s", diff)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("folder has %d entries, want 1 (no temporary files left)", len(entries))
	}
}

// TestNoCollisions: vendor/class pairs that the CDI naming convention
// would map to the same file, and claims whose names try to escape.
func TestNoCollisions(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	a := newTestWriter(t, dir, "a-b", "c")
	b := newTestWriter(t, dir, "a", "b-c")
	idsA, err := a.Write(ctx, Claim{UID: uid1, Namespace: "../../etc", Name: "passwd/..", Devices: []Device{{Name: "../../x", Edits: new(Edits).Env("W", "a")}}})
	if err != nil {
		t.Fatal(err)
	}
	idsB, err := b.Write(ctx, Claim{UID: uid1, Devices: []Device{{Name: "x", Edits: new(Edits).Env("W", "b")}}})
	if err != nil {
		t.Fatal(err)
	}
	pa, _ := a.SpecPath(uid1)
	pb, _ := b.SpecPath(uid1)
	if pa == pb {
		t.Fatalf("two writers share %s", pa)
	}
	for _, p := range []string{pa, pb} {
		if filepath.Dir(p) != dir {
			t.Errorf("spec %s is outside %s", p, dir)
		}
	}
	sa, sb := baseOCI(), baseOCI()
	if err := Inject(sa, []string{dir}, idsA...); err != nil {
		t.Fatal(err)
	}
	if err := Inject(sb, []string{dir}, idsB...); err != nil {
		t.Fatal(err)
	}
	if envOf(sa)[1] != "W=a" || envOf(sb)[1] != "W=b" {
		t.Errorf("env a = %v, b = %v", envOf(sa), envOf(sb))
	}
	for _, bad := range []types.UID{"../x", "a/b", "", "x_y", types.UID(strings.Repeat("a", 65)), "-a"} {
		if _, err := a.Write(ctx, Claim{UID: bad, Devices: []Device{{Name: "x"}}}); !errors.Is(err, ErrInvalidName) {
			t.Errorf("Write with UID %q = %v, want ErrInvalidName", bad, err)
		}
		if _, err := a.SpecPath(bad); !errors.Is(err, ErrInvalidName) {
			t.Errorf("SpecPath(%q) = %v, want ErrInvalidName", bad, err)
		}
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 2 {
		t.Errorf("folder has %d entries, want 2", len(entries))
	}
}

func TestGC(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	w := newTestWriter(t, dir, "gpu.example.com", "gpu")
	other := newTestWriter(t, dir, "gpu.example.com", "nic")
	uids := []types.UID{uid1, uid2, "c3"}
	for _, u := range uids {
		if _, err := w.Write(ctx, Claim{UID: u, Devices: []Device{{Name: "d"}}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := other.Write(ctx, Claim{UID: uid1, Devices: []Device{{Name: "d"}}}); err != nil {
		t.Fatal(err)
	}
	// A leftover temporary file of a crashed write, a stranger's file
	// with our name pattern but another kind, and an unrelated file.
	old := filepath.Join(dir, "."+w.prefix()+string(uid2)+".json.123"+tmpExt)
	mustWrite(t, old, "{")
	if err := os.Chtimes(old, time.Now().Add(-time.Hour), time.Now().Add(-time.Hour)); err != nil {
		t.Fatal(err)
	}
	young := "." + w.prefix() + string(uid1) + ".json.456" + tmpExt
	mustWrite(t, filepath.Join(dir, young), "{")
	mustWrite(t, filepath.Join(dir, w.prefix()+"c9.json"), `{"cdiVersion":"0.3.0","kind":"other.com/x","devices":[]}`)
	mustWrite(t, filepath.Join(dir, "vendor.json"), `{}`)

	got, err := w.Claims(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]types.UID{uid1, uid2, "c3"}, got); diff != "" {
		t.Errorf("Claims (-want +got):\n%s", diff)
	}
	orphans, err := w.Orphans(ctx, func(u types.UID) bool { return u == uid2 })
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]types.UID{uid1, "c3"}, orphans); diff != "" {
		t.Errorf("Orphans (-want +got):\n%s", diff)
	}
	removed, err := w.GC(ctx, map[types.UID]bool{uid2: true})
	if err != nil {
		t.Fatalf("GC: %v", err)
	}
	if diff := cmp.Diff([]types.UID{uid1, "c3"}, removed); diff != "" {
		t.Errorf("removed (-want +got):\n%s", diff)
	}
	var names []string
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		names = append(names, e.Name())
	}
	want := []string{
		young,
		w.prefix() + "c9.json",
		w.prefix() + string(uid2) + ".json",
		other.prefix() + string(uid1) + ".json",
		"vendor.json",
	}
	slices.Sort(want)
	if diff := cmp.Diff(want, names); diff != "" {
		t.Errorf("files after GC (-want +got):\n%s", diff)
	}
}

func mustWrite(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestSpecErrorsNameFields(t *testing.T) {
	w := newTestWriter(t, "/tmp/cdi-never-written", "v.com", "c")
	_, _, err := w.Spec(Claim{
		UID:    uid1,
		Common: new(Edits).Env("", "x"),
		Devices: []Device{
			{Name: "a", Edits: new(Edits).Mount("relative", "/x").DeviceNode(DeviceNode{Path: "dev/x", Permissions: "rwx"})},
			{Name: "a"},
			{Name: "", Edits: nil},
			{Name: "b", Edits: new(Edits).Hook("preStart", "/bin/hook")},
			{Name: "c", Edits: new(Edits).Env("X", "a\x7fb").Mount("/a", "/b\x00")},
		},
	})
	if err == nil {
		t.Fatal("Spec accepted bad edits")
	}
	for _, want := range []string{
		"common.env[0]", "devices[0].edits.mounts[0].hostPath", "devices[0].edits.deviceNodes[0].path",
		"devices[0].edits.deviceNodes[0].permissions", "devices[1].name \"a\": duplicate of devices[0]",
		"devices[2].name", "devices[3].edits.hooks[0].hookName",
		"devices[4].edits.env[0]", "devices[4].edits.mounts[0].containerPath",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not name %s:\n%v", want, err)
		}
	}
}

func TestNewWriterErrors(t *testing.T) {
	for _, tc := range []struct{ dir, vendor, class string }{
		{"relative", "v.com", "c"},
		{"/x", "", "c"},
		{"/x", "1v", "c"},
		{"/x", "v.com", "c/d"},
		{"/x", "v.com", "c-"},
		{"/x", "v+w", "c"},
	} {
		if _, err := NewWriter(tc.dir, tc.vendor, tc.class); err == nil {
			t.Errorf("NewWriter(%q, %q, %q) succeeded", tc.dir, tc.vendor, tc.class)
		}
	}
	if _, err := NewWriter("/x", "v.com", "c", WithFileMode(0o4755)); err == nil {
		t.Error("WithFileMode accepted setuid bit")
	}
}

func TestEncodeName(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"gpu-0", "gpu-0"},
		{"pool/gpu", "pool_2fgpu"},
		{"a_b", "a_5fb"},
		{"-x-", "_2dx_2d"},
		{"../..", "_2e._2f._2e"},
		{"0000:3b:00.0", "0000:3b:00.0"},
	} {
		got := EncodeName(tc.in)
		if got != tc.want {
			t.Errorf("EncodeName(%q) = %q, want %q", tc.in, got, tc.want)
		}
		back, err := DecodeName(got)
		if err != nil || back != tc.in {
			t.Errorf("DecodeName(%q) = %q, %v; want %q", got, back, err, tc.in)
		}
	}
	for _, bad := range []string{"_", "_2", "_zz", "_41", "a_2F"} {
		if _, err := DecodeName(bad); err == nil {
			t.Errorf("DecodeName(%q) succeeded", bad)
		}
	}
}

// TestConcurrentClaims writes, injects and removes many claims at once
// while GC runs with all of them live: GC must remove nothing that is
// live, and every claim's devices resolve to its own edits.
func TestConcurrentClaims(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	w := newTestWriter(t, dir, "gpu.example.com", "gpu")
	const n = 16
	live := make(map[types.UID]bool)
	for i := 0; i < n; i++ {
		live[types.UID(fmt.Sprintf("claim-%02d", i))] = true
	}
	var wg sync.WaitGroup
	errs := make(chan error, 2*n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			uid := types.UID(fmt.Sprintf("claim-%02d", i))
			ids, err := w.Write(ctx, Claim{UID: uid, Devices: []Device{{Name: "d", Edits: new(Edits).Env("CLAIM", string(uid))}}})
			if err != nil {
				errs <- err
				return
			}
			s := baseOCI()
			if err := Inject(s, []string{dir}, ids...); err != nil {
				errs <- err
				return
			}
			if got := envOf(s)[1]; got != "CLAIM="+string(uid) {
				errs <- fmt.Errorf("claim %s got env %s", uid, got)
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for j := 0; j < 5; j++ {
			if removed, err := w.GC(ctx, live); err != nil || len(removed) > 0 {
				errs <- fmt.Errorf("GC removed %v, err %v", removed, err)
			}
		}
	}()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	got, err := w.Claims(ctx)
	if err != nil || len(got) != n {
		t.Errorf("Claims = %d, %v; want %d", len(got), err, n)
	}
}

// TestDeviceWithoutEdits: the CDI library rejects a device without
// edits, so Write gives it a marker and the claim still injects.
func TestDeviceWithoutEdits(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	w := newTestWriter(t, dir, "net.example.com", "nic")
	ids, err := w.Write(ctx, Claim{UID: uid1, Common: new(Edits).Env("NET", "1"), Devices: []Device{{Name: "eth1"}, {Name: "eth2", Edits: new(Edits)}}})
	if err != nil {
		t.Fatal(err)
	}
	s := baseOCI()
	if err := Inject(s, []string{dir}, ids...); err != nil {
		t.Fatalf("Inject: %v", err)
	}
	if diff := cmp.Diff([]string{"PATH=/bin", "NET=1", EmptyDeviceEnv + "=eth2"}, envOf(s)); diff != "" {
		t.Errorf("env (-want +got):\n%s", diff)
	}
}

// TestRemoveOnReadOnlyFolder: removing a spec that does not exist
// succeeds whatever the folder's state (on a read-only file system unlink
// reports EROFS before it looks the name up); removing one that exists
// reports the real error.
func TestRemoveOnReadOnlyFolder(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("needs to mount a tmpfs (root with CAP_SYS_ADMIN): %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", dir).Run() })
	w := newTestWriter(t, dir, "gpu.example.com", "gpu")
	if _, err := w.Write(ctx, Claim{UID: uid1, Devices: []Device{{Name: "d"}}}); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-o", "remount,ro", dir).CombinedOutput(); err != nil {
		t.Fatalf("remount ro: %v: %s", err, out)
	}
	if err := w.Remove(ctx, uid2); err != nil {
		t.Errorf("Remove of a spec that does not exist on a read-only folder: %v", err)
	}
	if err := w.Remove(ctx, uid1); !errors.Is(err, syscall.EROFS) {
		t.Errorf("Remove of an existing spec on a read-only folder = %v, want EROFS", err)
	}
	if _, err := w.GC(ctx, nil); !errors.Is(err, syscall.EROFS) {
		t.Errorf("GC of an orphan on a read-only folder = %v, want EROFS", err)
	}
}

// TestRemoveStaleTemp: only this writer's temporary files older than a
// minute go.
func TestRemoveStaleTemp(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	w := newTestWriter(t, dir, "gpu.example.com", "gpu")
	other := newTestWriter(t, dir, "gpu.example.com", "nic")
	old := func(name string) string {
		p := filepath.Join(dir, name)
		mustWrite(t, p, "{")
		if err := os.Chtimes(p, time.Now().Add(-2*time.Minute), time.Now().Add(-2*time.Minute)); err != nil {
			t.Fatal(err)
		}
		return name
	}
	old("." + w.prefix() + string(uid1) + ".json.1" + tmpExt)
	keepOther := old("." + other.prefix() + string(uid1) + ".json.1" + tmpExt)
	young := "." + w.prefix() + string(uid2) + ".json.2" + tmpExt
	mustWrite(t, filepath.Join(dir, young), "{")
	if err := w.RemoveStaleTemp(ctx); err != nil {
		t.Fatal(err)
	}
	var names []string
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		names = append(names, e.Name())
	}
	want := []string{keepOther, young}
	slices.Sort(want)
	if diff := cmp.Diff(want, names); diff != "" {
		t.Errorf("files left (-want +got):\n%s", diff)
	}
}

func TestParseKind(t *testing.T) {
	for kind, want := range map[string]string{
		"acme.example.com/fpga": "",
		"acme.example.com":      "must be <vendor>/<class>",
		"/fpga":                 "vendor: must not be empty",
		"acme.example.com/-x":   `class "-x": must start with a letter`,
	} {
		vendor, class, err := ParseKind(kind)
		switch {
		case want == "" && (err != nil || vendor+"/"+class != kind):
			t.Errorf("ParseKind(%q) = %q, %q, %v", kind, vendor, class, err)
		case want != "" && (!errors.Is(err, ErrInvalidName) || !strings.Contains(err.Error(), want)):
			t.Errorf("ParseKind(%q) error = %v, want %q wrapping ErrInvalidName", kind, err, want)
		}
	}
}
