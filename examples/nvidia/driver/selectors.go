package driver

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"k8s.io/klog/v2"

	"github.com/drakit/drakit/statefile"
)

// DynamicGPUsFile is the record, in the state folder, of the GPU that
// each NVML index given to WithDynamicGPUs named when a start first
// resolved it: its UUID and PCI bus ID. Later starts keep that GPU
// dynamic by its UUID, wherever NVML enumerates it now.
const DynamicGPUsFile = "dynamic-gpus.json"

// Reasons of the Warnings New reports (WithWarnings), as Kubernetes
// event reasons.
const (
	// ReasonDynamicGPUMoved: an NVML index given to WithDynamicGPUs names
	// another GPU than the one recorded at the start that first resolved
	// it (a GPU before it fell off the bus and the node rebooted). The
	// recorded GPU stays dynamic; the one at the index now is not made
	// dynamic.
	ReasonDynamicGPUMoved = "DynamicGPUMoved"
	// ReasonDynamicGPUMissing: a dynamic GPU (named by UUID or PCI bus
	// ID, or recorded for an index) is not on the node now; nothing of it
	// is served, the others are.
	ReasonDynamicGPUMissing = "DynamicGPUMissing"
	// ReasonDynamicGPUWithoutMIG: a GPU given to WithDynamicGPUs has no
	// MIG mode; it is served as a full GPU.
	ReasonDynamicGPUWithoutMIG = "DynamicGPUWithoutMIG"
)

// Warning is a problem New found with the driver's configuration on this
// node and confined to one GPU: the driver serves the other GPUs.
type Warning struct {
	// Reason is one of the Reason* constants.
	Reason string
	// GPU is the UUID of the GPU concerned: the GPU that stays out of
	// the driver's hands, or the dynamic GPU that is missing.
	GPU string
	// Message says what happened and what to do.
	Message string
}

// WithWarnings makes New hand each Warning it finds to report (drivercmd
// records them as Warning events on the node), besides logging it and
// keeping it for Driver.Warnings.
func WithWarnings(report func(Warning)) Option {
	return func(o *options) error {
		if report == nil {
			return errors.New("warnings: report is nil")
		}
		o.warn = report
		return nil
	}
}

// Warnings returns the Warnings New found, in the order of the
// WithDynamicGPUs selectors.
func (d *Driver) Warnings() []Warning { return slices.Clone(d.warnings) }

// selectorRecord is what an index selector named at the start that first
// resolved it.
type selectorRecord struct {
	UUID     string `json:"uuid"`
	PCIBusID string `json:"pciBusID,omitempty"`
}

type selectorsDoc struct {
	// Indexes maps an NVML index given to WithDynamicGPUs to the GPU it
	// named then.
	Indexes map[string]selectorRecord `json:"indexes"`
}

// selectorKind tells a WithDynamicGPUs selector's form.
func selectorKind(s string) (kind string, norm string, err error) {
	switch {
	case strings.HasPrefix(s, "GPU-"):
		return "uuid", s, nil
	case strings.Contains(s, ":"):
		id, ok := normalizeBusID(s)
		if !ok {
			return "", "", fmt.Errorf(
				"dynamic MIG GPU %q: not a PCI bus ID ([domain:]bus:device.function)",
				s,
			)
		}
		return "pci", id, nil
	}
	if n, err := strconv.Atoi(s); err == nil && n >= 0 {
		return "index", strconv.Itoa(n), nil
	}
	return "", "", fmt.Errorf(
		"dynamic MIG GPU %q: want a GPU UUID (GPU-...), a PCI bus ID (0000:1b:00.0) or an NVML "+
			"index",
		s,
	)
}

// normalizeBusID writes a PCI bus ID as nvml.GPU.PCIBusID has it: lower
// case, a domain of four digits ("00000000:1B:00.0", NVML's form, and
// "1b:00.0" are "0000:1b:00.0").
func normalizeBusID(s string) (string, bool) {
	s = strings.ToLower(strings.TrimSpace(s))
	parts := strings.Split(s, ":")
	switch len(parts) {
	case 2:
		parts = append([]string{"0000"}, parts...)
	case 3:
		if len(parts[0]) > 4 {
			parts[0] = parts[0][len(parts[0])-4:]
		}
	default:
		return "", false
	}
	dev, fn, ok := strings.Cut(parts[2], ".")
	for _, p := range []string{parts[0], parts[1], dev, fn} {
		if !ok || p == "" {
			return "", false
		}
		if _, err := strconv.ParseUint(p, 16, 32); err != nil {
			return "", false
		}
	}
	return fmt.Sprintf("%04s:%02s:%02s.%s", parts[0], parts[1], dev, fn), true
}

