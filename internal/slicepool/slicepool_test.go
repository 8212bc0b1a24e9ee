package slicepool

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func slice(name, pool string, gen, count int64, devices ...string) *resourceapi.ResourceSlice {
	sl := &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: resourceapi.ResourceSliceSpec{
		Pool: resourceapi.ResourcePool{Name: pool, Generation: gen, ResourceSliceCount: count}}}
	for _, d := range devices {
		sl.Spec.Devices = append(sl.Spec.Devices, resourceapi.Device{Name: d})
	}
	return sl
}

// TestGroup: only the newest generation of a pool counts; a pool is
// complete with all of its slices, and says what is missing otherwise.
func TestGroup(t *testing.T) {
	ps := Group([]*resourceapi.ResourceSlice{
		slice("a-old", "a", 1, 1, "old"),
		slice("a-0", "a", 2, 2, "x"),
		slice("a-1", "a", 2, 2, "y"),
		slice("b-0", "b", 3, 2, "z"),
		slice("c-0", "c", 1, 1),
		slice("c-1", "c", 1, 2),
	})
	if a := ps["a"]; !a.Complete() || a.Generation != 2 || !cmp.Equal(a.Devices(), []string{"x", "y"}) {
		t.Errorf("pool a: complete %v, generation %d, devices %q; want complete generation 2 with x, y", a.Complete(), a.Generation, a.Devices())
	}
	got := Incomplete(ps)
	if len(got) != 2 || !strings.Contains(got[0], `pool "b" generation 3 has 1 slices, resourceSliceCount says 2`) || !strings.Contains(got[1], `pool "c" generation 1: its 2 slices disagree`) {
		t.Errorf("Incomplete = %q", got)
	}
}
