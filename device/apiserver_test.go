package device

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/resourceslice"

	"github.com/drakit/drakit/internal/cluster/clustertest"
)

// serverVerdict creates s with dryRun=All (full validation and admission,
// nothing stored) and says whether the API server accepted it, the
// fields it complained about, and whether it kept the spec unchanged.
func serverVerdict(ctx context.Context, t *testing.T, client kubernetes.Interface, s *resourceapi.ResourceSlice) (accepted bool, causes []string, kept bool) {
	t.Helper()
	sent := s.DeepCopy()
	got, err := client.ResourceV1().ResourceSlices().Create(ctx, sent, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if err != nil {
		var se *apierrors.StatusError
		if !errors.As(err, &se) || !apierrors.IsInvalid(err) {
			t.Fatalf("create slice %s: unexpected error (not a validation error): %v", s.Name, err)
		}
		if se.ErrStatus.Details != nil {
			for _, c := range se.ErrStatus.Details.Causes {
				causes = append(causes, c.Field)
			}
		}
		return false, causes, false
	}
	// The server sets timeAdded on taints; compare the rest.
	for i := range got.Spec.Devices {
		for j := range got.Spec.Devices[i].Taints {
			if j < len(s.Spec.Devices[i].Taints) && s.Spec.Devices[i].Taints[j].TimeAdded == nil {
				got.Spec.Devices[i].Taints[j].TimeAdded = nil
			}
		}
	}
	return true, nil, equality.Semantic.DeepEqual(s.Spec, got.Spec)
}

// TestDifferentialAPIServer checks Validate against a real
// kube-apiserver: a slice without object-scope problems is accepted and
// stored unchanged, and a slice with such problems is rejected.
func TestDifferentialAPIServer(t *testing.T) {
	c := clustertest.Start(t)
	ctx := context.Background()

	t.Run("table", func(t *testing.T) {
		for _, tc := range sliceCases {
			t.Run(tc.name, func(t *testing.T) {
				s := baseSlice()
				tc.mutate(s)
				ps := objectProblems(Validate(s), 0)
				accepted, causes, kept := serverVerdict(ctx, t, c.Client, s)
				if accepted != (len(ps) == 0) {
					t.Fatalf("API server accepted = %v, Validate object problems = %v; server causes: %v", accepted, ps, causes)
				}
				if accepted && !kept {
					t.Errorf("API server changed the spec (a dropped field?)")
				}
				if !accepted && tc.wantField != "" && !slices.Contains(causes, tc.wantField) {
					t.Errorf("server reported %v, not %s", causes, tc.wantField)
				}
			})
		}
	})

	t.Run("shares", func(t *testing.T) { sharesVerdicts(ctx, t, c.Client) })

	t.Run("publish", func(t *testing.T) {
		// The real ResourceSlice controller, as kubeletplugin.Helper
		// runs it for a node, publishes DriverResources of a node with
		// partitionable and tainted devices without errors or dropped
		// fields, in the order given.
		if err := c.AddFakeNode(ctx, "node-pub", nil, nil); err != nil {
			t.Fatalf("add node: %v", err)
		}
		inv := benchInventory(700)
		inv.Pools[0].Name = "node-pub"
		dr, err := inv.DriverResources()
		if err != nil {
			t.Fatalf("DriverResources: %v", err)
		}
		var mu sync.Mutex
		var pubErrs []error
		ctl, err := resourceslice.StartController(ctx, resourceslice.Options{
			DriverName: inv.Driver,
			KubeClient: c.Client,
			Owner:      &resourceslice.Owner{APIVersion: "v1", Kind: "Node", Name: "node-pub"},
			Resources:  dr,
			ErrorHandler: func(_ context.Context, err error, msg string) {
				mu.Lock()
				defer mu.Unlock()
				pubErrs = append(pubErrs, fmt.Errorf("%s: %w", msg, err))
			},
		})
		if err != nil {
			t.Fatalf("start controller: %v", err)
		}
		defer ctl.Stop()
		want := len(dr.Pools["node-pub"].Slices)
		var list *resourceapi.ResourceSliceList
		deadline := time.Now().Add(60 * time.Second)
		for {
			list, err = c.Client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=node-pub"})
			if err != nil {
				t.Fatalf("list slices: %v", err)
			}
			mu.Lock()
			failed := len(pubErrs) > 0
			mu.Unlock()
			if len(list.Items) == want || failed || time.Now().After(deadline) {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		mu.Lock()
		for _, err := range pubErrs {
			t.Errorf("publish: %v", err)
		}
		mu.Unlock()
		if len(list.Items) != want {
			t.Fatalf("%d slices published, want %d", len(list.Items), want)
		}
		// Slice names start with the index: sort by name to get the
		// scheduler's order, then compare devices with the inventory.
		slices.SortFunc(list.Items, func(a, b resourceapi.ResourceSlice) int { return strings.Compare(a.Name, b.Name) })
		var got, wantNames []string
		for _, s := range list.Items {
			for _, d := range s.Spec.Devices {
				got = append(got, d.Name)
			}
		}
		for _, d := range inv.Pools[0].Devices {
			wantNames = append(wantNames, d.Name())
		}
		if !slices.Equal(got, wantNames) {
			t.Errorf("published device order differs from the inventory")
		}
		ptrs := make([]*resourceapi.ResourceSlice, len(list.Items))
		for i := range list.Items {
			ptrs[i] = &list.Items[i]
		}
		if err := Validate(ptrs...); err != nil {
			t.Errorf("published slices do not validate: %v", err)
		}
	})

	t.Run("random", func(t *testing.T) {
		r := rand.New(rand.NewPCG(37, 42))
		var accepted, rejected int
		for i := 0; i < 120; i++ {
			inv := randomInventory(r, []float64{0, 0.005, 0.02, 0.3}[i%4])
			ss := inv.ResourceSlices("node-1")
			err := Validate(ss...)
			for j, s := range ss {
				s.Name = fmt.Sprintf("r%d-%d", i, j)
				ps := objectProblems(err, j)
				ok, causes, kept := serverVerdict(ctx, t, c.Client, s)
				if ok != (len(ps) == 0) {
					t.Errorf("inventory %d slice %d: API server accepted = %v, Validate object problems:\n%v\nserver causes: %v", i, j, ok, ps, causes)
					continue
				}
				if ok && !kept {
					t.Errorf("inventory %d slice %d: API server changed the spec", i, j)
				}
				if ok {
					accepted++
				} else {
					rejected++
				}
			}
		}
		t.Logf("random slices: %d accepted, %d rejected by both", accepted, rejected)
		if accepted < 50 || rejected < 50 {
			t.Errorf("random inventories gave %d accepted and %d rejected slices; the generator needs tuning", accepted, rejected)
		}
	})
}

// sharesVerdicts checks NewShares against the API server: a device made
// shareable by a model NewShares accepts is stored unchanged, and every
// model it refuses for an API rule is refused by the server too. It is
// stricter than the server where a model has no policy at all (no name,
// no form or two, a fraction, a zero step) and for a default above the
// capacity.
func sharesVerdicts(ctx context.Context, t *testing.T, client kubernetes.Interface) {
	sliceOf := func(d *Device) *resourceapi.ResourceSlice {
		inv := &Inventory{Driver: "gpu.example.com", Pools: []Pool{{Name: "node-shares",
			Devices: []*Device{d}}}}
		s := inv.ResourceSlices("node-shares")[0]
		s.Name = "shares"
		return s
	}
	values, err := NewShares(ShareCapacity{Name: "memory", Capacity: q("80Gi"),
		Default: q("10Gi"), Values: []resource.Quantity{q("10Gi"), q("20Gi"), q("40Gi")}})
	if err != nil {
		t.Fatal(err)
	}
	for name, s := range map[string]*Shares{"range": gpuShares(t), "values": values} {
		accepted, causes, kept := serverVerdict(ctx, t, client, sliceOf(s.Apply(New("gpu-0"))))
		if !accepted || !kept {
			t.Errorf("%s: the API server accepted %v (causes %v), kept %v",
				name, accepted, causes, kept)
		}
	}
	for _, tc := range badShares {
		p, err := tc.c.policy()
		if err != nil || tc.name == "default above capacity" {
			continue // refused before there is a policy, or stricter than the server
		}
		d := New("gpu-0").AllowMultipleAllocations().Capacity(tc.c.Name, tc.c.Capacity, p)
		if accepted, _, _ := serverVerdict(ctx, t, client, sliceOf(d)); accepted {
			t.Errorf("%s: NewShares refuses it, the API server accepts it", tc.name)
		}
	}
}
