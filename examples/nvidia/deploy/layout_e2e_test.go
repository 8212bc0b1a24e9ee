package deploy_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	nvdriver "github.com/drakit/drakit/examples/nvidia/driver"
	"github.com/drakit/drakit/mig"
	"github.com/drakit/drakit/testenv"
)

// layoutVersions judges every version of the driver's slices that holds
// dynamic MIG devices, as a watch sees them.
type layoutVersions struct {
	mu      sync.Mutex
	seen    int // versions with MIG devices of a dynamic GPU
	layouts int // of those, versions that changed a GPU's layout
	bad     []string
	last    map[int]string
}

// watchLayout starts judging the driver's slices: each one slice of its
// pool, no counters, and per dynamic GPU its whole device alone or a
// valid MIG layout.
func watchLayout(t *testing.T, ctx context.Context, env *testenv.Env) *layoutVersions {
	t.Helper()
	h200, err := mig.Lookup("NVIDIA H200")
	if err != nil {
		t.Fatal(err)
	}
	w, err := env.Client.ResourceV1().
		ResourceSlices().
		Watch(ctx, metav1.ListOptions{FieldSelector: "spec.driver=" + nvdriver.DriverName})
	if err != nil {
		t.Fatal(err)
	}
	v := &layoutVersions{last: map[int]string{}}
	go func() {
		defer w.Stop()
		for ev := range w.ResultChan() {
			s, ok := ev.Object.(*resourceapi.ResourceSlice)
			if !ok || ev.Type == watch.Deleted {
				continue
			}
			v.judge(h200, s)
		}
	}()
	return v
}

func (v *layoutVersions) judge(p *mig.Product, s *resourceapi.ResourceSlice) {
	v.mu.Lock()
	defer v.mu.Unlock()
	fail := func(format string, args ...any) {
		if len(v.bad) < 10 {
			v.bad = append(
				v.bad,
				fmt.Sprintf(
					"slice %s (pool %s, generation %d): ",
					s.Name,
					s.Spec.Pool.Name,
					s.Spec.Pool.Generation,
				)+fmt.Sprintf(
					format,
					args...),
			)
		}
	}
	whole := map[int]bool{}
	layouts := map[int]mig.Layout{}
	for _, d := range s.Spec.Devices {
		if a := d.Attributes[nvdriver.AttrMIGMode]; a.StringValue == nil ||
			*a.StringValue != nvdriver.ModeDynamic {
			continue // full GPUs and the administrator's MIG devices
		}
		if len(d.ConsumesCounters) > 0 {
			fail("device %s consumes counters", d.Name)
		}
		ref, err := mig.ParseDeviceName(d.Name)
		if err != nil {
			fail("%v", err)
			continue
		}
		if ref.Profile == "" {
			whole[ref.GPU] = true
		} else {
			layouts[ref.GPU] = append(
				layouts[ref.GPU], mig.Instance{Profile: ref.Profile, Start: ref.Start},
			)
		}
	}
	if len(layouts) == 0 && len(whole) == 0 {
		return
	}
	v.seen++
	if s.Spec.Pool.ResourceSliceCount != 1 || len(s.Spec.SharedCounters) > 0 {
		fail(
			"%d slices in the pool, %d counter sets",
			s.Spec.Pool.ResourceSliceCount,
			len(s.Spec.SharedCounters),
		)
	}
	changed := false
	for g, l := range layouts {
		if whole[g] {
			fail("GPU %d whole beside %s", g, l)
		}
		if err := p.Validate(l); err != nil {
			fail("GPU %d: %v", g, err)
		}
		if v.last[g] != l.String() {
			v.last[g], changed = l.String(), true
		}
	}
	for g := range whole {
		if _, ok := layouts[g]; !ok && v.last[g] != "whole" {
			v.last[g], changed = "whole", true
		}
	}
	if changed {
		v.layouts++
	}
}

// check fails the test for every bad version seen, and when no version
// re-laid a GPU out (the story's MIG pods need layouts).
func (v *layoutVersions) check(t *testing.T) {
	t.Helper()
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, b := range v.bad {
		t.Error(b)
	}
	if v.layouts < 2 {
		t.Errorf(
			"%d versions of the dynamic GPUs, %d with a new layout; want the story's MIG pods "+
				"laid out",
			v.seen,
			v.layouts,
		)
	}
	t.Logf("layout versions: %d, of which %d changed a GPU's layout", v.seen, v.layouts)
}
