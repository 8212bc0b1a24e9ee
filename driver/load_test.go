package driver_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

	"github.com/drakit/drakit/device"
	"github.com/drakit/drakit/driver/drivertest"
)

// TestConcurrentPrepare prepares many claims at once through the real gRPC
// socket (1,000; fewer under the race detector), then unprepares them.
func TestConcurrentPrepare(t *testing.T) {
	c := sharedCluster(t)
	n := 1000
	if raceEnabled {
		n = 100
	}
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.Verbosity(0)))
	ctx, cancel := context.WithTimeout(klog.NewContext(context.Background(), logger), 5*time.Minute)
	defer cancel()
	ns := newNamespace(ctx, t, c)
	d := newDirs(t)
	hw := newHW(t, d)
	// The claims' devices are published: the driver refuses others.
	inv := &device.Inventory{Driver: testDriver, Pools: []device.Pool{{Name: testNode}}}
	for i := range n {
		inv.Pools[0].Devices = append(inv.Pools[0].Devices, device.New(fmt.Sprintf("load-%d", i)))
	}
	startDriver(ctx, t, c, d, device.StaticDiscoverer{Inv: inv}, hw)

	claims := make([]*resourceapi.ResourceClaim, n)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for i := range n {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			// Distinct devices per claim: the guard only lets distinct
			// devices be prepared at the same time.
			cl, err := drivertest.CreateAllocatedClaim(ctx, c.Client, drivertest.ClaimSpec{Namespace: ns, Name: fmt.Sprintf("c-%d", i), Driver: testDriver,
				Devices: []drivertest.Device{{Pool: testNode, Device: fmt.Sprintf("load-%d", i)}}})
			if err != nil {
				t.Error(err)
				return
			}
			claims[i] = cl
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	k, err := drivertest.Dial(d.draSocket())
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	var failures atomic.Int64
	run := func(op func(*resourceapi.ResourceClaim) error) {
		var wg sync.WaitGroup
		for _, cl := range claims {
			wg.Go(func() {
				if err := op(cl); err != nil {
					if failures.Add(1) <= 5 {
						t.Error(err)
					}
				}
			})
		}
		wg.Wait()
	}
	run(func(cl *resourceapi.ResourceClaim) error { _, err := k.Prepare(ctx, cl); return err })
	if failures.Load() > 0 {
		t.Fatalf("%d of %d concurrent prepares failed", failures.Load(), n)
	}
	holders, err := hw.Holders()
	if err != nil {
		t.Fatal(err)
	}
	if len(holders) != n {
		t.Errorf("%d devices configured, want %d", len(holders), n)
	}
	if got := d.specCount(t); got != n {
		t.Errorf("%d CDI specs, want %d", got, n)
	}
	run(func(cl *resourceapi.ResourceClaim) error { return k.Unprepare(ctx, cl) })
	if failures.Load() > 0 {
		t.Fatalf("%d of %d concurrent unprepares failed", failures.Load(), n)
	}
	holders, _ = hw.Holders()
	if len(holders) != 0 || d.specCount(t) != 0 {
		t.Errorf("after unprepare: %d devices configured, %d CDI specs", len(holders), d.specCount(t))
	}
	if v := hw.Violations(); len(v) > 0 {
		t.Errorf("hardware rules broken: %v", v)
	}
}
