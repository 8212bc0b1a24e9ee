package deploy

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/drakit/drakit/examples/nvidia/deploy/ociimage"
)

// TestImageCacheAtOnce: with ImageCacheEnv set, an image is built once
// per package and reference; a second BuildImage copies the cached
// tarball (found again even when the cache's copy was changed, which
// shows it is not a new build), another reference builds anew, and
// calls at once for a new key build it once, each getting the image.
func TestImageCacheAtOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("builds images; skipped with -short")
	}
	const pkg = "github.com/drakit/drakit/examples/nvidia/nvml/cmd/nvidia-cuda-mps-control"
	cache, out := t.TempDir(), t.TempDir()
	t.Setenv(ImageCacheEnv, cache)
	var builds atomic.Int32
	build = func(ctx context.Context, pkg, ref, out string) (ociimage.Descriptor, error) {
		builds.Add(1)
		return buildImage(ctx, pkg, ref, out)
	}
	t.Cleanup(func() { build = buildImage })
	ctx := t.Context()

	first, err := BuildImage(ctx, pkg, "example.com/mps:1", filepath.Join(out, "1.tar"))
	if err != nil {
		t.Fatal(err)
	}
	cached, err := filepath.Glob(filepath.Join(cache, "*.tar"))
	if err != nil || len(cached) != 1 {
		t.Fatalf("cache holds %v (%v), want one tarball", cached, err)
	}
	marked := []byte("the cache's copy")
	if err := os.WriteFile(cached[0], marked, 0o644); err != nil {
		t.Fatal(err)
	}
	again, err := BuildImage(ctx, pkg, "example.com/mps:1", filepath.Join(out, "2.tar"))
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(out, "2.tar")); !bytes.Equal(got, marked) ||
		again.Digest != first.Digest || builds.Load() != 1 {
		t.Errorf("second build of one image: %d builds, digest %s (first %s), "+
			"from the cache: %v; want 1 build, the same digest, the cache's copy",
			builds.Load(), again.Digest, first.Digest, bytes.Equal(got, marked))
	}

	// The reference is in the tarball's index, not in the manifest.
	_, err = BuildImage(ctx, pkg, "example.com/mps:2", filepath.Join(out, "3.tar"))
	if err != nil {
		t.Fatal(err)
	}
	one, _ := os.ReadFile(filepath.Join(out, "1.tar"))
	two, _ := os.ReadFile(filepath.Join(out, "3.tar"))
	if bytes.Equal(one, two) || builds.Load() != 2 {
		t.Errorf("another reference: %d builds, same tarball %v; want 2 builds, another tarball",
			builds.Load(), bytes.Equal(one, two))
	}

	var wg sync.WaitGroup
	descs := make([]ociimage.Descriptor, 3)
	errs := make([]error, 3)
	for i := range descs {
		wg.Go(func() {
			descs[i], errs[i] = BuildImage(ctx, pkg, "example.com/mps:3",
				filepath.Join(out, "at-once-"+string(rune('a'+i))+".tar"))
		})
	}
	wg.Wait()
	for i := range descs {
		if errs[i] != nil || descs[i].Digest != descs[0].Digest {
			t.Errorf("call %d at once: %v, digest %s; want %s", i, errs[i], descs[i].Digest,
				descs[0].Digest)
		}
	}
	if builds.Load() != 3 {
		t.Errorf("three calls at once for a new image: %d builds in all, want 3 (one more)",
			builds.Load())
	}
}
