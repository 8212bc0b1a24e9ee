package driver

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	apitypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"

	kit "github.com/drakit/drakit/driver"
	"github.com/drakit/drakit/examples/nvidia/nvml"
	"github.com/drakit/drakit/partition/ledger"
)

// A dynamic GPU is offered whole only while no other NVML client holds
// it (dcgm-exporter, a CUDA process of the host): the NVIDIA driver
// refuses its MIG mode change then, and a claim allocated it would wait
// in ContainerCreating on an allocation nothing changes. The driver
// checks (the simulator's clients, NVML's running processes on a GPU):
// the GPU whole is withdrawn while a client holds it, a prepare of it is
// refused naming the processes, and it is offered again at the health
// heartbeat after the client let go. The processes of the claim that
// holds the GPU whole do not withdraw it.
func TestWholeGPUHeldByOtherClients(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, WithRepublishDelay(0))
	if err := f.sim.AttachClient(5, nvml.Process{PID: 4242, Kind: "compute"}); err != nil {
		t.Fatal(err)
	}
	f.d.pollOthers()
	inv, err := f.d.Inventory(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n := names(inv); slices.Contains(n, "gpu-5") || !slices.Contains(n, "gpu-4") ||
		!slices.Contains(n, "gpu-5-1g-18gb-0") {
		t.Fatalf(
			"with a client on GPU 5: devices %v, want gpu-4 whole and GPU 5's MIG devices, not "+
				"gpu-5 whole",
			n,
		)
	}
	// An allocation made before the client came is refused at prepare,
	// naming the processes, and MIG mode is not touched.
	err = f.d.PrepareClaim(ctx, claim("late"), []kit.AllocatedDevice{alloc("gpu-5")})
	if err == nil ||
		!strings.Contains(err.Error(), "other NVML clients hold it (processes 4242 (compute))") {
		t.Fatalf("whole GPU 5 prepared while process 4242 holds it: %v", err)
	}
	if m := migMode(t, f.sim, 5); !m.Current {
		t.Fatalf("MIG mode of GPU 5 after a refused whole prepare: %+v", m)
	}
	// The simulator refuses the mode change as NVML does.
	if _, err := f.sim.SetMigMode(5, false); !errors.Is(err, nvml.ErrInUse) {
		t.Fatalf("SetMigMode with a client: %v, want ErrInUse", err)
	}

	// The client lets go: the heartbeat's poll schedules a republish,
	// and GPU 5 is offered whole again.
	if err := f.sim.DetachClient(5, 4242); err != nil {
		t.Fatal(err)
	}
	select {
	case <-f.d.kick:
	default:
	}
	f.d.pollOthers()
	select {
	case <-f.d.kick:
	case <-time.After(10 * time.Second):
		t.Fatal("no republish after the client let go of GPU 5")
	}
	inv, err = f.d.Inventory(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(names(inv), "gpu-5") {
		t.Fatalf("GPU 5 whole not offered after its client let go: %v", names(inv))
	}
	whole := f.prepared(t, "whole", alloc("gpu-5"))
	if m := migMode(t, f.sim, 5); m.Current {
		t.Fatalf("MIG mode of GPU 5 prepared whole: %+v, want off", m)
	}
	// The claim's own process does not withdraw the GPU it holds.
	if err := f.sim.AttachClient(5, nvml.Process{PID: 7, Kind: "compute"}); err != nil {
		t.Fatal(err)
	}
	f.d.pollOthers()
	inv, err = f.d.Inventory(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(names(inv), "gpu-5") {
		t.Errorf("GPU 5 held whole withdrawn for its claim's own process: %v", names(inv))
	}
	if _, err := f.d.PrepareDevice(ctx, claim("whole"), alloc("gpu-5")); err != nil {
		t.Errorf("the whole claim's device with its process running: %v", err)
	}
	if err := f.sim.DetachClient(5, 7); err != nil {
		t.Fatal(err)
	}
	if err := f.d.UnprepareClaim(ctx, whole.ClaimRef, nil); err != nil {
		t.Fatal(err)
	}
	if m := migMode(t, f.sim, 5); !m.Current {
		t.Errorf("MIG mode of GPU 5 after the whole claim's release: %+v, want on", m)
	}
}

// Whole-GPU claims take the node's static full GPUs before a dynamic GPU
// whole, with the scheduler's own allocator: a ClassGPU request with the
// features kube-scheduler 1.37 runs by default (its allocator walks pools
// by name, and the node's pool sorts before the dynamic GPUs'), for the
// placements publication and the layout; and, with every allocator
// (kube-scheduler's stable one walks pools in any order), a claim that
// asks for migMode "full" first (firstAvailable) and any GPU second.
func TestWholeGPUClaimsPreferStaticFullGPUs(t *testing.T) {
	ctx := context.Background()
	defaults := structured.Features{
		AdminAccess:            true,
		PartitionableDevices:   true,
		PrioritizedList:        true,
		DeviceTaints:           true,
		DeviceBindingAndStatus: true,
		ConsumableCapacity:     true,
	}
	stable := structured.Features{
		AdminAccess:          true,
		PartitionableDevices: true,
		PrioritizedList:      true,
		DeviceTaints:         true,
	}
	full := resourceapi.DeviceSubRequest{
		Name:            "full",
		DeviceClassName: ClassGPU,
		AllocationMode:  resourceapi.DeviceAllocationModeExactCount,
		Count:           1,
		Selectors: []resourceapi.DeviceSelector{
			{
				CEL: &resourceapi.CELDeviceSelector{
					Expression: fmt.Sprintf(
						"device.attributes[%q].%s == %q",
						DriverName,
						AttrMIGMode,
						ModeFull,
					),
				},
			},
		},
	}
	anyGPU := resourceapi.DeviceSubRequest{
		Name:            "any",
		DeviceClassName: ClassGPU,
		AllocationMode:  resourceapi.DeviceAllocationModeExactCount,
		Count:           1,
	}
	plain := resourceapi.DeviceRequest{
		Name: "gpu",
		Exactly: &resourceapi.ExactDeviceRequest{
			DeviceClassName: ClassGPU,
			AllocationMode:  resourceapi.DeviceAllocationModeExactCount,
			Count:           1,
		},
	}
	preferFull := resourceapi.DeviceRequest{
		Name:           "gpu",
		FirstAvailable: []resourceapi.DeviceSubRequest{full, anyGPU},
	}
	for _, tc := range []struct {
		name     string
		opts     []Option
		features structured.Features
		req      resourceapi.DeviceRequest
	}{
		{"placements, default allocator", nil, defaults, plain},
		{
			"layout, default allocator",
			[]Option{WithMIGLayout(ledger.NewMemoryAgent("node-1", nil, LayoutOptions()...))},
			defaults,
			plain,
		},
		{"placements, stable allocator, full first", nil, stable, preferFull},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, tc.opts...)
			inv, err := f.d.Inventory(ctx)
			if err != nil {
				t.Fatal(err)
			}
			rs := inv.ResourceSlices("node-1")
			allocated := sets.New[structured.DeviceID]()
			var got []string
			for i := range 3 {
				state := structured.AllocatedState{
					AllocatedDevices:         allocated.Clone(),
					AllocatedSharedDeviceIDs: sets.New[structured.SharedDeviceID](),
					AggregatedCapacity:       structured.NewConsumedCapacityCollection(),
				}
				al, err := structured.NewAllocator(
					ctx,
					tc.features,
					state,
					classes(DeviceClasses(nil)),
					rs,
					cel.NewCache(64, cel.Features{EnableConsumableCapacity: true}),
				)
				if err != nil {
					t.Fatal(err)
				}
				c := &resourceapi.ResourceClaim{
					ObjectMeta: metav1.ObjectMeta{
						Name:      fmt.Sprint("c", i),
						Namespace: "default",
						UID:       apitypes.UID(fmt.Sprint("u", i)),
					},
					Spec: resourceapi.ResourceClaimSpec{
						Devices: resourceapi.DeviceClaim{
							Requests: []resourceapi.DeviceRequest{tc.req},
						},
					},
				}
				res, err := al.Allocate(
					ctx,
					&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}},
					[]*resourceapi.ResourceClaim{c},
				)
				if err != nil || len(res) != 1 {
					t.Fatalf("allocate %d: %v, %v", i, res, err)
				}
				r := res[0].Devices.Results[0]
				allocated.Insert(structured.MakeDeviceID(r.Driver, r.Pool, r.Device))
				got = append(got, r.Device)
			}
			if got[0] != "gpu-0" || got[1] != "gpu-1" || !strings.HasPrefix(got[2], "gpu-") {
				t.Errorf(
					"three whole-GPU claims got %v, want gpu-0 and gpu-1 (static full) first",
					got,
				)
			}
		})
	}
}

// Who holds a GPU is read again at the health heartbeat (pollOthers)
// while prepares and inventories read it (wholeNow): run them at once
// under the race detector, with a client coming and going.
func TestOthersReadConcurrently(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, WithRepublishDelay(0))
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			for range 20 {
				switch i {
				case 0:
					f.d.pollOthers()
				case 1:
					if _, err := f.d.Inventory(ctx); err != nil {
						t.Error(err)
					}
				case 2:
					f.d.lookup("gpu-5")
				case 3:
					_ = f.sim.AttachClient(5, nvml.Process{PID: 9})
					_ = f.sim.DetachClient(5, 9)
				}
			}
		})
	}
	wg.Wait()
}
