package explain

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/dynamic-resource-allocation/cel"
)

// TestReadsOf: what an expression reads of a device, or everything when
// it uses the device in a way the walk does not follow.
func TestReadsOf(t *testing.T) {
	e := &engine{cel: cel.NewCache(10, cel.Features{EnableConsumableCapacity: true})}
	for _, tc := range []struct {
		expr string
		want reads
	}{
		{`device.driver == "gpu.example.com"`, reads{refs: []string{"driver"}}},
		{`device.attributes["gpu.example.com"].model == "H100" && device.attributes["gpu.example.com"]["numa"] == 0`,
			reads{refs: []string{"a gpu.example.com/model", "a gpu.example.com/numa"}}},
		{`has(device.attributes["x.io"].uuid) || device.capacity["gpu.example.com"].memory.compareTo(quantity("10Gi")) >= 0`,
			reads{refs: []string{"a x.io/uuid", "c gpu.example.com/memory"}}},
		{`device.allowMultipleAllocations`, reads{refs: []string{"multi"}}},
		{`["a", "b"].exists(x, device.attributes["d.io"][x] == 1)`, reads{all: true}},
		{`"model" in device.attributes["gpu.example.com"]`, reads{all: true}},
		{`device.attributes.size() > 0`, reads{all: true}},
		{`[1].all(device, device > 0)`, reads{all: true}},
		{`device.attributes["gpu.example.com"].model ==`, reads{all: true}},
		{`true`, reads{refs: []string{}}},
	} {
		got := e.readsOf(tc.expr)
		if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(reads{})); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tc.expr, diff)
		}
	}
}
