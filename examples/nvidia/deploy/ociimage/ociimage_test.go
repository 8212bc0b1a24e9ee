package ociimage_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/drakit/drakit/examples/nvidia/deploy/ociimage"
)

// readTar returns the regular files and folders of a tar archive.
func readTar(t *testing.T, r io.Reader) (map[string][]byte, map[string]*tar.Header) {
	t.Helper()
	files, hdrs := map[string][]byte{}, map[string]*tar.Header{}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files, hdrs
		}
		if err != nil {
			t.Fatalf("read tar: %v", err)
		}
		hdrs[h.Name] = h
		if h.Typeflag == tar.TypeReg {
			data, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			files[h.Name] = data
		}
	}
}

func sha(data []byte) string {
	s := sha256.Sum256(data)
	return "sha256:" + hex.EncodeToString(s[:])
}

// blob returns a blob of the layout and checks it against its descriptor.
func blob(t *testing.T, files map[string][]byte, d ociimage.Descriptor) []byte {
	t.Helper()
	data, ok := files["blobs/sha256/"+d.Digest[len("sha256:"):]]
	if !ok {
		t.Fatalf("blob %s (%s) missing from the layout", d.Digest, d.MediaType)
	}
	if sha(data) != d.Digest || int64(len(data)) != d.Size {
		t.Fatalf(
			"blob %s: content has digest %s and size %d, descriptor says %s and %d",
			d.MediaType,
			sha(data),
			len(data),
			d.Digest,
			d.Size,
		)
	}
	return data
}

// TestWriteLayout reads an image back the way a runtime does (index ->
// manifest -> config and layer, every digest and size checked) and finds
// the files, their modes and parent folders, and the config.
func TestWriteLayout(t *testing.T) {
	img := ociimage.Image{
		Ref: "drakit.dev/nvidia-dra-driver:dev",
		Files: []ociimage.File{
			{Path: "/usr/bin/driver", Mode: 0o755, Content: []byte("#!binary")},
			{Path: "/etc/x.conf", Mode: 0o644, Content: []byte("x=1")},
		},
		Dirs:       []string{"/tmp"},
		Entrypoint: []string{"/usr/bin/driver"},
		Env:        []string{"PATH=/usr/bin"},
		OS:         "linux", Architecture: "amd64",
	}
	var buf bytes.Buffer
	desc, err := ociimage.Write(&buf, img)
	if err != nil {
		t.Fatal(err)
	}
	files, _ := readTar(t, bytes.NewReader(buf.Bytes()))
	if string(files["oci-layout"]) != `{"imageLayoutVersion":"1.0.0"}` {
		t.Errorf("oci-layout = %q", files["oci-layout"])
	}
	var idx ociimage.Index
	if err := json.Unmarshal(files["index.json"], &idx); err != nil {
		t.Fatalf("index.json: %v", err)
	}
	if idx.SchemaVersion != 2 || idx.MediaType != ociimage.MediaTypeIndex ||
		len(idx.Manifests) != 1 {
		t.Fatalf("index = %+v", idx)
	}
	md := idx.Manifests[0]
	if md.Digest != desc.Digest || md.Annotations[ociimage.AnnotationContainerdName] != img.Ref ||
		md.Annotations[ociimage.AnnotationRefName] != "dev" {
		t.Errorf("index names %+v, Write returned %+v", md, desc)
	}
	if md.Platform == nil || md.Platform.OS != "linux" || md.Platform.Architecture != "amd64" {
		t.Errorf("platform = %+v", md.Platform)
	}
	var man ociimage.Manifest
	if err := json.Unmarshal(blob(t, files, md), &man); err != nil {
		t.Fatal(err)
	}
	if man.SchemaVersion != 2 || man.MediaType != ociimage.MediaTypeManifest ||
		man.Config.MediaType != ociimage.MediaTypeConfig ||
		len(man.Layers) != 1 ||
		man.Layers[0].MediaType != ociimage.MediaTypeLayer {
		t.Fatalf("manifest = %+v", man)
	}
	var cfg ociimage.Config
	if err := json.Unmarshal(blob(t, files, man.Config), &cfg); err != nil {
		t.Fatal(err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(blob(t, files, man.Layers[0])))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.RootFS.DiffIDs) != 1 || cfg.RootFS.DiffIDs[0] != sha(raw) {
		t.Errorf("config diff_ids %v, uncompressed layer %s", cfg.RootFS.DiffIDs, sha(raw))
	}
	if cfg.OS != "linux" || cfg.Architecture != "amd64" || len(cfg.Config.Entrypoint) != 1 ||
		cfg.Config.Entrypoint[0] != "/usr/bin/driver" ||
		cfg.Config.Env[0] != "PATH=/usr/bin" {
		t.Errorf("config = %+v", cfg)
	}
	lfiles, lhdrs := readTar(t, bytes.NewReader(raw))
	if string(lfiles["usr/bin/driver"]) != "#!binary" || lhdrs["usr/bin/driver"].Mode != 0o755 {
		t.Errorf(
			"usr/bin/driver: %q mode %o",
			lfiles["usr/bin/driver"],
			lhdrs["usr/bin/driver"].Mode,
		)
	}
	if string(lfiles["etc/x.conf"]) != "x=1" || lhdrs["etc/x.conf"].Mode != 0o644 {
		t.Errorf("etc/x.conf: %q", lfiles["etc/x.conf"])
	}
	for dir, mode := range map[string]int64{
		"usr/": 0o755, "usr/bin/": 0o755, "etc/": 0o755, "tmp/": 0o1777,
	} {
		h, ok := lhdrs[dir]
		if !ok || h.Typeflag != tar.TypeDir || h.Mode != mode {
			t.Errorf("folder %s: %+v, want mode %o", dir, h, mode)
		}
	}
}

