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
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/drakit/drakit/internal/atomicfile"
)

const (
	specExt = ".json"
	tmpExt  = ".tmp"
	// claimAnnotation records namespace/name of the claim in a spec.
	claimAnnotation = "drakit.io/claim"
	// staleTempAge is how old a temporary file must be for GC to take it
	// for the leftover of a crashed write.
	staleTempAge = time.Minute
)

func newWriter(dir, vendor, class string, opts ...Option) (*Writer, error) {
	if !filepath.IsAbs(dir) {
		return nil, fmt.Errorf("new CDI writer: dir %q: must be an absolute path", dir)
	}
	if err := validateKindPart("vendor", vendor); err != nil {
		return nil, fmt.Errorf("new CDI writer: %w", err)
	}
	if err := validateKindPart("class", class); err != nil {
		return nil, fmt.Errorf("new CDI writer: %w", err)
	}
	w := &Writer{dir: filepath.Clean(dir), vendor: vendor, class: class,
		opts: options{fileMode: 0o644, fsync: true}}
	for _, o := range opts {
		if err := o(&w.opts); err != nil {
			return nil, fmt.Errorf("new CDI writer: %w", err)
		}
	}
	return w, nil
}

// prefix is the start of every spec file name of this writer. '+' occurs
// in no vendor, class or UID, so "<vendor>+<class>+<uid>" is unambiguous:
// the CDI convention "<vendor>-<class>_<id>" is not ("a-b"+"c" and
// "a"+"b-c" collide).
func (w *Writer) prefix() string {
	return w.vendor + "+" + w.class + "+"
}

func (w *Writer) specPath(claimUID types.UID) (string, error) {
	if err := ValidateUID(claimUID); err != nil {
		return "", fmt.Errorf("build spec path: %w", err)
	}
	return filepath.Join(w.dir, w.prefix()+string(claimUID)+specExt), nil
}

// Spec builds the CDI spec of a claim without writing it, and the
// qualified device IDs. It reports every problem, each naming its field.
func (w *Writer) Spec(claim Claim) (*cdispec.Spec, []string, error) {
	var errs []error
	if err := ValidateUID(claim.UID); err != nil {
		errs = append(errs, fmt.Errorf("uid: %w", err))
	}
	if len(claim.Devices) == 0 {
		errs = append(errs, errors.New("devices: at least one device is required"))
	}
	spec := &cdispec.Spec{
		Kind:           w.Kind(),
		ContainerEdits: claim.Common.spec(),
		Devices:        make([]cdispec.Device, 0, len(claim.Devices)),
	}
	// The claim's name is for people only: leave it out rather than fail
	// when it holds characters a spec cannot carry.
	if (claim.Namespace != "" || claim.Name != "") && badText(claim.Namespace+claim.Name) == "" {
		spec.Annotations = map[string]string{claimAnnotation: claim.Namespace + "/" + claim.Name}
	}
	errs = append(errs, validateEdits("common", &spec.ContainerEdits)...)
	ids := make([]string, 0, len(claim.Devices))
	seen := make(map[string]int, len(claim.Devices))
	for i, d := range claim.Devices {
		fld := fmt.Sprintf("devices[%d]", i)
		if j, dup := seen[d.Name]; dup {
			errs = append(errs, fmt.Errorf("%s.name %q: duplicate of devices[%d]", fld, d.Name, j))
			continue
		}
		seen[d.Name] = i
		if err := validateLocalName(d.Name); err != nil {
			errs = append(errs, fmt.Errorf("%s.name: %w", fld, err))
			continue
		}
		edits := d.Edits.spec()
		if (&Edits{e: edits}).IsEmpty() {
			// The CDI library rejects a whole spec in which one device
			// has no edits; give such a device a marker.
			edits.Env = []string{EmptyDeviceEnv + "=" + d.Name}
		}
		errs = append(errs, validateEdits(fld+".edits", &edits)...)
		name := EncodeName(d.Name)
		if claim.UID != "" {
			name = string(claim.UID) + "_" + name
		}
		spec.Devices = append(spec.Devices, cdispec.Device{Name: name, ContainerEdits: edits})
		ids = append(ids, w.Kind()+"="+name)
	}
	if len(errs) > 0 {
		return nil, nil, fmt.Errorf("build CDI spec of claim %q: %w", claim.UID, errors.Join(errs...))
	}
	v, err := cdispec.MinimumRequiredVersion(spec)
	if err != nil {
		return nil, nil, fmt.Errorf("build CDI spec of claim %q: version: %w", claim.UID, err)
	}
	spec.Version = v
	// The CDI library reads specs as YAML, which rejects some characters
	// that JSON lets through; check the bytes we would write.
	data, err := json.Marshal(spec)
	if err != nil {
		return nil, nil, fmt.Errorf("build CDI spec of claim %q: encode: %w", claim.UID, err)
	}
	if _, err := cdiapi.ParseSpec(data); err != nil {
		return nil, nil, fmt.Errorf("build CDI spec of claim %q: the CDI library cannot read it: %w", claim.UID, err)
	}
	return spec, ids, nil
}

