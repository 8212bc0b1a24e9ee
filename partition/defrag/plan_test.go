package defrag

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/drakit/drakit/explain"
	"github.com/drakit/drakit/partition"
	"github.com/drakit/drakit/partition/counter"
	pplan "github.com/drakit/drakit/partition/plan"
)

const (
	tileDriver = "tiles.example.com"
	tileNode   = "node-a"
)

// tileScheme is a vendor's card that is not MIG: 4 cores and 4 memory
// banks, both placed, split into solos (a core and the bank across from
// it) and duos (two cores and the other half's banks). One solo anywhere
// blocks both duos: by its core one, by its bank the other.
func tileScheme(t *testing.T) *partition.Scheme {
	t.Helper()
	s, err := partition.NewScheme(partition.Scheme{
		Name:    "tile-4",
		Compute: partition.Units{Count: 4, Placed: true},
		Memory:  partition.Units{Count: 4, Placed: true},
		Profiles: []partition.Profile{
			{
				Name:        "duo",
				ID:          2,
				Compute:     2,
				Memory:      2,
				MemoryBytes: 32 << 30,
				MaxCount:    2,
				Placements: []partition.Placement{
					{Start: 0, Compute: 0, Memory: 2}, {Start: 2, Compute: 2, Memory: 0}},
			},
			{
				Name:        "solo",
				ID:          1,
				Compute:     1,
				Memory:      1,
				MemoryBytes: 16 << 30,
				MaxCount:    4,
				Placements: []partition.Placement{
					{Start: 0, Compute: 0, Memory: 1}, {Start: 1, Compute: 1, Memory: 0},
					{Start: 2, Compute: 2, Memory: 3}, {Start: 3, Compute: 3, Memory: 2}},
			},
		},
		Names: partition.Names{Card: "tile card", Device: "tile"},
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// tileVendor describes tileScheme to the controller, as a vendor's layer
// would: no import of package mig.
func tileVendor(s *partition.Scheme) Vendor {
	return Vendor{
		Domain: "tiles.example.com",
		Scheme: func(model string) (*partition.Scheme, error) {
			if model != s.Name {
				return nil, fmt.Errorf("unknown model %q", model)
			}
			return s, nil
		},
		Card: "tile card",
	}
}

// tileCluster is one node with two tile cards: card 0 holds an opted-in
// solo@0 (a ReplicaSet's pod "mover"), card 1 a solo@0 whose pod did
// not opt in ("stay"); pod "big" waits for a duo of at least 32 GiB. No
// duo fits anywhere and one move (mover to card 1) frees card 0. With
// fitOnly the driver publishes no duo (none fits now).
func tileCluster(t *testing.T, s *partition.Scheme, fitOnly bool) *cluster {
	t.Helper()
	m, err := counter.NewModel([]counter.Card{{Index: 0, Scheme: s}, {Index: 1, Scheme: s}})
	if err != nil {
		t.Fatal(err)
	}
	snap := &explain.Snapshot{Slices: m.Slices(tileDriver, tileNode, tileNode, 1)}
	if fitOnly {
		for _, sl := range snap.Slices {
			sl.Spec.Devices = slices.DeleteFunc(sl.Spec.Devices, func(d resourceapi.Device) bool {
				return strings.Contains(d.Name, "-duo-")
			})
		}
	}
	snap.Nodes = []*corev1.Node{{ObjectMeta: metav1.ObjectMeta{Name: tileNode,
		Labels: map[string]string{"kubernetes.io/hostname": tileNode}},
		Status: corev1.NodeStatus{
			Allocatable: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("110")},
		}}}
	for _, p := range s.ProfileNames() {
		snap.Classes = append(snap.Classes, &resourceapi.DeviceClass{
			ObjectMeta: metav1.ObjectMeta{Name: p},
			Spec: resourceapi.DeviceClassSpec{
				Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
					Expression: fmt.Sprintf(
						"device.driver == %q && device.attributes[%q].?profile.orValue(\"\") == %q",
						tileDriver,
						tileDriver,
						p,
					)}}},
			},
		})
	}
	cl := &cluster{
		snap:        snap,
		devs:        map[devKey]devLoc{},
		byLoc:       map[locKey]devKey{},
		held:        map[locKey]*holder{},
		pods:        map[types.UID]*corev1.Pod{},
		cardsOf:     map[string][]int{},
		scheme:      map[cardKey]*partition.Scheme{},
		unpublished: map[devKey]bool{},
	}
	pod := func(name string, optIn bool, node string) *corev1.Pod {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{
				Namespace:         "ns",
				Name:              name,
				UID:               types.UID(name + "-uid"),
				CreationTimestamp: metav1.Now(),
			},
			Spec: corev1.PodSpec{
				NodeName:   node,
				Containers: []corev1.Container{{Name: "c", Image: "none"}},
				ResourceClaims: []corev1.PodResourceClaim{
					{Name: "tile", ResourceClaimName: ptr.To(name + "-tile")},
				},
			},
		}
		if optIn {
			p.Annotations = map[string]string{"tiles.example.com/defrag": AllowValue}
			p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet",
				Name: name, UID: types.UID(name + "-rs"), Controller: ptr.To(true)}}
		}
		cl.pods[p.UID] = p
		return p
	}
	claim := func(p *corev1.Pod, class, device string, selectors ...resourceapi.DeviceSelector) {
		c := &resourceapi.ResourceClaim{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: p.Name + "-tile",
				UID: types.UID(
					p.Name + "-claim",
				), OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1",
					Kind: "Pod", Name: p.Name, UID: p.UID, Controller: ptr.To(true)}}},
			Spec: resourceapi.ResourceClaimSpec{
				Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{
					{Name: "tile", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: class,
						AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1,
						Selectors: selectors}}}},
			},
		}
		if device != "" {
			c.Status.Allocation = &resourceapi.AllocationResult{
				Devices: resourceapi.DeviceAllocationResult{
					Results: []resourceapi.DeviceRequestAllocationResult{
						{Request: "tile", Driver: tileDriver, Pool: tileNode, Device: device}}},
			}
			c.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{
				{Resource: "pods", Name: p.Name, UID: p.UID}}
		}
		snap.Claims = append(snap.Claims, c)
	}
	claim(pod("mover", true, tileNode), "solo", "tile-0-solo-0")
	claim(pod("stay", false, tileNode), "solo", "tile-1-solo-0")
	claim(
		pod("big", false, ""),
		"duo",
		"",
		resourceapi.DeviceSelector{CEL: &resourceapi.CELDeviceSelector{
			Expression: fmt.Sprintf(
				"device.capacity[%q].memory.compareTo(quantity(\"32Gi\")) >= 0",
				tileDriver,
			)}},
	)
	return cl
}

