package device

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

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
