package ociimage

import (
	"os"
	"path/filepath"
	"testing"
)

// TestUnpack lays out what WriteFile wrote: the files with their content
// and modes, the sticky /tmp; a file that is not an image is an error
// naming it.
func TestUnpack(t *testing.T) {
	dir := t.TempDir()
	tarball := filepath.Join(dir, "image.tar")
	img := Image{Ref: "drakit.dev/x:dev", Dirs: []string{"/tmp"}, Files: []File{
		{Path: "/bin/x", Mode: 0o755, Content: []byte("binary")},
		{Path: "/etc/x.conf", Mode: 0o644, Content: []byte("conf")},
	}}
	if _, err := WriteFile(tarball, img); err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(dir, "root")
	if err := Unpack(tarball, root); err != nil {
		t.Fatal(err)
	}
	for _, f := range img.Files {
		b, err := os.ReadFile(filepath.Join(root, f.Path))
		fi, serr := os.Stat(filepath.Join(root, f.Path))
		if err != nil || serr != nil || string(b) != string(f.Content) ||
			fi.Mode().Perm() != f.Mode {
			t.Errorf(
				"%s: %q (%v, %v), mode %v; want %q, %v",
				f.Path,
				b,
				err,
				serr,
				fi.Mode(),
				f.Content,
				f.Mode,
			)
		}
	}
	if fi, err := os.Stat(filepath.Join(root, "tmp")); err != nil || fi.Mode()&os.ModeSticky == 0 {
		t.Errorf("/tmp: %v (%v), want a sticky folder", fi.Mode(), err)
	}
	if err := Unpack(filepath.Join(dir, "root/etc/x.conf"), t.TempDir()); err == nil {
		t.Error("a file that is no image tarball was unpacked")
	}
}
