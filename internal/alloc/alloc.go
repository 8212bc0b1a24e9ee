// Package alloc drives the real scheduler allocator
// (k8s.io/dynamic-resource-allocation/structured) in-process for one-device
// claims, as kube-scheduler does for a node: used by the counter-model
// proof and the MIG benchmark.
package alloc

import (
	"context"
	"fmt"
	"sort"
	"strings"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
)

// ClassName is the one DeviceClass the allocator knows; it matches every
// device (callers publish one driver's slices).
const ClassName = "mig"

// Features the allocator runs with: partitionable devices plus what
// kube-scheduler 1.37 enables by default, so that the same implementation
// (the one that orders slices by name) the scheduler uses is picked.
var Features = structured.Features{
	AdminAccess:            true,
	PartitionableDevices:   true,
	PrioritizedList:        true,
	DeviceTaints:           true,
	DeviceBindingAndStatus: true,
	ConsumableCapacity:     true,
}

// StableFeatures selects the oldest ("stable") allocator implementation,
// which keeps the input order of slices.
var StableFeatures = structured.Features{PartitionableDevices: true}

// Allocator allocates one-device claims for one driver.
type Allocator struct {
	driver   string
	features structured.Features
	cache    *cel.Cache
	classes  classLister
}

type classLister struct{ class *resourceapi.DeviceClass }

func (l classLister) List() ([]*resourceapi.DeviceClass, error) {
	return []*resourceapi.DeviceClass{l.class}, nil
}

func (l classLister) Get(name string) (*resourceapi.DeviceClass, error) {
	if name != l.class.Name {
		return nil, apierrors.NewNotFound(resourceapi.Resource("deviceclasses"), name)
	}
	return l.class, nil
}

// New returns an allocator for the driver's devices with the features.
func New(driver string, features structured.Features) *Allocator {
	return &Allocator{
		driver:   driver,
		features: features,
		cache:    cel.NewCache(256, cel.Features{EnableConsumableCapacity: features.ConsumableCapacity}),
		classes: classLister{class: &resourceapi.DeviceClass{
			ObjectMeta: metav1.ObjectMeta{Name: ClassName},
			// No class selector: the simulations publish one driver's
			// devices only, and each request's selector names what it
			// wants, so one CEL program runs per device instead of two.
		}},
	}
}

// One asks the allocator for one device matching the CEL selector on the
// node, given the slices and the devices already allocated. It returns the
// chosen device's name, or "" when none can be allocated.
func (a *Allocator) One(ctx context.Context, node *v1.Node, slices []*resourceapi.ResourceSlice, allocated sets.Set[structured.DeviceID], selector string) (string, error) {
	state := structured.AllocatedState{
		AllocatedDevices:         allocated,
		AllocatedSharedDeviceIDs: sets.New[structured.SharedDeviceID](),
		AggregatedCapacity:       structured.NewConsumedCapacityCollection(),
	}
	al, err := structured.NewAllocator(ctx, a.features, state, a.classes, slices, a.cache)
	if err != nil {
		return "", fmt.Errorf("create allocator: %w", err)
	}
	req := resourceapi.ExactDeviceRequest{DeviceClassName: ClassName, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1}
	if selector != "" {
		req.Selectors = []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: selector}}}
	}
	claim := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "claim", Namespace: "default", UID: "claim-uid"},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
			Requests: []resourceapi.DeviceRequest{{Name: "r", Exactly: &req}},
		}},
	}
	res, err := al.Allocate(ctx, node, []*resourceapi.ResourceClaim{claim})
	if err != nil {
		return "", fmt.Errorf("allocate: %w", err)
	}
	if len(res) == 0 || len(res[0].Devices.Results) == 0 {
		return "", nil
	}
	return res[0].Devices.Results[0].Device, nil
}

// Attr is a CEL expression for the driver's attribute name.
func (a *Allocator) Attr(name string) string {
	return fmt.Sprintf("device.attributes[%q].%s", a.driver, name)
}

// Family enumerates every set of the node's devices the allocator accepts
// when they are requested one at a time: names are the devices in the
// order to request them, selectors one CEL selector per name that
// matches exactly that device, held the devices already allocated (not
// part of any set). For each accepted set S and each later device d, one
// claim asks for d with S allocated; because counter consumption only
// grows, this is the whole family of accepted sets. Each set is its
// names sorted and joined by spaces; the family is sorted.
func (a *Allocator) Family(ctx context.Context, node *v1.Node, slices []*resourceapi.ResourceSlice, names, selectors, held []string) ([]string, error) {
	if len(names) != len(selectors) {
		return nil, fmt.Errorf("family: %d names, %d selectors", len(names), len(selectors))
	}
	allocated := sets.New[structured.DeviceID]()
	for _, h := range held {
		allocated.Insert(structured.MakeDeviceID(a.driver, node.Name, h))
	}
	var family, chosen []string
	var rec func(from int) error
	rec = func(from int) error {
		for i := from; i < len(names); i++ {
			if allocated.Has(structured.MakeDeviceID(a.driver, node.Name, names[i])) {
				continue
			}
			got, err := a.One(ctx, node, slices, allocated, selectors[i])
			if err != nil {
				return fmt.Errorf("allocate %s after %v: %w", names[i], chosen, err)
			}
			if got == "" {
				continue
			}
			if got != names[i] {
				return fmt.Errorf("asked for %s after %v, the allocator gave %s", names[i], chosen, got)
			}
			id := structured.MakeDeviceID(a.driver, node.Name, names[i])
			allocated.Insert(id)
			chosen = append(chosen, names[i])
			set := append([]string(nil), chosen...)
			sort.Strings(set)
			family = append(family, strings.Join(set, " "))
			err = rec(i + 1)
			chosen = chosen[:len(chosen)-1]
			allocated.Delete(id)
			if err != nil {
				return err
			}
		}
		return nil
	}
	if err := rec(0); err != nil {
		return nil, err
	}
	sort.Strings(family)
	return family, nil
}
