package cdi

import (
	"context"
	"os"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/types"
)

// A spec that WriteRecorded returned is written again by Restore, byte
// for byte, after the file (or the whole folder) was deleted; data of
// another claim, another kind or that the CDI library cannot read is
// refused and writes nothing.
func TestRestoreWritesARecordedSpec(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir() + "/cdi"
	w := newTestWriter(t, dir, "gpu.example.com", "claim")
	claim := Claim{UID: uid1, Namespace: "ns", Name: "c", Devices: []Device{{Name: "gpu-0", Edits: (&Edits{}).Env("A", "1")}}}
	ids, data, err := w.WriteRecorded(ctx, claim)
	if err != nil {
		t.Fatal(err)
	}
	path, _ := w.SpecPath(uid1)
	written, _ := os.ReadFile(path)
	if string(written) != string(data) {
		t.Fatalf("WriteRecorded returned %s, wrote %s", data, written)
	}
	other := newTestWriter(t, t.TempDir(), "other.example.com", "claim")
	_, otherData, err := other.WriteRecorded(ctx, claim)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		uid  string
		data []byte
		want string
	}{
		"another claim": {string(uid2), data, "not the claim's"},
		"another kind":  {string(uid1), otherData, "kind"},
		"torn":          {string(uid1), data[:len(data)/2], "restore CDI spec"},
	} {
		if err := w.Restore(ctx, types.UID(tc.uid), tc.data); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error saying %q", name, err, tc.want)
		}
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("a refused restore wrote: %v", err)
	}
	if err := w.Restore(ctx, uid1, data); err != nil {
		t.Fatal(err)
	}
	if restored, _ := os.ReadFile(path); string(restored) != string(data) {
		t.Errorf("restored %s, want %s", restored, data)
	}
	spec := baseOCI()
	if err := Inject(spec, []string{dir}, ids...); err != nil {
		t.Fatalf("inject the restored spec's IDs: %v", err)
	}
}
