package nvml

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestFindLibrary(t *testing.T) {
	root := t.TempDir()
	if p, err := FindLibrary("/"); p != "" || err != nil {
		t.Errorf(`FindLibrary("/") = %q, %v; want the loader's search`, p, err)
	}
	if _, err := FindLibrary(root); !errors.Is(err, ErrLibraryNotFound) {
		t.Errorf("an empty driver root: %v, want ErrLibraryNotFound", err)
	}
	want := filepath.Join(root, "usr/lib64/libnvidia-ml.so.1")
	if err := os.MkdirAll(filepath.Dir(want), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(want, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if p, err := FindLibrary(root); p != want || err != nil {
		t.Errorf("FindLibrary = %q, %v; want %s", p, err, want)
	}
}
