// Package cdispecs writes one transient CDI spec per prepared claim for the
// driver runtime: atomic replace, removal, and a list of the claims that
// have a spec, for garbage collection of orphans.
package cdispecs

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"

	"k8s.io/apimachinery/pkg/types"
	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"
	"tags.cncf.io/container-device-interface/pkg/parser"
	cdispec "tags.cncf.io/container-device-interface/specs-go"
)

// Class is the CDI class of the runtime's per-claim devices.
const Class = "claim"

// Device is one CDI device of a claim's spec.
type Device struct {
	// Name is unique within the claim; the CDI device is
	// "<claimUID>-<Name>".
	Name  string
	Edits cdispec.ContainerEdits
}

// Writer manages the per-claim specs of one driver in one folder.
type Writer struct {
	dir    string
	vendor string
	prefix string // file name prefix: "<vendor>-<class>_"
	seq    atomic.Uint64
}

// New returns a writer for vendor (the driver name) in dir, creating dir.
func New(dir, vendor string) (*Writer, error) {
	if dir == "" || vendor == "" {
		return nil, errors.New("new CDI spec writer: folder and vendor must be set")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("new CDI spec writer: %w", err)
	}
	name := cdiapi.GenerateTransientSpecName(vendor, Class, "x")
	return &Writer{dir: dir, vendor: vendor, prefix: strings.TrimSuffix(name, "x")}, nil
}

// Kind is the CDI kind of the claim devices ("<vendor>/claim").
func (w *Writer) Kind() string { return w.vendor + "/" + Class }

// DeviceID returns the qualified CDI ID of a claim's device.
func (w *Writer) DeviceID(claim types.UID, name string) string {
	return w.Kind() + "=" + deviceName(claim, name)
}

func deviceName(claim types.UID, name string) string { return string(claim) + "-" + name }

func (w *Writer) path(claim types.UID) string {
	return filepath.Join(w.dir, w.prefix+string(claim)+".json")
}

// Write replaces the claim's spec with devices. It validates the spec with
// the CDI library first. With no devices, any spec of the claim is removed.
func (w *Writer) Write(claim types.UID, devices []Device) error {
	if len(devices) == 0 {
		return w.Remove(claim)
	}
	spec := &cdispec.Spec{Kind: w.Kind()}
	for _, d := range devices {
		spec.Devices = append(spec.Devices, cdispec.Device{Name: deviceName(claim, d.Name), ContainerEdits: d.Edits})
	}
	version, err := cdiapi.MinimumRequiredVersion(spec)
	if err != nil {
		return fmt.Errorf("write CDI spec of claim %s: %w", claim, err)
	}
	spec.Version = version
	for _, d := range spec.Devices {
		if err := parser.ValidateDeviceName(d.Name); err != nil {
			return fmt.Errorf("write CDI spec of claim %s: device %q: %w", claim, d.Name, err)
		}
		edits := d.ContainerEdits
		if err := (&cdiapi.ContainerEdits{ContainerEdits: &edits}).Validate(); err != nil {
			return fmt.Errorf("write CDI spec of claim %s: device %q: %w", claim, d.Name, err)
		}
	}
	data, err := json.Marshal(spec)
	if err != nil {
		return fmt.Errorf("write CDI spec of claim %s: %w", claim, err)
	}
	tmp := filepath.Join(w.dir, fmt.Sprintf(".%s-%d-%d.tmp", w.prefix, os.Getpid(), w.seq.Add(1)))
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return fmt.Errorf("write CDI spec of claim %s: %w", claim, err)
	}
	if err := os.Rename(tmp, w.path(claim)); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("write CDI spec of claim %s: %w", claim, err)
	}
	return nil
}

// Exists reports whether the claim has a spec.
func (w *Writer) Exists(claim types.UID) bool {
	_, err := os.Stat(w.path(claim))
	return err == nil
}

// Remove deletes the claim's spec; a missing spec is not an error.
func (w *Writer) Remove(claim types.UID) error {
	if err := os.Remove(w.path(claim)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove CDI spec of claim %s: %w", claim, err)
	}
	return nil
}

// Claims lists the claims that have a spec written by this writer's
// vendor. Leftover temporary files are removed.
func (w *Writer) Claims() ([]types.UID, error) {
	entries, err := os.ReadDir(w.dir)
	if err != nil {
		return nil, fmt.Errorf("list CDI specs: %w", err)
	}
	var out []types.UID
	for _, e := range entries {
		n := e.Name()
		if strings.HasPrefix(n, "."+w.prefix) && strings.HasSuffix(n, ".tmp") {
			_ = os.Remove(filepath.Join(w.dir, n))
			continue
		}
		if !strings.HasPrefix(n, w.prefix) || !strings.HasSuffix(n, ".json") {
			continue
		}
		out = append(out, types.UID(strings.TrimSuffix(strings.TrimPrefix(n, w.prefix), ".json")))
	}
	return out, nil
}
