//go:build cgo

package nvml

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestLoadErrorNamesMissingDependency: a stand-in libnvidia-ml.so.1 that
// needs a library the loader cannot find fails to load with an error that
// names both (not "no NVIDIA driver on this machine?", although the
// library is there), and still wraps ErrLibraryNotFound.
func TestLoadErrorNamesMissingDependency(t *testing.T) {
	dir := t.TempDir()
	cc := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("cc", args...).CombinedOutput(); err != nil {
			t.Skipf("no C compiler for the stand-in library: %v: %s", err, out)
		}
	}
	src := filepath.Join(dir, "dep.c")
	if err := os.WriteFile(
		src,
		[]byte("int drakit_dep(void) { return 1; }\nint nvmlInit_v2(void) { return 9; }\n"),
		0o644,
	); err != nil {
		t.Fatal(err)
	}
	dep := filepath.Join(dir, "libdrakit-dep.so.1")
	cc("-shared", "-fPIC", "-Wl,-soname,libdrakit-dep.so.1", "-o", dep, src)
	lib := filepath.Join(dir, "libnvidia-ml.so.1")
	cc(
		"-shared",
		"-fPIC",
		"-Wl,-soname,libnvidia-ml.so.1",
		"-Wl,--no-as-needed",
		"-o",
		lib,
		src,
		dep,
	)
	if err := os.Remove(dep); err != nil {
		t.Fatal(err)
	}
	r, err := OpenReal(WithLibraryPath(lib))
	if err == nil {
		r.Close()
		t.Fatal("OpenReal loaded a library whose dependency is missing")
	}
	if !errors.Is(err, ErrLibraryNotFound) {
		t.Errorf("error %q does not wrap ErrLibraryNotFound", err)
	}
	for _, want := range []string{lib, "libdrakit-dep.so.1", "a library it needs"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "no NVIDIA driver on this machine") {
		t.Errorf("error %q says there is no driver, although the library is there", err)
	}

	// A library that is not there at all: the loader's words and the
	// simulator's hint.
	_, err = OpenReal(WithLibraryPath(filepath.Join(dir, "none/libnvidia-ml.so.1")))
	if err == nil || !strings.Contains(err.Error(), "cannot open shared object file") ||
		!strings.Contains(err.Error(), "-nvml-sim") {
		t.Errorf("a missing library: %v, want the loader's message and the simulator's hint", err)
	}
}
