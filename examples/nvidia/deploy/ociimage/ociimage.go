// Package ociimage writes a container image as an OCI image layout tarball
// from files on disk, with the standard library only: no registry, no
// Dockerfile, no base image. It is how the NVIDIA example driver's image
// is built from its static binary (CGO_ENABLED=0), for
// `ctr -n k8s.io images import` on a node, `docker load`,
// `podman load` or `skopeo copy oci-archive:...` to a registry.
//
// The image has one layer holding the given files (their parent folders
// are created), a config for the given platform, and an index naming the
// image, both as `io.containerd.image.name` (the full reference containerd
// imports it under) and as `org.opencontainers.image.ref.name` (its tag).
// The output is reproducible: the same files and config give the same
// bytes and digests (timestamps are the Unix epoch, entries are sorted).
package ociimage

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"regexp"
	"runtime"
	"sort"
	"strings"
	"time"

	"github.com/drakit/drakit/statefile"
)

// Media types of the OCI image specification v1.
const (
	MediaTypeIndex    = "application/vnd.oci.image.index.v1+json"
	MediaTypeManifest = "application/vnd.oci.image.manifest.v1+json"
	MediaTypeConfig   = "application/vnd.oci.image.config.v1+json"
	MediaTypeLayer    = "application/vnd.oci.image.layer.v1.tar+gzip"
)

// Annotations on the index's manifest descriptor that name the image.
const (
	AnnotationContainerdName = "io.containerd.image.name"
	AnnotationRefName        = "org.opencontainers.image.ref.name"
)

// ErrInvalid is wrapped by every error about a bad Image.
var ErrInvalid = errors.New("invalid image")

// File is one regular file of the image's layer.
type File struct {
	// Path is the file's absolute path in the container, e.g.
	// "/nvidia-dra-driver". Parent folders are created (mode 0755).
	Path string
	// Mode is the permission bits (e.g. 0o755 for a binary).
	Mode os.FileMode
	// Content is the file's content.
	Content []byte
}

// Image describes the image to write.
type Image struct {
	// Ref is the full reference, NAME:TAG, e.g.
	// "drakit.dev/nvidia-dra-driver:dev". Required.
	Ref string
	// Files are the layer's regular files. At least one.
	Files []File
	// Dirs are extra empty folders (mode 0755, or 01777 for "/tmp").
	Dirs []string
	// Entrypoint and Cmd are the config's ENTRYPOINT and CMD.
	Entrypoint, Cmd []string
	// Env are NAME=VALUE entries of the config.
	Env []string
	// User is the config's user (empty: root).
	User string
	// OS and Architecture are the platform (default linux and the
	// running program's GOARCH).
	OS, Architecture string
	// Labels are the config's labels.
	Labels map[string]string
}

