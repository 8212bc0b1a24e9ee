package checkpoint

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/types"
)

// TestReadsPreviousFormat reads records written by earlier code, kept
// byte for byte in testdata: a record written by any drakit release must
// load. Each file must decode to the same claim state.
func TestReadsPreviousFormat(t *testing.T) {
	share := types.UID("3f9c1a52-share")
	uid := types.UID("8a1d4a52-5c7e-4b0e-9d36-1c2f0a9e7b21")
	want := &Record{ClaimUID: uid, Namespace: "team-a", Name: "train-gpu", State: StatePrepared,
		Updated: time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC),
		Devices: []Device{
			{Request: "gpu/large", Pool: "node-a", Device: "gpu-0", ShareID: &share,
				CDIDeviceIDs: []string{"gpu.example.com/claim=8a1d4a52-5c7e-4b0e-9d36-1c2f0a9e7b21_0-gpu-0", "vendor.com/extra=x"}, CDIName: "0-gpu-0",
				Data: json.RawMessage(`{"mig":"1g.10gb"}`), Metadata: json.RawMessage(`{"attributes":{"uuid":{"string":"GPU-1"}}}`)},
			{Request: "nic", Pool: "node-a", Device: "nic-1", AdminAccess: true, CDIName: "1-nic-1",
				CDIDeviceIDs: []string{"gpu.example.com/claim=8a1d4a52-5c7e-4b0e-9d36-1c2f0a9e7b21_1-nic-1"}},
		}}
	for _, file := range []string{
		// Version 1 before issue 18: devices also carried "shared" and
		// "prepared", which nothing read.
		"v1-shared-prepared.json",
		// Version 1 of issue 18: one envelope, written by Store.Write.
		"v1-one-envelope.json",
		// Version 1 of issue 16: Store.Begin's intent, then the
		// completed record Pending.Commit appended.
		"v1-intent-then-prepared.json",
	} {
		t.Run(file, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join("testdata", file))
			if err != nil {
				t.Fatal(err)
			}
			got, err := Decode(data)
			if err != nil {
				t.Fatalf("decode: %v", err)
			}
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("record (-want +got):\n%s", d)
			}
			// And through a store, as a restarted driver reads it.
			s, err := Open(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(s.path(uid), data, 0o600); err != nil {
				t.Fatal(err)
			}
			recs, corrupt, err := s.Load()
			if err != nil || len(corrupt) > 0 || len(recs) != 1 {
				t.Fatalf("Load = %d records, corrupt %v, %v; want the one record", len(recs), corrupt, err)
			}
			if d := cmp.Diff(want, recs[0]); d != "" {
				t.Errorf("loaded record (-want +got):\n%s", d)
			}
		})
	}
}