// badText reports a problem with a string that goes into a spec: NUL,
// which no runtime can pass on, invalid UTF-8, and characters that the
// CDI library's YAML reader rejects (DEL, C1 controls, U+FFFE, U+FFFF).
func badText(s string) string {
	if !utf8.ValidString(s) {
		return "is not valid UTF-8"
	}
	for _, r := range s {
		switch {
		case r == 0:
			return "contains NUL"
		case r == 0x7f || (r >= 0x80 && r <= 0x9f && r != 0x85) || r == 0xfffe || r == 0xffff:
			return fmt.Sprintf("contains the control character %U", r)
		}
	}
	return ""
}

func (w *Writer) write(ctx context.Context, claim Claim) ([]string, error) {
	spec, ids, err := w.Spec(claim)
	if err != nil {
		return nil, err
	}
	path, err := w.specPath(claim.UID)
	if err != nil {
		return nil, err
	}
	data, err := json.Marshal(spec)
	if err != nil {
		return nil, fmt.Errorf("encode CDI spec of claim %q: %w", claim.UID, err)
	}
	if err := w.writeFile(path, data); err != nil {
		return nil, fmt.Errorf("write CDI spec of claim %q: %w", claim.UID, err)
	}
	klog.FromContext(ctx).V(5).Info("Wrote CDI spec", "path", path, "claimUID", claim.UID, "devices", len(ids))
	return ids, nil
}

// writeFile writes data to path atomically: temp file in the same folder,
// fsync, rename over path, fsync of the folder.
func (w *Writer) writeFile(path string, data []byte) error {
	if err := os.MkdirAll(w.dir, 0o755); err != nil {
		return fmt.Errorf("create folder: %w", err)
	}
	return atomicfile.Write(path, data, atomicfile.Options{
		TempPattern: "." + filepath.Base(path) + ".*" + tmpExt,
		Mode:        fs.FileMode(w.opts.fileMode),
		SyncFile:    w.opts.fsync,
		SyncDir:     w.opts.fsync,
	})
}

func syncDir(dir string) error { return atomicfile.SyncDir(dir) }

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

func (w *Writer) remove(ctx context.Context, claimUID types.UID) error {
	path, err := w.specPath(claimUID)
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

func (w *Writer) claims(ctx context.Context) ([]types.UID, error) {
	entries, err := os.ReadDir(w.dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		return nil, fmt.Errorf("list CDI specs: %w", err)
	}
	var out []types.UID
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		if uid, ok := w.ownedFile(e.Name()); ok {
			out = append(out, uid)
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("list CDI specs: %w", ctx.Err())
		}
	}
	slices.Sort(out)
	return out, nil
}