// A scheme that is not MIG, placed in two dimensions, goes through the
// whole plan: its cards are read from their slices by model attribute,
// the in-use partitions by allocation, the planner finds the one move,
// the real allocator lands the moved pod's claim at its destination,
// and the region is every device of card 0 that shares a core or a bank
// with the freed duo, named in the vendor's words.
func TestPlanOnAnotherVendorsScheme(t *testing.T) {
	c, cl := tileController(t, false)
	if got, want := cl.cardsOf[tileNode], []int{0, 1}; !slices.Equal(got, want) {
		t.Fatalf("cards of %s: %v, want %v", tileNode, got, want)
	}
	ctx := context.Background()
	p, why := c.planFor(ctx, cl, cl.pods["big-uid"])
	if p == nil {
		t.Fatalf("no plan: %s", why)
	}
	op := p.op
	if op.Card != 0 || op.Profile != "duo" || op.Device != "tile-0-duo-0" {
		t.Errorf(
			"freed %s on card %d (device %s), want a duo of card 0",
			op.Profile,
			op.Card,
			op.Device,
		)
	}
	if len(op.Evictions) != 1 || op.Evictions[0].Pod.Name != "mover" {
		t.Fatalf("evictions %+v, want mover's", op.Evictions)
	}
	e := op.Evictions[0]
	if e.Move.ToCard != 1 || !strings.HasPrefix(e.ToDevice, "tile-1-solo-") ||
		e.Owner != "mover-rs" {
		t.Errorf(
			"mover lands at %+v (device %s, owner %s), want a solo of card 1 and its ReplicaSet",
			e.Move,
			e.ToDevice,
			e.Owner,
		)
	}
	var region []string
	for _, k := range p.region[:len(p.region)-p.reserved] {
		region = append(region, k.device)
	}
	slices.Sort(region)
	// The freed duo@0 (cores 0-1, banks 2-3) shares a core or a bank with
	// every solo and the whole card, nothing with duo@2 (cores 2-3, banks
	// 0-1): a region by one dimension alone, or by start and size, would
	// get this wrong.
	want := []string{
		"tile-0",
		"tile-0-duo-0",
		"tile-0-solo-0",
		"tile-0-solo-1",
		"tile-0-solo-2",
		"tile-0-solo-3",
	}
	if diff := cmp.Diff(want, region); diff != "" {
		t.Errorf("region (-want +got):\n%s", diff)
	}
	for _, k := range p.region[len(p.region)-p.reserved:] {
		if !strings.HasPrefix(k.device, "tile-1") {
			t.Errorf("reserved %s, not a device of card 1", k.device)
		}
	}
	var out bytes.Buffer
	c.print(&out, p)
	if got := out.String(); !strings.Contains(got, "duo at tile card 0 placement") ||
		!strings.Contains(got, "NoSchedule tiles.example.com/defrag") {
		t.Errorf("dry run prints\n%s\nwant the vendor's card noun and taint key", got)
	}
}