// Descriptor is an OCI content descriptor: what the index lists.
type Descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Platform    *Platform         `json:"platform,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// Platform is a descriptor's platform.
type Platform struct {
	Architecture string `json:"architecture"`
	OS           string `json:"os"`
}

// Manifest is an OCI image manifest.
type Manifest struct {
	SchemaVersion int          `json:"schemaVersion"`
	MediaType     string       `json:"mediaType"`
	Config        Descriptor   `json:"config"`
	Layers        []Descriptor `json:"layers"`
}

// Index is an OCI image index (index.json of the layout).
type Index struct {
	SchemaVersion int          `json:"schemaVersion"`
	MediaType     string       `json:"mediaType"`
	Manifests     []Descriptor `json:"manifests"`
}

// Config is the subset of the OCI image config this package writes.
type Config struct {
	Created      string     `json:"created"`
	Architecture string     `json:"architecture"`
	OS           string     `json:"os"`
	Config       ExecConfig `json:"config"`
	RootFS       RootFS     `json:"rootfs"`
	History      []History  `json:"history,omitempty"`
}

// ExecConfig is the config's execution parameters.
type ExecConfig struct {
	User       string            `json:"User,omitempty"`
	Env        []string          `json:"Env,omitempty"`
	Entrypoint []string          `json:"Entrypoint,omitempty"`
	Cmd        []string          `json:"Cmd,omitempty"`
	Labels     map[string]string `json:"Labels,omitempty"`
}

// RootFS lists the layers' uncompressed digests (diff IDs).
type RootFS struct {
	Type    string   `json:"type"`
	DiffIDs []string `json:"diff_ids"`
}

// History is one entry of the config's history.
type History struct {
	Created   string `json:"created"`
	CreatedBy string `json:"created_by"`
}

// refPattern is a permissive NAME:TAG check: lower-case name components
// separated by "/", an optional registry port, and a tag.
var refPattern = regexp.MustCompile(
	`^[a-z0-9]+([._-][a-z0-9]+)*(:[0-9]+)?(/[a-z0-9]+([._-][a-z0-9]+)*)*:[A-Za-z0-9_]` +
		`[A-Za-z0-9_.-]{0,127}$`,
)

func (img *Image) check() error {
	if !refPattern.MatchString(img.Ref) {
		return fmt.Errorf(
			"%w: reference %q is not NAME:TAG (lower-case name, a tag)",
			ErrInvalid,
			img.Ref,
		)
	}
	if len(img.Files) == 0 {
		return fmt.Errorf("%w: no files", ErrInvalid)
	}
	seen := map[string]bool{}
	for _, f := range img.Files {
		p, err := cleanPath(f.Path)
		if err != nil {
			return err
		}
		if seen[p] {
			return fmt.Errorf("%w: file %s given twice", ErrInvalid, f.Path)
		}
		seen[p] = true
		if f.Mode&^os.ModePerm != 0 {
			return fmt.Errorf(
				"%w: file %s: mode %v is not permission bits",
				ErrInvalid,
				f.Path,
				f.Mode,
			)
		}
	}
	for _, d := range img.Dirs {
		if _, err := cleanPath(d); err != nil {
			return err
		}
	}
	return nil
}

func cleanPath(p string) (string, error) {
	if !strings.HasPrefix(p, "/") || path.Clean(p) != p || p == "/" {
		return "", fmt.Errorf("%w: path %q is not a clean absolute path", ErrInvalid, p)
	}
	return strings.TrimPrefix(p, "/"), nil
}

// epoch is every timestamp of the image, for reproducible output.
var epoch = time.Unix(0, 0).UTC()

// Write writes img as an OCI image layout tarball to w and returns the
// index's descriptor of the image manifest (its digest is the image's
// digest). Errors about img wrap ErrInvalid.
func Write(w io.Writer, img Image) (Descriptor, error) {
	if err := img.check(); err != nil {
		return Descriptor{}, err
	}
	if img.OS == "" {
		img.OS = "linux"
	}
	if img.Architecture == "" {
		img.Architecture = runtime.GOARCH
	}
	layer, diffID, err := buildLayer(img)
	if err != nil {
		return Descriptor{}, err
	}
	cfg := Config{
		Created: epoch.Format(time.RFC3339), Architecture: img.Architecture, OS: img.OS,
		Config: ExecConfig{
			User:       img.User,
			Env:        img.Env,
			Entrypoint: img.Entrypoint,
			Cmd:        img.Cmd,
			Labels:     img.Labels,
		},
		RootFS:  RootFS{Type: "layers", DiffIDs: []string{diffID}},
		History: []History{{Created: epoch.Format(time.RFC3339), CreatedBy: "drakit ociimage"}},
	}
	cfgJSON, err := json.Marshal(cfg)
	if err != nil {
		return Descriptor{}, fmt.Errorf("encode image config: %w", err)
	}
	man := Manifest{
		SchemaVersion: 2, MediaType: MediaTypeManifest,
		Config: descriptorOf(MediaTypeConfig, cfgJSON),
		Layers: []Descriptor{descriptorOf(MediaTypeLayer, layer)},
	}
	manJSON, err := json.Marshal(man)
	if err != nil {
		return Descriptor{}, fmt.Errorf("encode image manifest: %w", err)
	}
	desc := descriptorOf(MediaTypeManifest, manJSON)
	desc.Platform = &Platform{Architecture: img.Architecture, OS: img.OS}
	desc.Annotations = map[string]string{
		AnnotationContainerdName: img.Ref,
		AnnotationRefName:        img.Ref[strings.LastIndex(img.Ref, ":")+1:],
	}
	idxJSON, err := json.Marshal(
		Index{SchemaVersion: 2, MediaType: MediaTypeIndex, Manifests: []Descriptor{desc}},
	)
	if err != nil {
		return Descriptor{}, fmt.Errorf("encode image index: %w", err)
	}

	tw := tar.NewWriter(w)
	entries := []struct {
		name string
		data []byte
	}{
		{"oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)},
		{"index.json", idxJSON},
		{"blobs/", nil},
		{"blobs/sha256/", nil},
		{blobPath(man.Config.Digest), cfgJSON},
		{blobPath(man.Layers[0].Digest), layer},
		{blobPath(desc.Digest), manJSON},
	}
	for _, e := range entries {
		hdr := &tar.Header{
			Name:     e.name,
			Mode:     0o644,
			Size:     int64(len(e.data)),
			ModTime:  epoch,
			Typeflag: tar.TypeReg,
			Format:   tar.FormatPAX,
		}
		if strings.HasSuffix(e.name, "/") {
			hdr.Typeflag, hdr.Mode = tar.TypeDir, 0o755
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return Descriptor{}, fmt.Errorf("write image %s: %w", e.name, err)
		}
		if _, err := tw.Write(e.data); err != nil {
			return Descriptor{}, fmt.Errorf("write image %s: %w", e.name, err)
		}
	}
	if err := tw.Close(); err != nil {
		return Descriptor{}, fmt.Errorf("write image: %w", err)
	}
	return desc, nil
}

// WriteFile writes img to the file at path (mode 0644, replaced
// atomically with statefile.WriteFile).
func WriteFile(path string, img Image) (Descriptor, error) {
	var buf bytes.Buffer
	desc, err := Write(&buf, img)
	if err != nil {
		return Descriptor{}, err
	}
	if err := statefile.WriteFile(path, buf.Bytes(), statefile.WithMode(0o644)); err != nil {
		return Descriptor{}, fmt.Errorf("write image file: %w", err)
	}
	return desc, nil
}

func blobPath(
	digest string,
) string {
	return "blobs/sha256/" + strings.TrimPrefix(digest, "sha256:")
}

func digestOf(data []byte) string {
	sum := sha256.Sum256(data)
	return "sha256:" + hex.EncodeToString(sum[:])
}

func descriptorOf(mediaType string, data []byte) Descriptor {
	return Descriptor{MediaType: mediaType, Digest: digestOf(data), Size: int64(len(data))}
}

// buildLayer returns the gzip-compressed layer and the digest of its
// uncompressed tar (the diff ID).
func buildLayer(img Image) ([]byte, string, error) {
	dirs := map[string]os.FileMode{}
	addParents := func(p string) {
		for d := path.Dir(p); d != "." && d != ""; d = path.Dir(d) {
			if _, ok := dirs[d]; !ok {
				dirs[d] = 0o755
			}
		}
	}
	for _, d := range img.Dirs {
		p, _ := cleanPath(d)
		mode := os.FileMode(0o755)
		if p == "tmp" {
			mode = 0o777 | os.ModeSticky
		}
		dirs[p] = mode
		addParents(p)
	}
	files := map[string]File{}
	for _, f := range img.Files {
		p, _ := cleanPath(f.Path)
		files[p] = f
		addParents(p)
	}
	for p := range files {
		if _, ok := dirs[p]; ok {
			return nil, "", fmt.Errorf("%w: /%s is both a file and a folder", ErrInvalid, p)
		}
	}
	names := make([]string, 0, len(dirs)+len(files))
	for d := range dirs {
		names = append(names, d)
	}
	for f := range files {
		names = append(names, f)
	}
	sort.Strings(names)

	var raw bytes.Buffer
	tw := tar.NewWriter(&raw)
	for _, n := range names {
		hdr := &tar.Header{Name: n, ModTime: epoch, Format: tar.FormatPAX}
		if mode, ok := dirs[n]; ok {
			hdr.Name += "/"
			hdr.Typeflag = tar.TypeDir
			hdr.Mode = int64(mode.Perm())
			if mode&os.ModeSticky != 0 {
				hdr.Mode |= 0o1000
			}
		} else {
			f := files[n]
			hdr.Typeflag, hdr.Mode, hdr.Size = tar.TypeReg, int64(f.Mode.Perm()),
				int64(len(f.Content))
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, "", fmt.Errorf("write layer %s: %w", n, err)
		}
		if hdr.Typeflag == tar.TypeReg {
			if _, err := tw.Write(files[n].Content); err != nil {
				return nil, "", fmt.Errorf("write layer %s: %w", n, err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, "", fmt.Errorf("write layer: %w", err)
	}
	diffID := digestOf(raw.Bytes())
	var gz bytes.Buffer
	zw, err := gzip.NewWriterLevel(&gz, gzip.BestSpeed)
	if err != nil {
		return nil, "", fmt.Errorf("compress layer: %w", err)
	}
	if _, err := zw.Write(raw.Bytes()); err != nil {
		return nil, "", fmt.Errorf("compress layer: %w", err)
	}
	if err := zw.Close(); err != nil {
		return nil, "", fmt.Errorf("compress layer: %w", err)
	}
	return gz.Bytes(), diffID, nil
}
