package deploy_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/drakit/drakit/examples/nvidia/deploy"
	"github.com/drakit/drakit/examples/nvidia/deploy/ociimage"
)

// unpackImage writes the files of the (one-layer) image in the OCI
// tarball into dir, as a runtime would lay out its root.
func unpackImage(t *testing.T, tarball, dir string) {
	t.Helper()
	f, err := os.Open(tarball)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	blobs := map[string][]byte{}
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		blobs[h.Name] = b
	}
	blob := func(d ociimage.Descriptor) []byte {
		return blobs["blobs/sha256/"+strings.TrimPrefix(d.Digest, "sha256:")]
	}
	var idx ociimage.Index
	var man ociimage.Manifest
	if err := json.Unmarshal(blobs["index.json"], &idx); err != nil || len(idx.Manifests) != 1 {
		t.Fatalf("index.json: %v (%d manifests)", err, len(idx.Manifests))
	}
	if err := json.Unmarshal(blob(idx.Manifests[0]), &man); err != nil || len(man.Layers) != 1 {
		t.Fatalf("manifest: %v", err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(blob(man.Layers[0])))
	if err != nil {
		t.Fatal(err)
	}
	lr := tar.NewReader(zr)
	for {
		h, err := lr.Next()
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, filepath.Clean("/"+h.Name))
		switch h.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(p, 0o755)
		case tar.TypeReg:
			var b []byte
			if b, err = io.ReadAll(lr); err == nil {
				if err = os.MkdirAll(filepath.Dir(p), 0o755); err == nil {
					err = os.WriteFile(p, b, os.FileMode(h.Mode)&0o777)
				}
			}
		default:
			t.Fatalf("layer entry %s of type %c", h.Name, h.Typeflag)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// TestImageLoadsNVML builds the driver's image as the demo and TestE2E do
// and runs its entrypoint in the image's root alone (chroot): the C
// runtime it needs is in the image, the simulator runs, and the real
// backend gets as far as the dynamic loader, which finds no
// libnvidia-ml on a machine without a GPU driver: "library not found",
// not "built without cgo". It needs root (chroot).
func TestImageLoadsNVML(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the driver's image")
	}
	if os.Geteuid() != 0 {
		t.Skip("chroot needs root")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	tarball := filepath.Join(t.TempDir(), "image.tar")
	if _, err := deploy.BuildImage(ctx, deploy.DriverPackage, deploy.Image, tarball); err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	unpackImage(t, tarball, root)
	kubeconfig := "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: \"https://127.0.0.1:1\"}}]\n" +
		"contexts: [{name: c, context: {cluster: c, user: u}}]\ncurrent-context: c\nusers: [{name: u, user: {}}]\n"
	if err := os.WriteFile(filepath.Join(root, "tmp/kubeconfig"), []byte(kubeconfig), 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) string {
		out, _ := exec.CommandContext(ctx, "chroot", append([]string{root, "/nvidia-dra-driver"}, args...)...).CombinedOutput()
		return string(out)
	}
	if out := run("-print-device-classes", "-nvml-sim=dgx-h200"); !strings.Contains(out, "kind: DeviceClass") {
		t.Errorf("the image's driver does not run on the simulator:\n%s", out)
	}
	out := run("-node-name=node-1", "-kubeconfig=/tmp/kubeconfig", "-state-dir=/tmp/state")
	if !strings.Contains(out, "cannot load libnvidia-ml.so.1") || !strings.Contains(out, "library not found") || strings.Contains(out, "without cgo") {
		t.Errorf("the image's real backend, without a GPU driver:\n%s\nwant the loader's \"library not found\" for libnvidia-ml.so.1", out)
	}
	t.Logf("the image's real backend without a GPU driver: %s", strings.TrimSpace(out))
}