// Only the vendor's devices are read: a model attribute the vendor does
// not know, or a scheme it returns that partition.NewScheme did not
// build, leaves the card out (no panic), and then no plan is made.
func TestPlanSkipsUnknownModels(t *testing.T) {
	s := tileScheme(t)
	other := tileVendor(s)
	other.ModelAttribute = "another"
	unbuilt := tileVendor(s)
	unbuilt.Scheme = func(string) (*partition.Scheme, error) {
		return &partition.Scheme{Name: s.Name}, nil
	}
	for name, v := range map[string]Vendor{"unknown attribute": other, "unbuilt scheme": unbuilt} {
		t.Run(name, func(t *testing.T) {
			n, err := v.names()
			if err != nil {
				t.Fatal(err)
			}
			c := &Controller{driver: tileDriver, n: n, o: options{maxMoves: pplan.DefaultMaxMoves,
				minCompute: 2, features: explain.DefaultFeatures}, told: map[string]string{}}
			cl := tileCluster(t, s, false)
			c.readDevices(cl)
			c.readInstances(cl)
			if len(cl.fleet) != 0 || len(cl.devs) != 0 {
				t.Fatalf("fleet %v, devices %d: want none", cl.fleet, len(cl.devs))
			}
			p, why := c.planFor(context.Background(), cl, cl.pods["big-uid"])
			if p != nil || !strings.Contains(why, "no node with partitionable cards") {
				t.Errorf("plan %v (%s), want none", p, why)
			}
		})
	}
}

