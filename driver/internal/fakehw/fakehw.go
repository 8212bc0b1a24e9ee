// Package fakehw simulates devices for the driver's tests. Its state lives
// in files, so it survives the death of the driver process as real
// hardware state does, and it enforces the rules real hardware would: a
// device is configured for one claim at a time unless shared, and
// preparing a device (or a share of it) twice for the same claim is a
// violation (the runtime promises never to do it).
package fakehw

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/drakit/drakit/cdi"
	"github.com/drakit/drakit/driver"

	"github.com/drakit/drakit/statefile"
)

// HW is a set of simulated devices with state in a folder.
type HW struct {
	dir string
	mu  sync.Mutex
	// FailPrepare, when it returns an error for a device, makes
	// PrepareDevice fail for it (after leaving nothing behind).
	FailPrepare func(dev driver.AllocatedDevice) error
	// FailUnprepare likewise for UnprepareDevice.
	FailUnprepare func(dev driver.AllocatedDevice) error
	// EnvName is the env var set by the device's edits (default
	// "FAKE_DEVICE").
	EnvName string
	// EnvPerShare names the variable of a share after the share
	// (EnvName_<device>_<share ID>, '-' as '_'), as a driver must for
	// two shares of one device in one claim.
	EnvPerShare bool
	// Metadata makes PrepareDevice return device metadata (the device's
	// name and the claim's UID as attributes).
	Metadata bool
	// ClaimEnv, when set, makes ClaimEdits give the claim's containers
	// the env var ClaimEnv=<claim UID> as claim-wide edits.
	ClaimEnv string
}

// New returns simulated devices with their state in dir.
func New(dir string) (*HW, error) {
	if err := os.MkdirAll(filepath.Join(dir, "devices"), 0o755); err != nil {
		return nil, err
	}
	return &HW{dir: dir, EnvName: "FAKE_DEVICE"}, nil
}

type holder struct {
	Claim types.UID `json:"claim"`
	Admin bool      `json:"admin,omitempty"`
	Share types.UID `json:"share,omitempty"`
}

// compatible is the hardware's sharing rule: admin access goes with
// anything, distinct shares of a shareable device go together.
func compatible(a, b holder) bool {
	return a.Admin || b.Admin || (a.Share != "" && b.Share != "" && a.Share != b.Share)
}

func (h *HW) file(pool, dev string) string {
	return filepath.Join(h.dir, "devices", strings.ReplaceAll(pool, "/", "_")+"_"+dev+".json")
}

func (h *HW) read(path string) ([]holder, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []holder
	if err := json.Unmarshal(data, &out); err != nil {
		return nil, fmt.Errorf("fake hardware state %s: %w", path, err)
	}
	return out, nil
}

func (h *HW) write(path string, hs []holder) error {
	if len(hs) == 0 {
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		return nil
	}
	data, _ := json.Marshal(hs)
	return statefile.WriteFile(path, data, statefile.WithMode(0o644))
}

func (h *HW) violation(msg string) {
	f, err := os.OpenFile(filepath.Join(h.dir, "violations"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return
	}
	defer f.Close()
	_, _ = f.WriteString(msg + "\n")
}

// Violations returns every rule the runtime broke, one line each.
func (h *HW) Violations() []string {
	data, err := os.ReadFile(filepath.Join(h.dir, "violations"))
	if err != nil {
		return nil
	}
	return strings.Fields(strings.ReplaceAll(string(data), " ", "_"))
}

// Holders returns which claims each device is configured for
// ("pool/device" -> claim UIDs, sorted).
func (h *HW) Holders() (map[string][]types.UID, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	entries, err := os.ReadDir(filepath.Join(h.dir, "devices"))
	if err != nil {
		return nil, err
	}
	out := map[string][]types.UID{}
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".json") {
			continue
		}
		hs, err := h.read(filepath.Join(h.dir, "devices", e.Name()))
		if err != nil {
			return nil, err
		}
		for _, x := range hs {
			out[strings.TrimSuffix(e.Name(), ".json")] = append(out[strings.TrimSuffix(e.Name(), ".json")], x.Claim)
		}
	}
	for k := range out {
		slices.Sort(out[k])
	}
	return out, nil
}

