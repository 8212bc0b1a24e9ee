package ociimage

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// Unpack lays out the root file system of the one image in the OCI image
// layout tarball at path (as Write makes it) in dir, as a container
// runtime would: each layer's folders and regular files, in order, with
// their permission bits. It fails, naming the entry, on a layer entry
// that is neither (a link, a device, a whiteout file), and on a tarball
// with other than one image.
func Unpack(path, dir string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("unpack image: %w", err)
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
			return fmt.Errorf("unpack image %s: %w", path, err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			return fmt.Errorf("unpack image %s: %s: %w", path, h.Name, err)
		}
		blobs[h.Name] = b
	}
	blob := func(d Descriptor) []byte { return blobs[blobPath(d.Digest)] }
	var idx Index
	if err := json.Unmarshal(blobs["index.json"], &idx); err != nil {
		return fmt.Errorf("unpack image %s: index.json: %w", path, err)
	}
	if len(idx.Manifests) != 1 {
		return fmt.Errorf(
			"unpack image %s: index.json lists %d images, want 1",
			path,
			len(idx.Manifests),
		)
	}
	var man Manifest
	if err := json.Unmarshal(blob(idx.Manifests[0]), &man); err != nil {
		return fmt.Errorf("unpack image %s: manifest: %w", path, err)
	}
	for _, l := range man.Layers {
		if err := unpackLayer(blob(l), dir); err != nil {
			return fmt.Errorf("unpack image %s: layer %s: %w", path, l.Digest, err)
		}
	}
	return nil
}

// unpackLayer writes the folders and regular files of a gzip-compressed
// layer into dir.
func unpackLayer(layer []byte, dir string) error {
	zr, err := gzip.NewReader(bytes.NewReader(layer))
	if err != nil {
		return err
	}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		p := filepath.Join(dir, filepath.Clean("/"+h.Name))
		switch {
		case strings.HasPrefix(filepath.Base(h.Name), ".wh."):
			return fmt.Errorf("%s: whiteout files are not supported", h.Name)
		case h.Typeflag == tar.TypeDir:
			if err := os.MkdirAll(p, 0o755); err != nil {
				return err
			}
			if err := os.Chmod(p, os.FileMode(h.Mode)&os.ModePerm|modeBits(h.Mode)); err != nil {
				return err
			}
		case h.Typeflag == tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				return err
			}
			b, err := io.ReadAll(tr)
			if err != nil {
				return fmt.Errorf("%s: %w", h.Name, err)
			}
			if err := os.WriteFile(p, b, os.FileMode(h.Mode)&os.ModePerm); err != nil {
				return err
			}
			if err := os.Chmod(p, os.FileMode(h.Mode)&os.ModePerm); err != nil {
				return err
			}
		default:
			return fmt.Errorf("%s: entry of type %c is not supported", h.Name, h.Typeflag)
		}
	}
}

// modeBits is the sticky bit of a tar mode (a /tmp of 01777).
func modeBits(mode int64) os.FileMode {
	if mode&0o1000 != 0 {
		return os.ModeSticky
	}
	return 0
}
