package deploy

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
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

// TestImageCacheAtOnce: calls at once for an image not yet in the cache,
// three in this process and one in a second process, build it once (the
// others wait on the key's file lock) and each gets the image. A build
// whose descriptor was never written (a crash between the tarball and the
// descriptor) is built again. The build step is a stand-in that writes a
// small tarball and logs each build to a file both processes append to
// (run with -race).
func TestImageCacheAtOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("asks the go command for the packages' archives; skipped with -short")
	}
	const pkg = "github.com/drakit/drakit/examples/nvidia/nvml/cmd/nvidia-cuda-mps-control"
	const ref = "example.com/mps:1"
	if out := os.Getenv(cacheChildEnv); out != "" {
		// The second process: one call, its build logged to the same file.
		standInBuild(t, os.Getenv(cacheLogEnv))
		if _, err := BuildImage(t.Context(), pkg, ref, out); err != nil {
			t.Fatal(err)
		}
		return
	}
	cache, out := t.TempDir(), t.TempDir()
	log := filepath.Join(out, "builds.log")
	t.Setenv(ImageCacheEnv, cache)
	standInBuild(t, log)
	builds := func() int {
		b, _ := os.ReadFile(log)
		return strings.Count(string(b), "\n")
	}
	ctx := t.Context()

	child := exec.CommandContext(ctx, os.Args[0], "-test.run", "^TestImageCacheAtOnce$")
	child.Env = append(os.Environ(), cacheChildEnv+"="+filepath.Join(out, "child.tar"),
		cacheLogEnv+"="+log)
	var childOut strings.Builder
	child.Stdout, child.Stderr = &childOut, &childOut
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	descs := make([]ociimage.Descriptor, 3)
	errs := make([]error, len(descs))
	for i := range descs {
		wg.Go(func() {
			descs[i], errs[i] = BuildImage(ctx, pkg, ref,
				filepath.Join(out, fmt.Sprintf("%d.tar", i)))
		})
	}
	wg.Wait()
	if err := child.Wait(); err != nil {
		t.Fatalf("second process: %v\n%s", err, childOut.String())
	}
	for i, name := range []string{"0.tar", "1.tar", "2.tar", "child.tar"} {
		got, _ := os.ReadFile(filepath.Join(out, name))
		if string(got) != "an image of "+ref || i < len(descs) &&
			(errs[i] != nil || descs[i].Digest != "sha256:"+ref) {
			t.Errorf("%s: tarball %q (call: %v)", name, got, errs[min(i, len(errs)-1)])
		}
	}
	if n := builds(); n != 1 {
		t.Errorf("four calls at once, one in a second process: %d builds, want 1", n)
	}

	// A crash after the tarball and before the descriptor: built again.
	descriptors, _ := filepath.Glob(filepath.Join(cache, "*.json"))
	if len(descriptors) != 1 {
		t.Fatalf("cache descriptors %v, want one", descriptors)
	}
	if err := os.Remove(descriptors[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := BuildImage(ctx, pkg, ref, filepath.Join(out, "again.tar")); err != nil {
		t.Fatal(err)
	}
	if n := builds(); n != 2 {
		t.Errorf("a cached tarball without its descriptor: %d builds in all, want 2", n)
	}
}

// The second process of TestImageCacheAtOnce: its tarball's path, and
// the file builds are logged to.
const (
	cacheChildEnv = "DRAKIT_TEST_IMAGE_CACHE_CHILD"
	cacheLogEnv   = "DRAKIT_TEST_IMAGE_CACHE_LOG"
)

// standInBuild makes the cache's build step, until t ends, one that takes
// a moment (others arrive while it builds), writes "an image of <ref>",
// and appends a line to log.
func standInBuild(t *testing.T, log string) {
	build = func(_ context.Context, _, ref, out string) (ociimage.Descriptor, error) {
		time.Sleep(200 * time.Millisecond)
		f, err := os.OpenFile(log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			return ociimage.Descriptor{}, err
		}
		_, err = f.WriteString(ref + "\n")
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			err = os.WriteFile(out, []byte("an image of "+ref), 0o644)
		}
		return ociimage.Descriptor{Digest: "sha256:" + ref}, err
	}
	t.Cleanup(func() { build = buildImage })
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
