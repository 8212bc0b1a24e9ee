package cdi

import (
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// Claim is what one prepared ResourceClaim needs in containers: edits for
// every container that uses the claim, and per allocated device.
type Claim struct {
	// UID is the claim's UID: 1 to 64 characters, each an ASCII letter,
	// digit or '-' (Kubernetes UIDs are lowercase RFC 4122 UUIDs). It is
	// the only part of the claim that goes into file and device names.
	UID types.UID
	// Namespace and Name are recorded in the spec's annotations for
	// people reading the file; they are never part of a name or path.
	Namespace, Name string
	// Common edits are applied once per container that uses the claim,
	// whichever of its devices the container gets.
	Common *Edits
	// Devices are the claim's devices in a stable order.
	Devices []Device
}

// Device is one device of a claim.
type Device struct {
	// Name identifies the device within the claim. Any non-empty string
	// of at most 128 bytes ("gpu-0", "pool-a/gpu-0"); it is encoded with
	// [EncodeName] into the CDI device name, so it never needs escaping
	// by the caller. Names are unique within a claim.
	Name string
	// Edits for containers that get this device. Nil or empty edits are
	// allowed: the CDI library rejects a device without edits, so such a
	// device gets the environment variable [EmptyDeviceEnv]=<Name>.
	Edits *Edits
}

// EmptyDeviceEnv is the environment variable set for a [Device] that has
// no edits of its own.
const EmptyDeviceEnv = "DRAKIT_CDI_DEVICE"

// Writer writes the transient CDI specs of one driver's prepared claims
// into one folder, one file per claim:
// "<vendor>+<class>+<claim UID>.json" ('+' occurs in none of the parts,
// so two writers or two claims never share a file). Its methods are safe for concurrent
// use for different claims; callers serialize calls for the same claim.
type Writer struct {
	dir           string
	vendor, class string
	opts          options
}

// Option configures [NewWriter].
type Option func(*options) error

type options struct {
	fileMode uint32
	fsync    bool
}

// WithFileMode sets the permission bits of spec files (default 0644; the
// container runtime must be able to read them).
func WithFileMode(mode uint32) Option {
	return func(o *options) error {
		if mode&^0o777 != 0 {
			return errors.New("file mode: only permission bits (0o777) are allowed")
		}
		o.fileMode = mode
		return nil
	}
}

// WithoutFsync skips fsync of files and the folder when writing and
// removing. A process crash still leaves the old or the new spec (the
// rename is atomic either way); a power loss or kernel crash can leave a
// spec missing, empty or torn, or a removed spec back. Use it when the
// program recovers from that itself: drakit's driver runtime does, and
// uses it (at start it undoes every prepared claim whose spec does not
// parse, and removes the specs of claims it does not hold), and in tests.
// Without that recovery, keep the default.
func WithoutFsync() Option {
	return func(o *options) error { o.fsync = false; return nil }
}

const (
	specExt = ".json"
	tmpExt  = ".tmp"
	// claimAnnotation records namespace/name of the claim in a spec.
	claimAnnotation = "drakit.io/claim"
	// staleTempAge is how old a temporary file must be for GC to take it
	// for the leftover of a crashed write.
	staleTempAge = time.Minute
)

// NewWriter returns a Writer for specs of kind "<vendor>/<class>" in dir
// (the folder the container runtime reads, typically /var/run/cdi). vendor
// is usually the driver name ("gpu.example.com"), class the kind of device
// ("gpu"). Both must be valid CDI names: a letter first, then letters,
// digits, '_', '-' or '.', ending with a letter or digit. dir must be an
// absolute path; it is created on the first write if missing.
func NewWriter(dir, vendor, class string, opts ...Option) (*Writer, error) {
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

// Dir returns the folder the Writer writes into.
func (w *Writer) Dir() string { return w.dir }

// Kind returns "<vendor>/<class>".
func (w *Writer) Kind() string { return w.vendor + "/" + w.class }

// DeviceName returns the CDI device name of a claim's device:
// "<claim UID>_<EncodeName(device)>". Different (claim UID, device)
// pairs always give different names, and claim UIDs are never reused, so
// a name is never reused either.
func (w *Writer) DeviceName(claimUID types.UID, device string) (string, error) {
	return deviceName(claimUID, device)
}

// QualifiedName returns the fully qualified CDI device ID
// ("<vendor>/<class>=<DeviceName>") that the driver returns to the
// kubelet in NodePrepareResources.
func (w *Writer) QualifiedName(claimUID types.UID, device string) (string, error) {
	n, err := deviceName(claimUID, device)
	if err != nil {
		return "", err
	}
	return w.Kind() + "=" + n, nil
}

// SpecPath returns the path of the spec file of a claim.
func (w *Writer) SpecPath(claimUID types.UID) (string, error) {
	if err := ValidateUID(claimUID); err != nil {
		return "", fmt.Errorf("build spec path: %w", err)
	}
	return filepath.Join(w.dir, w.prefix()+string(claimUID)+specExt), nil
}

// prefix is the start of every spec file name of this writer. '+' occurs
// in no vendor, class or UID, so "<vendor>+<class>+<uid>" is unambiguous:
// the CDI convention "<vendor>-<class>_<id>" is not ("a-b"+"c" and
// "a"+"b-c" collide).
func (w *Writer) prefix() string {
	return w.vendor + "+" + w.class + "+"
}