// resolveDynamic resolves the WithDynamicGPUs selectors to the UUIDs of
// the dynamic GPUs, against the record of what each index named at the
// start that first resolved it, and returns the record to keep. A
// problem confined to one GPU is a Warning (d.warn), not an error: a
// selector is an error only when it has no form of a GPU's name.
func (d *Driver) resolveDynamic() (uuids []string, keep selectorsDoc, err error) {
	rec, err := readSelectors(d.o.stateDir)
	if err != nil {
		klog.Background().
			Error(err, "Ignoring the record of the dynamic GPUs' indexes: each index names the "+
				"GPU it has now", "path", filepath.Join(d.o.stateDir, DynamicGPUsFile))
		rec = selectorsDoc{}
	}
	keep = selectorsDoc{Indexes: map[string]selectorRecord{}}
	add := func(u string) {
		if !slices.Contains(uuids, u) {
			uuids = append(uuids, u)
		}
	}
	for _, s := range d.o.dynamicGPUs {
		kind, norm, err := selectorKind(s)
		if err != nil {
			return nil, keep, err
		}
		var g gpuInfo
		var found bool
		switch kind {
		case "uuid":
			if g, found = d.gpuByUUID(norm); !found {
				d.warn(
					Warning{
						Reason: ReasonDynamicGPUMissing,
						GPU:    norm,
						Message: fmt.Sprintf(
							"dynamic MIG GPU %s is not on this node now (fell off the bus?): "+
								"nothing of it is served; it is dynamic again when it is back",
							norm,
						),
					},
				)
				add(norm)
				continue
			}
		case "pci":
			if g, found = d.gpuByBusID(norm); !found {
				d.warn(
					Warning{
						Reason: ReasonDynamicGPUMissing,
						Message: fmt.Sprintf(
							"dynamic MIG GPU %q: no GPU at PCI bus ID %s on this node now (fell "+
								"off the bus?)",
							s,
							norm,
						),
					},
				)
				continue
			}
		case "index":
			idx, _ := strconv.Atoi(norm)
			now, atIndex := d.gpuByIndex(idx)
			r, recorded := rec.Indexes[norm]
			if !recorded {
				if !atIndex {
					d.warn(
						Warning{
							Reason: ReasonDynamicGPUMissing,
							Message: fmt.Sprintf(
								"dynamic MIG GPU %q: NVML has no GPU %d on this node; name "+
									"dynamic GPUs by UUID or PCI bus ID",
								s,
								idx,
							),
						},
					)
					continue
				}
				g, found = now, true
				r = selectorRecord{UUID: g.UUID, PCIBusID: g.PCIBusID}
			}
			keep.Indexes[norm] = r
			was, there := d.gpuByUUID(r.UUID)
			switch {
			case recorded && !there:
				msg := fmt.Sprintf(
					"dynamic MIG GPU %q named %s (at %s) at the driver's first start, which is "+
						"not on this node now (fell off the bus?): nothing of it is served; it "+
						"is dynamic again when it is back",
					s,
					r.UUID,
					r.PCIBusID,
				)
				if atIndex {
					msg += fmt.Sprintf(
						". NVML index %d is now %s (at %s), which is not made dynamic",
						idx,
						now.UUID,
						now.PCIBusID,
					)
				}
				d.warn(
					Warning{
						Reason:  ReasonDynamicGPUMissing,
						GPU:     r.UUID,
						Message: msg + ". Name dynamic GPUs by UUID or PCI bus ID",
					},
				)
				add(r.UUID)
				continue
			case recorded && (!atIndex || now.UUID != r.UUID):
				msg := fmt.Sprintf(
					"dynamic MIG GPU %q named %s (at %s) at the driver's first start; it is "+
						"NVML index %d now, and stays dynamic",
					s,
					r.UUID,
					r.PCIBusID,
					was.Index,
				)
				gpu := r.UUID
				if atIndex {
					msg += fmt.Sprintf(
						". Index %d is now %s (at %s), which is not made dynamic for it",
						idx,
						now.UUID,
						now.PCIBusID,
					)
					gpu = now.UUID
				}
				d.warn(
					Warning{
						Reason:  ReasonDynamicGPUMoved,
						GPU:     gpu,
						Message: msg + ". Name dynamic GPUs by UUID or PCI bus ID",
					},
				)
			}
			g, found = was, true
		}
		if g.product == nil && g.broken == nil {
			d.warn(
				Warning{
					Reason: ReasonDynamicGPUWithoutMIG,
					GPU:    g.UUID,
					Message: fmt.Sprintf(
						"dynamic MIG GPU %q (GPU %d, %s) has no MIG mode: it is served as a "+
							"full GPU",
						s,
						g.Index,
						g.UUID,
					),
				},
			)
			delete(keep.Indexes, norm)
			continue
		}
		add(g.UUID)
	}
	return uuids, keep, nil
}

