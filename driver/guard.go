package driver

import (
	"fmt"

	"k8s.io/apimachinery/pkg/types"

	"github.com/drakit/drakit/driver/internal/checkpoint"
)

// The device guard: which claims hold each device, so that a device
// prepared for one claim is not handed to another unless admin access or
// distinct shares allow both. Its state lives in the engine (holders),
// guarded by the engine's lock.

// deviceKey names a published device.
type deviceKey struct{ pool, device string }

// holder is how a claim holds a device.
type holder struct {
	admin bool
	share *types.UID
}

// compatible says whether two allocations of one device may be prepared at
// the same time.
func compatible(a, b holder) bool {
	if a.admin || b.admin {
		return true
	}
	return a.share != nil && b.share != nil && *a.share != *b.share
}

func holderOf(d checkpoint.Device) holder { return holder{admin: d.AdminAccess, share: d.ShareID} }

// reserveLocked checks the guard for rec's devices and reserves them. A
// device allocated twice within the claim is refused too unless the two
// allocations may go together (distinct shares, admin access): the
// scheduler never allocates that, a forged or corrupted allocation may.
func (e *engine) reserveLocked(rec *checkpoint.Record) error {
	for i, d := range rec.Devices {
		for _, o := range rec.Devices[:i] {
			if o.Pool == d.Pool && o.Device == d.Device && !compatible(holderOf(d), holderOf(o)) {
				return failed(ReasonAllocation, "device %s/%s is allocated to requests %q and %q "+
					"of claim %s without distinct share IDs: the allocation is invalid",
					d.Pool, d.Device, o.Request, d.Request, refOf(rec))
			}
		}
	}
	for _, d := range rec.Devices {
		k := deviceKey{d.Pool, d.Device}
		for other, h := range e.holders[k] {
			if other == rec.ClaimUID {
				continue
			}
			if !compatible(holderOf(d), h) {
				err := fmt.Errorf("device %s/%s (request %q): %w %s",
					d.Pool, d.Device, d.Request, ErrDeviceInUse, other)
				if h.share != nil && d.ShareID != nil {
					err = fmt.Errorf("%w with the same share ID %s", err, *d.ShareID)
				}
				return &ClaimError{reason: ReasonGuard, err: err}
			}
		}
	}
	for _, d := range rec.Devices {
		k := deviceKey{d.Pool, d.Device}
		if e.holders[k] == nil {
			e.holders[k] = map[types.UID]holder{}
		}
		e.holders[k][rec.ClaimUID] = holderOf(d)
	}
	return nil
}

// releaseLocked releases rec's devices.
func (e *engine) releaseLocked(rec *checkpoint.Record) {
	for _, d := range rec.Devices {
		k := deviceKey{d.Pool, d.Device}
		delete(e.holders[k], rec.ClaimUID)
		if len(e.holders[k]) == 0 {
			delete(e.holders, k)
		}
	}
}