func (w *Writer) gc(ctx context.Context, live map[types.UID]bool) ([]types.UID, error) {
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

// validateEdits checks edits with the CDI library's rules plus the ones a
// runtime would only find at injection time; fld names the edits.
func validateEdits(fld string, e *cdispec.ContainerEdits) []error {
	var errs []error
	text := func(fld, s string) {
		if msg := badText(s); msg != "" {
			errs = append(errs, fmt.Errorf("%s %q: %s", fld, s, msg))
		}
	}
	for i, env := range e.Env {
		text(fmt.Sprintf("%s.env[%d]", fld, i), env)
	}
	for i, n := range e.DeviceNodes {
		text(fmt.Sprintf("%s.deviceNodes[%d].path", fld, i), n.Path)
		text(fmt.Sprintf("%s.deviceNodes[%d].hostPath", fld, i), n.HostPath)
	}
	for i, m := range e.Mounts {
		text(fmt.Sprintf("%s.mounts[%d].hostPath", fld, i), m.HostPath)
		text(fmt.Sprintf("%s.mounts[%d].containerPath", fld, i), m.ContainerPath)
		for j, o := range m.Options {
			text(fmt.Sprintf("%s.mounts[%d].options[%d]", fld, i, j), o)
		}
	}
	for i, h := range e.Hooks {
		text(fmt.Sprintf("%s.hooks[%d].path", fld, i), h.Path)
		for j, a := range h.Args {
			text(fmt.Sprintf("%s.hooks[%d].args[%d]", fld, i, j), a)
		}
	}
	for i, env := range e.Env {
		key, _, _ := strings.Cut(env, "=")
		if key == "" || strings.ContainsRune(key, 0) || strings.ContainsRune(env, 0) {
			errs = append(errs, fmt.Errorf("%s.env[%d] %q: key must be non-empty and free of '=' and NUL", fld, i, env))
		}
	}
	for i, n := range e.DeviceNodes {
		p := fmt.Sprintf("%s.deviceNodes[%d]", fld, i)
		if !filepath.IsAbs(n.Path) {
			errs = append(errs, fmt.Errorf("%s.path %q: must be an absolute path", p, n.Path))
		}
		if n.HostPath != "" && !filepath.IsAbs(n.HostPath) {
			errs = append(errs, fmt.Errorf("%s.hostPath %q: must be an absolute path", p, n.HostPath))
		}
		switch n.Type {
		case "", "b", "c", "u", "p":
		default:
			errs = append(errs, fmt.Errorf("%s.type %q: must be one of b, c, u, p", p, n.Type))
		}
		if strings.Trim(n.Permissions, "rwm") != "" {
			errs = append(errs, fmt.Errorf("%s.permissions %q: must be a subset of rwm", p, n.Permissions))
		}
		if n.Major < 0 || n.Minor < 0 {
			errs = append(errs, fmt.Errorf("%s: major and minor must not be negative", p))
		}
	}
	for i, m := range e.Mounts {
		p := fmt.Sprintf("%s.mounts[%d]", fld, i)
		if !filepath.IsAbs(m.HostPath) {
			errs = append(errs, fmt.Errorf("%s.hostPath %q: must be an absolute path", p, m.HostPath))
		}
		if !filepath.IsAbs(m.ContainerPath) {
			errs = append(errs, fmt.Errorf("%s.containerPath %q: must be an absolute path", p, m.ContainerPath))
		}
	}
	for i, h := range e.Hooks {
		p := fmt.Sprintf("%s.hooks[%d]", fld, i)
		switch HookName(h.HookName) {
		case Prestart, CreateRuntime, CreateContainer, StartContainer, Poststart, Poststop:
		default:
			errs = append(errs, fmt.Errorf("%s.hookName %q: not an OCI hook stage", p, h.HookName))
		}
		if !filepath.IsAbs(h.Path) {
			errs = append(errs, fmt.Errorf("%s.path %q: must be an absolute path", p, h.Path))
		}
	}
	if len(errs) > 0 {
		return errs
	}
	// The CDI library's own validation (the same code a runtime runs).
	if err := (&cdiapi.ContainerEdits{ContainerEdits: e}).Validate(); err != nil {
		errs = append(errs, fmt.Errorf("%s: %w", fld, err))
	}
	return errs
}