// warn logs w, keeps it for Warnings and hands it to WithWarnings'
// report.
func (d *Driver) warn(w Warning) {
	klog.Background().Info("Warning: "+w.Message, "reason", w.Reason, "gpu", w.GPU)
	d.warnings = append(d.warnings, w)
	if d.o.warn != nil {
		d.o.warn(w)
	}
}

// gpuByIndex finds a GPU by its NVML index now.
func (d *Driver) gpuByIndex(i int) (gpuInfo, bool) {
	for _, g := range d.hw() {
		if g.Index == i {
			return g, true
		}
	}
	return gpuInfo{}, false
}

// gpuByBusID finds a GPU by its PCI bus ID (normalized).
func (d *Driver) gpuByBusID(id string) (gpuInfo, bool) {
	for _, g := range d.hw() {
		if n, ok := normalizeBusID(g.PCIBusID); ok && n == id {
			return g, true
		}
	}
	return gpuInfo{}, false
}

// readSelectors reads the record of the index selectors in dir; a
// missing record is empty.
func readSelectors(dir string) (selectorsDoc, error) {
	var doc selectorsDoc
	b, err := os.ReadFile(filepath.Join(dir, DynamicGPUsFile))
	switch {
	case errors.Is(err, os.ErrNotExist):
		return doc, nil
	case err != nil:
		return doc, fmt.Errorf("read the record of the dynamic GPUs: %w", err)
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		return doc, fmt.Errorf(
			"decode the record of the dynamic GPUs %s: %w",
			filepath.Join(dir, DynamicGPUsFile),
			err,
		)
	}
	for s, r := range doc.Indexes {
		if !strings.HasPrefix(r.UUID, "GPU-") {
			return selectorsDoc{}, fmt.Errorf(
				"decode the record of the dynamic GPUs %s: index %s names %q, not a GPU UUID",
				filepath.Join(dir, DynamicGPUsFile),
				s,
				r.UUID,
			)
		}
	}
	return doc, nil
}

// writeSelectors records doc in dir (removing the record when it is
// empty); the state folder's lock must be held.
func writeSelectors(dir string, doc selectorsDoc) error {
	path := filepath.Join(dir, DynamicGPUsFile)
	if len(doc.Indexes) == 0 {
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("remove the record of the dynamic GPUs: %w", err)
		}
		return nil
	}
	if old, err := readSelectors(dir); err == nil && equalSelectors(old, doc) {
		return nil
	}
	b, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return fmt.Errorf("record the dynamic GPUs: %w", err)
	}
	if err := statefile.WriteFile(path, append(b, '\n')); err != nil {
		return fmt.Errorf("record the dynamic GPUs: %w", err)
	}
	return nil
}

func equalSelectors(a, b selectorsDoc) bool {
	if len(a.Indexes) != len(b.Indexes) {
		return false
	}
	for k, v := range a.Indexes {
		if b.Indexes[k] != v {
			return false
		}
	}
	return true
}
