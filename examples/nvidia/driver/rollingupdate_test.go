package driver

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
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
		d, err := New(
			f.sim,
			"node-1",
			append([]Option{WithStateDir(state), f.dynamicGPUs(t)}, opts...)...)
		if err == nil {
			t.Cleanup(func() { _ = d.Close() })
		}
		return d, err
	}
	if _, err := open(WithRollingUpdate("gpus/nvidia-dra-driver")); err != nil {
		t.Fatalf("the old pod: %v", err)
	}
	if _, err := open(); !errors.Is(err, lifecycle.ErrStateInUse) {
		t.Fatalf("a second process without WithRollingUpdate: %v, want ErrStateInUse", err)
	}
	if _, err := open(WithRollingUpdate("gpus/nvidia-dra-driver")); err != nil {
		t.Fatalf("the surge pod of a rolling update: %v", err)
	}
	if _, err := open(WithRollingUpdate("")); err == nil {
		t.Error("a rolling update without an owner was accepted")
	}
}

// TestSecondReleaseIsRefused: a second release of the driver on the node
// (another DaemonSet, so another owner) is refused while the first runs,
// with a message naming the state folder, the first's process and both
// owners; the other pod of the first's rolling update gets in.
func TestSecondReleaseIsRefused(t *testing.T) {
	f := newFixture(t)
	state := filepath.Join(f.dir, "shared")
	f.dynamicGPUs(t)
	first := holdState(t, holdJob{Sim: f.state, State: state, Dynamic: f.dynamic,
		Owner: "gpus/release-a"})
	open := func(owner string) (*Driver, error) {
		return New(f.sim, "node-1", WithStateDir(state), WithDynamicGPUs(f.dynamic...),
			WithRollingUpdate(owner))
	}
	_, err := open("other/release-b")
	if !errors.Is(err, lifecycle.ErrStateInUse) {
		t.Fatalf("a second release beside the first: %v, want ErrStateInUse", err)
	}
	for _, want := range []string{state + " is held by ",
		fmt.Sprintf("process %d (driver %s of gpus/release-a)", first.Process.Pid, DriverName),
		fmt.Sprintf("(driver %s of other/release-b) is not the other instance", DriverName)} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal %q does not name %q", err, want)
		}
	}
	d, err := open("gpus/release-a")
	if err != nil {
		t.Fatalf("the other pod of the first's rolling update: %v", err)
	}
	_ = d.Close()
}
