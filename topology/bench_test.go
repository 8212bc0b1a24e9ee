package topology_test

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/dynamic-resource-allocation/deviceattribute"

	"github.com/drakit/drakit/topology"
)

// FuzzNormalizePCIBusID: whatever NormalizePCIBusID accepts is a bus ID
// the deviceattribute helpers accept too, and normalizing is idempotent.
func FuzzNormalizePCIBusID(f *testing.F) {
	for _, s := range []string{"0000:3b:00.0", "00000000:3B:00.0", "0001:af:1f.7", "3b:00.0", "", "0000:3b:20.0", "ffffffff:ff:ff.f"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		out, err := topology.NormalizePCIBusID(in)
		if err != nil {
			if out != "" {
				t.Errorf("error with output %q", out)
			}
			return
		}
		if _, err := deviceattribute.GetPCIBusIDAttribute(out); err != nil {
			t.Errorf("NormalizePCIBusID(%q) = %q, which deviceattribute rejects: %v", in, out, err)
		}
		again, err := topology.NormalizePCIBusID(out)
		if err != nil || again != out {
			t.Errorf("not idempotent: %q -> %q -> %q, %v", in, out, again, err)
		}
	})
}

func BenchmarkReadPCIDevice(b *testing.B) {
	s := newMachine(b)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := topology.ReadPCIDevice("0000:03:00.0", topology.WithSysfsRoot(s.Root)); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkPlan(b *testing.B) {
	l, err := topology.NewLabeler(topology.WithFact(topology.LevelInterconnectDomain, "nvl-1"))
	if err != nil {
		b.Fatal(err)
	}
	labels := map[string]string{
		"topology.k8s.aws/network-node-layer-1": "nn-1", "topology.k8s.aws/network-node-layer-2": "nn-2",
		"topology.k8s.aws/network-node-layer-3": "nn-3", topology.ZoneLabel: "z",
	}
	for i := range 40 { // a realistic node carries dozens of other labels
		labels["example.com/label-"+strings.Repeat("x", i%5)+string(rune('a'+i%26))] = "v"
	}
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: labels}}
	b.ReportAllocs()
	for b.Loop() {
		_ = l.Plan(n)
	}
}
