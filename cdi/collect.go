package cdi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
)

// Claims returns the UIDs of the claims that have a spec file of this
// Writer's vendor and class in the folder, sorted.
func (w *Writer) Claims(ctx context.Context) ([]types.UID, error) {
	return w.Orphans(ctx, func(types.UID) bool { return false })
}

// ownedFile reports whether a folder entry is a spec file of this writer
// and returns the claim UID. It checks the name and the spec's kind, so
// a file written by someone else under a name like ours is left alone.
func (w *Writer) ownedFile(name string) (types.UID, bool) {
	rest, ok := strings.CutPrefix(name, w.prefix())
	if !ok {
		return "", false
	}
	uid, ok := strings.CutSuffix(rest, specExt)
	if !ok || ValidateUID(types.UID(uid)) != nil {
		return "", false
	}
	data, err := os.ReadFile(filepath.Join(w.dir, name))
	if err != nil {
		return "", false
	}
	var head struct {
		Kind string `json:"kind"`
	}
	if json.Unmarshal(data, &head) != nil || head.Kind != w.Kind() {
		return "", false
	}
	return types.UID(uid), true
}

// Orphans returns the UIDs of the claims that have a spec file of this
// Writer's vendor and class and for which live says false, sorted. Only
// their files are read (to check their kind): a folder of many live
// claims costs a listing.
func (w *Writer) Orphans(ctx context.Context, live func(types.UID) bool) ([]types.UID, error) {
	entries, err := os.ReadDir(w.dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		return nil, fmt.Errorf("list CDI specs: %w", err)
	}
	var out []types.UID
	for _, e := range entries {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("list CDI specs: %w", ctx.Err())
		}
		rest, ok := strings.CutPrefix(e.Name(), w.prefix())
		if !ok || !e.Type().IsRegular() {
			continue
		}
		if uid, ok := strings.CutSuffix(rest, specExt); !ok || live(types.UID(uid)) {
			continue
		}
		if uid, ok := w.ownedFile(e.Name()); ok {
			out = append(out, uid)
		}
	}
	slices.Sort(out)
	return out, nil
}

// GC removes the spec files of this Writer's vendor and class whose claim
// is not in live, and temporary files of crashed writes (older than a
// minute, so that writes in progress are not disturbed). live must hold
// every claim that is prepared or being prepared.
// Files of other vendors or classes and files it cannot parse as its own
// are left alone. It returns the UIDs whose specs it removed, sorted.
func (w *Writer) GC(ctx context.Context, live map[types.UID]bool) ([]types.UID, error) {
	logger := klog.FromContext(ctx)
	var errs []error
	if err := w.RemoveStaleTemp(ctx); err != nil {
		errs = append(errs, err)
	}
	entries, err := os.ReadDir(w.dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, errors.Join(errs...)
		}
		return nil, fmt.Errorf("collect CDI specs: %w", err)
	}
	var removed []types.UID
	for _, e := range entries {
		if ctx.Err() != nil {
			return removed, fmt.Errorf("collect CDI specs: %w", ctx.Err())
		}
		if !e.Type().IsRegular() {
			continue
		}
		name := e.Name()
		uid, ok := w.ownedFile(name)
		if !ok || live[uid] {
			continue
		}
		if _, err := removeFile(filepath.Join(w.dir, name)); err != nil {
			errs = append(errs, fmt.Errorf("remove spec of claim %q: %w", uid, err))
			continue
		}
		logger.V(4).Info("Removed orphaned CDI spec", "file", name, "claimUID", uid)
		removed = append(removed, uid)
	}
	slices.Sort(removed)
	if len(removed) > 0 && w.opts.fsync {
		if err := syncDir(w.dir); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return removed, fmt.Errorf("collect CDI specs: %w", errors.Join(errs...))
	}
	return removed, nil
}

// RemoveStaleTemp removes the temporary files of this Writer's writes
// that a crash interrupted: those older than a minute (a younger one may
// belong to a write in progress, in this process or in another instance
// of the driver during a rolling update). Files of other vendors or
// classes are left alone. It returns every removal that failed.
func (w *Writer) RemoveStaleTemp(ctx context.Context) error {
	entries, err := os.ReadDir(w.dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("collect temporary CDI files: %w", err)
	}
	var errs []error
	tmpPrefix := "." + w.prefix()
	for _, e := range entries {
		if ctx.Err() != nil {
			return fmt.Errorf("collect temporary CDI files: %w", ctx.Err())
		}
		name := e.Name()
		if !e.Type().IsRegular() || !strings.HasPrefix(name, tmpPrefix) || !strings.HasSuffix(name, tmpExt) {
			continue
		}
		info, err := e.Info()
		if err != nil || time.Since(info.ModTime()) < staleTempAge {
			continue
		}
		if _, err := removeFile(filepath.Join(w.dir, name)); err != nil {
			errs = append(errs, fmt.Errorf("remove temporary file %q: %w", name, err))
			continue
		}
		klog.FromContext(ctx).V(4).Info("Removed temporary CDI file of an interrupted write", "file", name)
	}
	if len(errs) > 0 {
		return fmt.Errorf("collect temporary CDI files: %w", errors.Join(errs...))
	}
	return nil
}
