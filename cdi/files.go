package cdi

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/drakit/drakit/statefile"
)

// Write validates the claim's spec (every problem, with the field named,
// by the rules of [Writer.Spec]), writes it atomically (a temporary file
// in the same folder, renamed over the spec; with fsync of the file
// before and of the folder after the rename unless [WithoutFsync])
// replacing an earlier spec of the same claim, and returns the qualified CDI device IDs in the order of
// claim.Devices. Common edits go into the spec's top-level edits, which a
// runtime applies once per container that gets any device of the claim.
// A claim with no devices is an error: it would yield no IDs.
func (w *Writer) Write(ctx context.Context, claim Claim) ([]string, error) {
	_, ids, data, err := w.build(claim)
	if err != nil {
		return nil, err
	}
	path, err := w.SpecPath(claim.UID)
	if err != nil {
		return nil, err
	}
	if err := w.writeFile(path, data); err != nil {
		return nil, fmt.Errorf("write CDI spec of claim %q: %w", claim.UID, err)
	}
	klog.FromContext(ctx).V(5).Info("Wrote CDI spec", "path", path, "claimUID", claim.UID, "devices", len(ids))
	return ids, nil
}

// WriteRecorded is Write that also returns the spec as written, for its
// writer to keep (the driver runtime keeps it in its checkpoint) and to
// write again with [Writer.Restore] when the file is lost while the
// claim is prepared (the CDI folder deleted, or wiped by a tool).
func (w *Writer) WriteRecorded(ctx context.Context, claim Claim) ([]string, []byte, error) {
	_, ids, data, err := w.build(claim)
	if err != nil {
		return nil, nil, err
	}
	path, err := w.SpecPath(claim.UID)
	if err != nil {
		return nil, nil, err
	}
	if err := w.writeFile(path, data); err != nil {
		return nil, nil, fmt.Errorf("write CDI spec of claim %q: %w", claim.UID, err)
	}
	return ids, data, nil
}

// Restore writes again the spec of claim claimUID that WriteRecorded
// returned as data. It refuses data that the CDI library cannot read, of
// another vendor and class, or whose devices are not the claim's.
func (w *Writer) Restore(ctx context.Context, claimUID types.UID, data []byte) error {
	path, err := w.SpecPath(claimUID)
	if err != nil {
		return err
	}
	spec, err := cdiapi.ParseSpec(data)
	if err != nil {
		return fmt.Errorf("restore CDI spec of claim %q: %w", claimUID, err)
	}
	if spec.Kind != w.Kind() {
		return fmt.Errorf("restore CDI spec of claim %q: kind %q, want %q", claimUID, spec.Kind, w.Kind())
	}
	for _, d := range spec.Devices {
		if !strings.HasPrefix(d.Name, string(claimUID)+"_") {
			return fmt.Errorf("restore CDI spec of claim %q: device %q is not the claim's", claimUID, d.Name)
		}
	}
	if err := w.writeFile(path, data); err != nil {
		return fmt.Errorf("restore CDI spec of claim %q: %w", claimUID, err)
	}
	klog.FromContext(ctx).Info("Wrote a lost CDI spec again", "path", path, "claimUID", claimUID)
	return nil
}

// writeFile writes data to path atomically: temp file in the same folder,
// renamed over path; with fsync of the file and then of the folder unless
// WithoutFsync.
func (w *Writer) writeFile(path string, data []byte) error {
	if err := os.MkdirAll(w.dir, 0o755); err != nil {
		return fmt.Errorf("create folder: %w", err)
	}
	opts := []statefile.WriteOption{
		statefile.WithTempPattern("." + filepath.Base(path) + ".*" + tmpExt),
		statefile.WithMode(fs.FileMode(w.opts.fileMode)),
	}
	if w.opts.fsync {
		opts = append(opts, statefile.Durable())
	}
	return statefile.WriteFile(path, data, opts...)
}

func syncDir(dir string) error { return statefile.SyncFolder(dir) }

// removeFile removes path; a file that does not exist is removed
// already, whatever error the removal reports (on a read-only file system
// unlink says EROFS before it looks the name up).
// It says whether it removed a file.
func removeFile(path string) (bool, error) {
	err := os.Remove(path)
	if err == nil {
		return true, nil
	}
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if _, serr := os.Lstat(path); errors.Is(serr, fs.ErrNotExist) {
		return false, nil
	}
	return false, err
}

// Remove deletes the spec file of a claim. A missing file is not an error
// (Remove is idempotent).
func (w *Writer) Remove(ctx context.Context, claimUID types.UID) error {

	path, err := w.SpecPath(claimUID)
	if err != nil {
		return fmt.Errorf("remove CDI spec: %w", err)
	}
	removed, err := removeFile(path)
	if err != nil {
		return fmt.Errorf("remove CDI spec of claim %q: %w", claimUID, err)
	}
	if !removed {
		return nil
	}
	if w.opts.fsync {
		if err := syncDir(w.dir); err != nil {
			return fmt.Errorf("remove CDI spec of claim %q: %w", claimUID, err)
		}
	}
	klog.FromContext(ctx).V(5).Info("Removed CDI spec", "path", path, "claimUID", claimUID)
	return nil
}
