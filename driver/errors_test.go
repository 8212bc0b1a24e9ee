package driver_test

import (
	"errors"
	"fmt"
	"testing"

	. "github.com/drakit/drakit/driver"
)

// TestClaimErrorReason: the runtime's per-claim errors carry their reason,
// reachable with errors.As, and a vendor's ClaimError sets the reason it
// is counted under.
func TestClaimErrorReason(t *testing.T) {
	e := newEnv(t)
	ctx := ctxFor(t)
	reasonOf := func(err error) string {
		var ce *ClaimError
		if !errors.As(err, &ce) {
			t.Fatalf("error %v is no ClaimError", err)
		}
		return ce.Reason()
	}

	e.eng.SetPublished(func(pool, dev string) bool { return dev == "dev-0" })
	r := e.eng.Prepare(ctx, testClaim("c-ghost", alloc{request: "r", device: "ghost"}))
	if got := reasonOf(r.Err); got != ReasonAllocation {
		t.Errorf("reason of an unpublished device = %q, want %q", got, ReasonAllocation)
	}

	e.eng.SetPublished(func(pool, dev string) bool { return true })
	e.hw.FailPrepare = func(AllocatedDevice) error {
		return NewClaimError(ReasonConfig, errors.New("mode \"turbo\" is not supported"))
	}
	r = e.eng.Prepare(ctx, testClaim("c-config", alloc{request: "r", device: "dev-1"}))
	if got := reasonOf(r.Err); got != ReasonConfig {
		t.Errorf("reason of a vendor's config error = %q, want %q", got, ReasonConfig)
	}
	if n := e.eng.ErrorCount("prepare", ReasonConfig); n != 1 {
		t.Errorf("errors_total{prepare,%s} = %v, want 1", ReasonConfig, n)
	}
}

// A program that drives prepare itself (a test harness, a tool) tells the
// runtime's refusals apart by their reason.
func ExampleClaimError() {
	// An error as the runtime returns it for a claim, wrapped by a caller.
	err := fmt.Errorf("prepare claim default/train: %w",
		NewClaimError(ReasonGuard, fmt.Errorf("device node-a/gpu-0: %w", ErrDeviceInUse)))

	var ce *ClaimError
	if errors.As(err, &ce) {
		fmt.Println("reason:", ce.Reason())
	}
	fmt.Println("in use:", errors.Is(err, ErrDeviceInUse))
	// Output:
	// reason: DeviceInUse
	// in use: true
}