// PrepareDevice configures the device for the claim.
func (h *HW) PrepareDevice(_ context.Context, claim driver.Claim, dev driver.AllocatedDevice) (driver.PreparedDevice, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.FailPrepare != nil {
		if err := h.FailPrepare(dev); err != nil {
			return driver.PreparedDevice{}, err
		}
	}
	path := h.file(dev.Pool, dev.Device)
	hs, err := h.read(path)
	if err != nil {
		return driver.PreparedDevice{}, err
	}
	me := holder{Claim: claim.UID, Admin: dev.AdminAccess}
	if dev.ShareID != nil {
		me.Share = *dev.ShareID
	}
	for _, x := range hs {
		if x.Claim == claim.UID && x.Share == me.Share {
			h.violation(fmt.Sprintf("prepared-twice:%s:%s", dev.ID(), claim.UID))
			return driver.PreparedDevice{}, fmt.Errorf("device %s already prepared for claim %s", dev.ID(), claim.UID)
		}
		if !compatible(me, x) {
			h.violation(fmt.Sprintf("used-by-two-claims:%s:%s:%s", dev.ID(), x.Claim, claim.UID))
			return driver.PreparedDevice{}, fmt.Errorf("device %s busy with claim %s", dev.ID(), x.Claim)
		}
	}
	hs = append(hs, me)
	if err := h.write(path, hs); err != nil {
		return driver.PreparedDevice{}, err
	}
	env := h.EnvName
	if h.EnvPerShare && dev.ShareID != nil {
		env += "_" + strings.ReplaceAll(dev.ShareName(), "-", "_")
	}
	edits := (&cdi.Edits{}).Env(env, dev.Device)
	data, _ := json.Marshal(map[string]string{"configuredFor": string(claim.UID)})
	out := driver.PreparedDevice{Edits: edits, Data: data}
	if h.Metadata {
		name, uid := dev.Device, string(claim.UID)
		out.Metadata = &driver.DeviceMetadata{Attributes: map[string]resourceapi.DeviceAttribute{
			"name": {StringValue: &name}, "claim": {StringValue: &uid},
		}}
	}
	return out, nil
}

// ClaimEdits implements driver.ClaimEditor: nil unless ClaimEnv is set.
func (h *HW) ClaimEdits(_ context.Context, claim driver.Claim, _ []driver.AllocatedDevice) (*cdi.Edits, error) {
	if h.ClaimEnv == "" {
		return nil, nil
	}
	return (&cdi.Edits{}).Env(h.ClaimEnv, string(claim.UID)), nil
}

// UnprepareDevice releases the device from the claim; idempotent.
func (h *HW) UnprepareDevice(_ context.Context, claim driver.ClaimRef, dev driver.AllocatedDevice, _ json.RawMessage) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.FailUnprepare != nil {
		if err := h.FailUnprepare(dev); err != nil {
			return err
		}
	}
	path := h.file(dev.Pool, dev.Device)
	hs, err := h.read(path)
	if err != nil {
		return err
	}
	var share types.UID
	if dev.ShareID != nil {
		share = *dev.ShareID
	}
	hs = slices.DeleteFunc(hs, func(x holder) bool {
		return x.Claim == claim.UID && x.Share == share
	})
	return h.write(path, hs)
}

func (h *HW) claimFile(uid types.UID) string {
	return filepath.Join(h.dir, "claims", string(uid))
}

// PrepareClaim records claim-level setup (like creating partitions).
// Setting up a claim that is already set up is a violation.
func (h *HW) PrepareClaim(_ context.Context, claim driver.Claim, _ []driver.AllocatedDevice) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := os.MkdirAll(filepath.Join(h.dir, "claims"), 0o755); err != nil {
		return err
	}
	if _, err := os.Stat(h.claimFile(claim.UID)); err == nil {
		h.violation(fmt.Sprintf("claim-set-up-twice:%s", claim.UID))
		return fmt.Errorf("claim %s already set up", claim.UID)
	}
	return os.WriteFile(h.claimFile(claim.UID), nil, 0o644)
}

// UnprepareClaim removes the claim-level setup; idempotent.
func (h *HW) UnprepareClaim(_ context.Context, claim driver.ClaimRef, _ []driver.AllocatedDevice) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := os.Remove(h.claimFile(claim.UID)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// Claims lists the claims with claim-level setup, sorted.
func (h *HW) Claims() []types.UID {
	entries, _ := os.ReadDir(filepath.Join(h.dir, "claims"))
	var out []types.UID
	for _, e := range entries {
		out = append(out, types.UID(e.Name()))
	}
	return out
}
