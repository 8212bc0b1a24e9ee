package nvmlsim

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/drakit/drakit/examples/nvidia/nvml"
	"github.com/drakit/drakit/mig"
)

// TestSimFaultsAreSharedAndFireOnce: a fault armed through one simulator
// hits the next matching call of another sharing the state file, once,
// and the failed call changes nothing.
func TestSimFaultsAreSharedAndFireOnce(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.json")
	s1, err := Open(path, WithServer("dgx-a100-80gb"))
	if err != nil {
		t.Fatal(err)
	}
	s2, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := s1.InjectFault(
		Fault{Op: FaultCreateGPUInstance, GPU: -1, Code: nvml.ErrorInsufficientResources},
	); err != nil {
		t.Fatal(err)
	}
	if err := s1.InjectFault(
		Fault{Op: FaultDestroyGPUInstance, GPU: 2, Code: nvml.ErrorGPUIsLost},
	); err != nil {
		t.Fatal(err)
	}
	at := mig.Placement{Start: 0, Size: 8}
	if _, err := s2.CreateGPUInstance(2, 0, at); !errors.Is(err, nvml.ErrInsufficientResources) {
		t.Fatalf("create with an armed fault: %v", err)
	}
	if gis, _ := s1.GPUInstances(2); len(gis) != 0 {
		t.Fatalf("failed create left %+v", gis)
	}
	gi, err := s2.CreateGPUInstance(2, 0, at)
	if err != nil {
		t.Fatalf("the fault fires once: %v", err)
	}
	if err := s2.DestroyGPUInstance(2, gi.ID); nvml.CodeOf(err) != nvml.ErrorGPUIsLost {
		t.Fatalf("destroy with an armed fault: %v", err)
	}
	if gis, _ := s1.GPUInstances(2); len(gis) != 1 {
		t.Fatalf("failed destroy removed the instance: %+v", gis)
	}
	if err := s2.DestroyGPUInstance(2, gi.ID); err != nil {
		t.Fatal(err)
	}
	if err := s1.InjectFault(Fault{Op: "reset"}); err == nil {
		t.Fatal("unknown fault op accepted")
	}
}

// TestSimXIDReachesEveryWatcher: an XID raised through one simulator
// reaches the health stream of another watching the same state; events
// from before the watch are not replayed.
func TestSimXIDReachesEveryWatcher(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.json")
	raiser, err := Open(path, WithServer("dgx-b200"))
	if err != nil {
		t.Fatal(err)
	}
	if err := raiser.RaiseXID(1, 48, -1, -1); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var streams []<-chan nvml.HealthEvent
	for range 2 {
		w, err := Open(path, WithPollInterval(5*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		ch, err := w.WatchHealth(ctx)
		if err != nil {
			t.Fatal(err)
		}
		streams = append(streams, ch)
	}
	if err := raiser.RaiseXID(3, 79, -1, -1); err != nil {
		t.Fatal(err)
	}
	if err := raiser.RaiseXID(4, 94, 2, 0); err != nil {
		t.Fatal(err)
	}
	gpus, _ := raiser.GPUs()
	for i, ch := range streams {
		for _, want := range []nvml.HealthEvent{
			{GPU: 3, XID: 79, GPUInstance: -1, ComputeInstance: -1},
			{GPU: 4, XID: 94, GPUInstance: 2, ComputeInstance: 0},
		} {
			select {
			case got := <-ch:
				if got.GPU != want.GPU || got.XID != want.XID ||
					got.GPUInstance != want.GPUInstance ||
					got.ComputeInstance != want.ComputeInstance ||
					got.UUID != gpus[want.GPU].UUID {
					t.Fatalf("watcher %d: got %s, want %s", i, got, want)
				}
			case <-time.After(30 * time.Second):
				t.Fatalf("watcher %d: no event %s", i, want)
			}
		}
	}
	cancel()
	for i, ch := range streams {
		for range ch {
		}
		t.Logf("watcher %d: stream closed after cancel", i)
	}
}
