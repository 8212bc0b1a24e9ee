package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSlicesValidate(t *testing.T) {
	dir := t.TempDir()
	good := `apiVersion: resource.k8s.io/v1
kind: ResourceSliceList
items:
- apiVersion: resource.k8s.io/v1
  kind: ResourceSlice
  metadata: {name: a}
  spec:
    driver: gpu.example.com
    nodeName: node-1
    pool: {name: node-1, generation: 1, resourceSliceCount: 1}
    devices:
    - name: gpu-0
      attributes:
        model: {string: h100}
`
	bad := strings.Replace(good, "h100", strings.Repeat("x", 65), 1)
	for _, tc := range []struct {
		name, data string
		wantErr    bool
		wantOut    string
	}{
		{"valid list", good, false, "1 slices valid"},
		{"too long string", bad, true, "spec.devices[0].attributes[model].string: Too long"},
		{"unknown field", strings.Replace(good, "nodeName", "nodeNam", 1), true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-")+".yaml")
			if err := os.WriteFile(file, []byte(tc.data), 0o644); err != nil {
				t.Fatal(err)
			}
			var out, errOut bytes.Buffer
			err := runSlices(context.Background(), []string{"validate", file}, &out, &errOut)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error %v; output:\n%s", err, tc.wantErr, out.String())
			}
			if !strings.Contains(out.String(), tc.wantOut) {
				t.Errorf("output %q does not contain %q", out.String(), tc.wantOut)
			}
		})
	}
	var out bytes.Buffer
	if err := runSlices(context.Background(), []string{"check"}, &out, &out); !errors.Is(err, errUsage) {
		t.Errorf("bad usage: err = %v, want errUsage", err)
	}
}