func TestWriteReproducible(t *testing.T) {
	img := ociimage.Image{
		Ref: "example.com/a/b:v1",
		Files: []ociimage.File{
			{Path: "/b", Mode: 0o755, Content: []byte("b")},
			{Path: "/a/c", Mode: 0o600, Content: []byte("c")},
		},
	}
	var one, two bytes.Buffer
	d1, err := ociimage.Write(&one, img)
	if err != nil {
		t.Fatal(err)
	}
	img.Files[0], img.Files[1] = img.Files[1], img.Files[0]
	d2, err := ociimage.Write(&two, img)
	if err != nil {
		t.Fatal(err)
	}
	if d1.Digest != d2.Digest || !bytes.Equal(one.Bytes(), two.Bytes()) {
		t.Errorf("the same image written twice differs: %s vs %s", d1.Digest, d2.Digest)
	}
}

func TestWriteInvalid(t *testing.T) {
	file := []ociimage.File{{Path: "/f", Mode: 0o755, Content: []byte("x")}}
	for name, img := range map[string]ociimage.Image{
		"no tag":          {Ref: "example.com/driver", Files: file},
		"upper-case name": {Ref: "Example.com/Driver:v1", Files: file},
		"no files":        {Ref: "example.com/driver:v1"},
		"relative path": {
			Ref: "example.com/driver:v1", Files: []ociimage.File{{Path: "f", Mode: 0o755}},
		},
		"unclean path": {
			Ref: "example.com/driver:v1", Files: []ociimage.File{{Path: "/a/../f", Mode: 0o755}},
		},
		"file twice": {Ref: "example.com/driver:v1", Files: append(file, file...)},
		"file under a file": {
			Ref:   "example.com/driver:v1",
			Files: append(file, ociimage.File{Path: "/f/g", Mode: 0o644}),
		},
		"file is a folder": {Ref: "example.com/driver:v1", Files: file, Dirs: []string{"/f"}},
		"mode not perm": {
			Ref:   "example.com/driver:v1",
			Files: []ociimage.File{{Path: "/f", Mode: os.ModeDir | 0o755}},
		},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := ociimage.Write(io.Discard, img)
			if !errors.Is(err, ociimage.ErrInvalid) {
				t.Errorf("Write = %v, want ErrInvalid", err)
			}
		})
	}
}

func TestWriteFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "image.tar")
	if _, err := ociimage.WriteFile(path, ociimage.Image{Ref: "example.com/x:v1"}); !errors.Is(
		err,
		ociimage.ErrInvalid,
	) {
		t.Fatalf("WriteFile of a bad image = %v", err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("a failed WriteFile left %s: %v", path, err)
	}
	desc, err := ociimage.WriteFile(
		path,
		ociimage.Image{
			Ref:   "example.com/x:v1",
			Files: []ociimage.File{{Path: "/x", Mode: 0o755, Content: []byte("x")}},
		},
	)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	files, _ := readTar(t, f)
	var idx ociimage.Index
	if err := json.Unmarshal(files["index.json"], &idx); err != nil ||
		idx.Manifests[0].Digest != desc.Digest {
		t.Errorf("index.json %s: %v", files["index.json"], err)
	}
}
