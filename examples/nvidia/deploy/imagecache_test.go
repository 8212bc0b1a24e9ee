package deploy

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/drakit/drakit/examples/nvidia/deploy/ociimage"
)

// TestImageCache: with ImageCacheEnv set, an image is built once per
// package and reference; a second BuildImage copies the cached tarball
// (found again even when the cache's copy was changed, which shows it is
// not a new build), and another reference builds anew.
func TestImageCache(t *testing.T) {
	if testing.Short() {
		t.Skip("builds images; skipped with -short")
	}
	const pkg = "github.com/drakit/drakit/examples/nvidia/nvml/cmd/nvidia-cuda-mps-control"
	cache, out := t.TempDir(), t.TempDir()
	t.Setenv(ImageCacheEnv, cache)
	builds := countBuilds(t, buildImage)
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
}

// TestImageCacheAtOnce: calls at once for an image not yet in the cache
// build it once (the others wait on the key's file lock, which works per
// open file, as between processes), and each gets the image; the build
// step is a stand-in that writes a small tarball (run with -race).
func TestImageCacheAtOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("asks the go command for the packages' archives; skipped with -short")
	}
	const pkg = "github.com/drakit/drakit/examples/nvidia/nvml/cmd/nvidia-cuda-mps-control"
	cache, out := t.TempDir(), t.TempDir()
	t.Setenv(ImageCacheEnv, cache)
	builds := countBuilds(t, func(_ context.Context, _, ref, out string) (
		ociimage.Descriptor, error,
	) {
		time.Sleep(100 * time.Millisecond) // the others arrive while it builds
		if err := os.WriteFile(out, []byte("an image of "+ref), 0o644); err != nil {
			return ociimage.Descriptor{}, err
		}
		return ociimage.Descriptor{Digest: "sha256:" + ref}, nil
	})
	ctx := t.Context()
	var wg sync.WaitGroup
	descs := make([]ociimage.Descriptor, 4)
	errs := make([]error, len(descs))
	for i := range descs {
		wg.Go(func() {
			descs[i], errs[i] = BuildImage(ctx, pkg, "example.com/mps:1",
				filepath.Join(out, fmt.Sprintf("%d.tar", i)))
		})
	}
	wg.Wait()
	for i := range descs {
		got, _ := os.ReadFile(filepath.Join(out, fmt.Sprintf("%d.tar", i)))
		if errs[i] != nil || descs[i].Digest != "sha256:example.com/mps:1" ||
			string(got) != "an image of example.com/mps:1" {
			t.Errorf("call %d at once: %v, digest %s, tarball %q", i, errs[i], descs[i].Digest, got)
		}
	}
	if n := builds.Load(); n != 1 {
		t.Errorf("%d calls at once for a new image: %d builds, want 1", len(descs), n)
	}
}

// countBuilds makes f the cache's build step until t ends and returns
// the number of its calls.
func countBuilds(
	t *testing.T,
	f func(ctx context.Context, pkg, ref, out string) (ociimage.Descriptor, error),
) *atomic.Int32 {
	var n atomic.Int32
	build = func(ctx context.Context, pkg, ref, out string) (ociimage.Descriptor, error) {
		n.Add(1)
		return f(ctx, pkg, ref, out)
	}
	t.Cleanup(func() { build = buildImage })
	return &n
}
