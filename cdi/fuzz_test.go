package cdi

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/types"
	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"
	"tags.cncf.io/container-device-interface/pkg/parser"
)

// FuzzEncodeName: the encoding is reversible, and behind a claim UID it
// always gives a valid CDI device name.
func FuzzEncodeName(f *testing.F) {
	for _, s := range []string{"gpu-0", "pool/gpu", "_", "-", ".", ":x:", "../..", "é", "\x00", "a_5fb"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		enc := EncodeName(s)
		back, err := DecodeName(enc)
		if err != nil || back != s {
			t.Fatalf("DecodeName(EncodeName(%q)) = %q, %v", s, back, err)
		}
		if s == "" {
			return
		}
		if err := parser.ValidateDeviceName(string(uid1) + "_" + enc); err != nil {
			t.Fatalf("device name for %q: %v", s, err)
		}
	})
}

// FuzzSpec builds claims from arbitrary UIDs, device names and edits.
// Either Spec reports an error, or the spec is valid for the CDI library,
// its file stays inside the folder, and every ID is a qualified name the
// spec defines.
func FuzzSpec(f *testing.F) {
	f.Add("0b7e5a0c-7f42-4a8e-9a51-3c2b1d0e9f11", "gpu-0", "pool/gpu-1", "KEY", "value", "/dev/null", "/host/lib", "/lib", "/bin/hook")
	f.Add("../x", "", "a", "", "", "dev", "", "", "")
	f.Add("a", "a", "a", "K=V", "x\x00", "/dev/x", "/", "/", "relative")
	f.Fuzz(func(t *testing.T, uid, dev1, dev2, envKey, envValue, node, mountHost, mountCtr, hook string) {
		dir := "/var/run/cdi"
		w, err := NewWriter(dir, "gpu.example.com", "gpu")
		if err != nil {
			t.Fatal(err)
		}
		second := new(Edits).Hook(CreateContainer, hook, "hook")
		if hook == "" {
			second = nil // a device without edits
		}
		claim := Claim{
			UID:    types.UID(uid),
			Common: new(Edits).Env(envKey, envValue),
			Devices: []Device{
				{Name: dev1, Edits: new(Edits).DeviceNode(DeviceNode{Path: node, Type: "c", Major: 1, Minor: 3}).Mount(mountHost, mountCtr)},
				{Name: dev2, Edits: second},
			},
		}
		spec, ids, err := w.Spec(claim)
		if p, perr := w.SpecPath(types.UID(uid)); perr == nil && filepath.Dir(p) != dir {
			t.Fatalf("spec path %q escapes %s", p, dir)
		}
		if err != nil {
			return
		}
		// Write it for real and read it back with the CDI library, which
		// validates the whole spec as a runtime does.
		tw, err := NewWriter(t.TempDir(), "gpu.example.com", "gpu", WithoutFsync())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(context.Background(), claim); err != nil {
			t.Fatalf("Spec accepted the claim but Write failed: %v", err)
		}
		p, _ := tw.SpecPath(claim.UID)
		read, err := cdiapi.ReadSpec(p, 0)
		if err != nil {
			data, _ := json.Marshal(spec)
			t.Fatalf("CDI library rejects our spec: %v\n%s", err, data)
		}
		for _, id := range ids {
			_, _, name, _ := parser.ParseQualifiedName(id)
			if read.GetDevice(name) == nil {
				t.Fatalf("spec does not define %s", id)
			}
		}
		if len(ids) != 2 || ids[0] == ids[1] {
			t.Fatalf("ids = %v", ids)
		}
		for _, id := range ids {
			vendor, class, name, err := parser.ParseQualifiedName(id)
			if err != nil || vendor+"/"+class != w.Kind() || !strings.HasPrefix(name, uid+"_") {
				t.Fatalf("id %q: %v", id, err)
			}
		}
		_ = context.Background()
	})
}