// An operation recorded by mig/defrag before the controller was
// vendor-neutral ("gpu", "toGPU") is read with its cards, and one written
// now is read by that release too, so that a controller updated (or
// rolled back) during the operation carries it on.
func TestOperationReadsLegacyRecord(t *testing.T) {
	legacy := `{"id":"u","pod":{"namespace":"ns","name":"big","uid":"p"},"node":"n","gpu":3,` +
		`"profile":"4g.40gb","start":0,"evictions":[` +
		`{"pod":{"namespace":"ns","name":"s","uid":"q"},"move":{"node":"n","gpu":3,` +
		`"profile":"1g.10gb","start":2,"toNode":"m","toGPU":5,"toStart":6}}]}`
	var op Operation
	if err := json.Unmarshal([]byte(legacy), &op); err != nil {
		t.Fatal(err)
	}
	want := pplan.Move{
		Node:    "n",
		Card:    3,
		Profile: "1g.10gb",
		Start:   2,
		ToNode:  "m",
		ToCard:  5,
		ToStart: 6,
	}
	if op.Card != 3 || len(op.Evictions) != 1 || op.Evictions[0].Move != want {
		t.Fatalf(
			"read card %d, evictions %+v; want card 3 and move %+v",
			op.Card,
			op.Evictions,
			want,
		)
	}
	b, err := json.Marshal(op)
	if err != nil {
		t.Fatal(err)
	}
	// What mig/defrag's Operation of the previous release reads.
	var old struct {
		GPU       int `json:"gpu"`
		Evictions []struct {
			Move struct {
				GPU   int `json:"gpu"`
				ToGPU int `json:"toGPU"`
			} `json:"move"`
		} `json:"evictions"`
	}
	if err := json.Unmarshal(b, &old); err != nil || old.GPU != 3 || len(old.Evictions) != 1 ||
		old.Evictions[0].Move.GPU != 3 || old.Evictions[0].Move.ToGPU != 5 {
		t.Errorf("the previous release reads %s as %+v, %v", b, old, err)
	}
	var again Operation
	if err := json.Unmarshal(b, &again); err != nil || again.Card != 3 ||
		again.Evictions[0].Move != want {
		t.Fatalf("round trip %s: %+v, %v", b, again, err)
	}
}

// The vendor's names are derived from its Domain; a missing Scheme or a
// Domain that is no DNS subdomain is refused.
func TestVendorNames(t *testing.T) {
	s := func(string) (*partition.Scheme, error) { return nil, nil }
	n, err := Vendor{Domain: "mig.drakit.dev", Scheme: s}.names()
	if err != nil {
		t.Fatal(err)
	}
	got := []string{n.optIn, n.taint, n.operation, n.component, n.rulePrefix, n.card, n.model}
	want := []string{
		"mig.drakit.dev/defrag",
		"mig.drakit.dev/defrag",
		"mig.drakit.dev/defrag-operation",
		"mig.drakit.dev/defrag",
		"mig-defrag-",
		"card",
		"model",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("names (-want +got):\n%s", diff)
	}
	bad := []Vendor{{Domain: "example.com"}, {Domain: "Not_A_Domain", Scheme: s}, {Scheme: s}}
	for _, v := range bad {
		if _, err := v.names(); err == nil {
			t.Errorf("vendor %+v: no error", v)
		}
	}
}

// A fit-only publication lacks the duo that a move frees: the controller
// completes the model with it, with the counter model's attributes and
// capacities (the claim asks for 32 GiB; the solo it copies has 16), and
// plans the move to it; the device stays the controller's own
// reasoning until the driver publishes it.
func TestPlanCompletesAFitOnlyPublication(t *testing.T) {
	c, cl := tileController(t, true)
	p, why := c.planFor(context.Background(), cl, cl.pods["big-uid"])
	if p == nil {
		t.Fatalf("no plan: %s", why)
	}
	if p.op.Device != "tile-0-duo-0" || !cl.unpublished[devKey{tileNode, p.op.Device}] {
		t.Errorf(
			"freed device %s (unpublished %v), want tile-0-duo-0, unpublished",
			p.op.Device,
			cl.unpublished,
		)
	}
}

// tileController is a controller for the tile vendor with the cluster of
// tileCluster (fitOnly: a fit-only publication) read into it.
func tileController(t *testing.T, fitOnly bool) (*Controller, *cluster) {
	t.Helper()
	s := tileScheme(t)
	n, err := tileVendor(s).names()
	if err != nil {
		t.Fatal(err)
	}
	c := &Controller{driver: tileDriver, n: n, o: options{maxMoves: pplan.DefaultMaxMoves,
		minCompute: 2, features: explain.DefaultFeatures}, told: map[string]string{}}
	cl := tileCluster(t, s, fitOnly)
	c.readDevices(cl)
	c.readInstances(cl)
	return c, cl
}
