package cdi

import (
	"context"
	"errors"

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

// WithoutFsync skips fsync of files and the folder when writing (for tests
// on slow disks only: a crash can then leave an empty spec file).
func WithoutFsync() Option {
	return func(o *options) error { o.fsync = false; return nil }
}

// NewWriter returns a Writer for specs of kind "<vendor>/<class>" in dir
// (the folder the container runtime reads, typically /var/run/cdi). vendor
// is usually the driver name ("gpu.example.com"), class the kind of device
// ("gpu"). Both must be valid CDI names: a letter first, then letters,
// digits, '_', '-' or '.', ending with a letter or digit. dir must be an
// absolute path; it is created on the first write if missing.
func NewWriter(dir, vendor, class string, opts ...Option) (*Writer, error) {
	return newWriter(dir, vendor, class, opts...)
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
	return w.specPath(claimUID)
}

// Write validates the claim's spec (every problem, with the field named),
// writes it atomically (a temporary file in the same folder, fsync,
// rename, fsync of the folder) replacing an earlier spec of the same
// claim, and returns the qualified CDI device IDs in the order of
// claim.Devices. Common edits go into the spec's top-level edits, which a
// runtime applies once per container that gets any device of the claim.
// A claim with no devices is an error: it would yield no IDs.
func (w *Writer) Write(ctx context.Context, claim Claim) ([]string, error) {
	return w.write(ctx, claim)
}

// Remove deletes the spec file of a claim. A missing file is not an error
// (Remove is idempotent).
func (w *Writer) Remove(ctx context.Context, claimUID types.UID) error {
	return w.remove(ctx, claimUID)
}

// Claims returns the UIDs of the claims that have a spec file of this
// Writer's vendor and class in the folder, sorted.
func (w *Writer) Claims(ctx context.Context) ([]types.UID, error) {
	return w.claims(ctx)
}

// GC removes the spec files of this Writer's vendor and class whose claim
// is not in live, and temporary files of crashed writes (older than a
// minute, so that writes in progress are not disturbed). live must hold
// every claim that is prepared or being prepared.
// Files of other vendors or classes and files it cannot parse as its own
// are left alone. It returns the UIDs whose specs it removed, sorted.
func (w *Writer) GC(ctx context.Context, live map[types.UID]bool) ([]types.UID, error) {
	return w.gc(ctx, live)
}
