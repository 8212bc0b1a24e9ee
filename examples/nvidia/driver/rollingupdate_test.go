package driver

import (
	"errors"
	"path/filepath"
	"testing"

	"github.com/drakit/drakit/partition/lifecycle"
)

// TestRollingUpdateSharesState: the two pods of a surge update run on
// one state folder when both say so (WithRollingUpdate); without it the
// second is refused (the new pod of a helm upgrade crashed at start with
// "partition state folder is in use").
func TestRollingUpdateSharesState(t *testing.T) {
	f := newFixture(t)
	state := filepath.Join(f.dir, "shared")
	open := func(opts ...Option) (*Driver, error) {
		d, err := New(f.sim, "node-1", append([]Option{WithStateDir(state), f.dynamicGPUs(t)}, opts...)...)
		if err == nil {
			t.Cleanup(func() { _ = d.Close() })
		}
		return d, err
	}
	if _, err := open(WithRollingUpdate()); err != nil {
		t.Fatalf("the old pod: %v", err)
	}
	if _, err := open(); !errors.Is(err, lifecycle.ErrStateInUse) {
		t.Fatalf("a second process without WithRollingUpdate: %v, want ErrStateInUse", err)
	}
	if _, err := open(WithRollingUpdate()); err != nil {
		t.Fatalf("the surge pod of a rolling update: %v", err)
	}
}
