package testenv

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"github.com/drakit/drakit/internal/slicepool"
)

// WaitForPools waits until driverName's pools on the environment's node
// are complete, as the scheduler needs them: every ResourceSlice of a
// pool's newest generation is in the API server (the structured
// allocator, k8s.io/dynamic-resource-allocation/structured, allocates
// from complete pools only, and a pod created before that stays
// Unschedulable until the scheduler retries it, which can take minutes).
// With pool names it waits for those pools; without, for at least one
// pool, every pool the driver publishes for the node complete. It
// returns the pools' current slices, sorted by pool and name, or, when
// ctx ends first, an error that says what is missing.
//
// A driver built on package driver says the same from inside its
// process: driver.Runtime.Published. After a driver restart its earlier
// slices are complete too: wait for what the new process publishes
// (e.g. by polling for a device it names) where that matters.
func (e *Env) WaitForPools(ctx context.Context, driverName string, pools ...string) ([]*resourceapi.ResourceSlice, error) {
	var last string
	for {
		got, why, err := e.completePools(ctx, driverName, pools)
		if err == nil && why == "" {
			return got, nil
		}
		if err != nil {
			why = err.Error()
		}
		last = why
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("wait for the pools of driver %s on node %s: %w: %s", driverName, e.NodeName, ctx.Err(), last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// completePools returns the driver's slices when the wanted pools are
// complete, else why not.
func (e *Env) completePools(ctx context.Context, driverName string, want []string) ([]*resourceapi.ResourceSlice, string, error) {
	list, err := e.Client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.driver", driverName).String(),
	})
	if err != nil {
		return nil, "", fmt.Errorf("list ResourceSlices: %w", err)
	}
	var mine []*resourceapi.ResourceSlice
	for i := range list.Items {
		// The node's own slices, and those of pools that are not tied
		// to one node (network-attached devices).
		if n := list.Items[i].Spec.NodeName; n == nil || *n == e.NodeName {
			mine = append(mine, &list.Items[i])
		}
	}
	ps := slicepool.Group(mine)
	if len(want) == 0 {
		if len(ps) == 0 {
			return nil, "no ResourceSlice yet", nil
		}
		for name := range ps {
			want = append(want, name)
		}
	}
	var problems []string
	for _, name := range want {
		p, ok := ps[name]
		switch {
		case !ok:
			problems = append(problems, fmt.Sprintf("pool %q has no ResourceSlice", name))
		case !p.Complete():
			problems = append(problems, p.Problem())
		}
	}
	if len(problems) > 0 {
		sort.Strings(problems)
		return nil, strings.Join(problems, "; "), nil
	}
	var out []*resourceapi.ResourceSlice
	for _, name := range want {
		out = append(out, ps[name].Slices...)
	}
	slices.SortFunc(out, func(a, b *resourceapi.ResourceSlice) int {
		if c := strings.Compare(a.Spec.Pool.Name, b.Spec.Pool.Name); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	return out, "", nil
}
