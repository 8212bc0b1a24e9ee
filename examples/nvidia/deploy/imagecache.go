package deploy

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"

	"github.com/drakit/drakit/examples/nvidia/deploy/ociimage"
)

// ImageCacheEnv names the environment variable that gives BuildImage a
// folder to keep the images it builds in. An image is found again there
// when it was built from the same package, reference and compiled code:
// the key is every package the binaries link (go list -deps -export,
// each compiled archive named by its content), so a change to any of
// them builds anew. Builds of one key in several processes at once wait
// for the first (a file lock). The C libraries copied from the host are
// not in the key: a folder serves one machine. hack/test.sh gives each
// run a fresh folder, so that the tests build each image once per run.
const ImageCacheEnv = "DRAKIT_IMAGE_CACHE"

// build builds an image for the cache (buildImage; tests count calls).
var build = buildImage

// cachedImage is BuildImage with the cache in dir.
func cachedImage(ctx context.Context, dir, pkg, ref, out string) (ociimage.Descriptor, error) {
	var none ociimage.Descriptor
	key, err := imageKey(ctx, pkg, ref)
	if err != nil {
		return none, fmt.Errorf("build image: cache key: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return none, fmt.Errorf("build image: cache: %w", err)
	}
	base := filepath.Join(dir, key)
	lock, err := os.OpenFile(base+".lock", os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return none, fmt.Errorf("build image: cache: %w", err)
	}
	defer lock.Close() // unlocks
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return none, fmt.Errorf("build image: cache: lock %s: %w", lock.Name(), err)
	}
	if b, err := os.ReadFile(base + ".json"); err == nil {
		var desc ociimage.Descriptor
		if err := json.Unmarshal(b, &desc); err != nil {
			return none, fmt.Errorf("build image: cache: %s: %w", base+".json", err)
		}
		if err := copyFile(base+".tar", out); err != nil {
			return none, fmt.Errorf("build image: cache: %w", err)
		}
		return desc, nil
	}
	desc, err := build(ctx, pkg, ref, out)
	if err != nil {
		return none, err
	}
	// The tarball first, then the descriptor that says it is whole.
	b, err := json.Marshal(desc)
	if err == nil {
		err = copyFile(out, base+".tar")
	}
	if err == nil {
		err = writeFileAtomic(base+".json", b)
	}
	if err != nil {
		return none, fmt.Errorf("build image: cache: %w", err)
	}
	return desc, nil
}

// imageKey names the image of pkg at ref by the compiled archives of every
// package its binaries link, as the go command would build them now.
func imageKey(ctx context.Context, pkg, ref string) (string, error) {
	dir, env, err := buildPlace(ctx, pkg)
	if err != nil {
		return "", err
	}
	args := []string{"list", "-deps", "-export", "-f", "{{.ImportPath}} {{.Export}}", pkg}
	if isCUDA(pkg) {
		args = append(args, HookPackage)
	}
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir, cmd.Env = dir, env
	list, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go list -export %s: %w", pkg, err)
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s\n%s\n", pkg, ref)
	h.Write(list)
	return hex.EncodeToString(h.Sum(nil))[:32], nil
}

// copyFile copies from to a new file to, written whole or not at all.
func copyFile(from, to string) error {
	src, err := os.Open(from)
	if err != nil {
		return err
	}
	defer src.Close()
	tmp := to + ".tmp"
	dst, err := os.Create(tmp)
	if err != nil {
		return err
	}
	_, err = io.Copy(dst, src)
	if cerr := dst.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, to)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("copy %s to %s: %w", from, to, err)
	}
	return nil
}

// writeFileAtomic writes b to path through a renamed temporary file.
func writeFileAtomic(path string, b []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = os.Remove(tmp)
		return err
	}
	return nil
}
