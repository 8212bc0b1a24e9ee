package device

import (
	"fmt"
	"math/rand/v2"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// pick returns one of the good values, or with probability bad one of
// the bad ones.
func pick(r *rand.Rand, bad float64, good, wrong []string) string {
	if len(wrong) > 0 && r.Float64() < bad {
		return wrong[r.IntN(len(wrong))]
	}
	return good[r.IntN(len(good))]
}

var (
	goodAttrNames = []string{"model", "uuid", "index", "family", "resource.kubernetes.io/pcieRoot", "numa.example.org/node", "x" + strings.Repeat("y", 31)}
	badAttrNames  = []string{"my-attr", "9lives", "", "/x", "a_b.com/x", strings.Repeat("z", 33), "ex.com/", "UPPER.com/x"}
	goodVersions  = []string{"1.0.0", "12.4.1-rc.1", "0.0.1+build.7", "535.104.5"}
	badVersions   = []string{"1.2", "v1.2.3", "01.2.3", "1.2.3-", strings.Repeat("1", 30) + "." + strings.Repeat("2", 30) + ".3"}
	goodLabelKeys = []string{"example.com/unhealthy", "maintenance", "gpu.example.com/xid"}
	badLabelKeys  = []string{"bad key", "/x", "-x", strings.Repeat("k", 64)}
)

func randomString(r *rand.Rand, maxLen int) string {
	const chars = "abcdefghijklmnopqrstuvwxyz0123456789-_.: /é"
	n := r.IntN(maxLen + 1)
	var b strings.Builder
	for b.Len() < n {
		b.WriteRune([]rune(chars)[r.IntN(len([]rune(chars)))])
	}
	return b.String()
}

func randomQuantity(r *rand.Rand) resource.Quantity {
	switch r.IntN(4) {
	case 0:
		return *resource.NewQuantity(int64(r.IntN(1000)), resource.DecimalSI)
	case 1:
		return *resource.NewQuantity(int64(r.IntN(128))<<30, resource.BinarySI)
	case 2:
		return *resource.NewMilliQuantity(int64(r.IntN(10000)), resource.DecimalSI)
	default:
		return resource.MustParse(fmt.Sprintf("%dMi", r.IntN(100000)))
	}
}

// randomInventory returns an inventory that breaks rules with roughly
// the given probability per decision.
func randomInventory(r *rand.Rand, bad float64) *Inventory {
	inv := &Inventory{Driver: pick(r, bad/4, []string{testDriver, "net.example.org"}, []string{"bad_driver", strings.Repeat("d", 64)})}
	nPools := 1 + r.IntN(2)
	for pi := 0; pi < nPools; pi++ {
		p := Pool{Name: pick(r, bad/4, []string{fmt.Sprintf("pool-%d", pi), fmt.Sprintf("rack-%d/node-%d", pi, pi)}, []string{"Pool_x", "a//b"})}
		switch r.IntN(6) {
		case 0:
			p.AllNodes = true
		case 1:
			p.NodeSelector = &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{
				Key: pick(r, bad, []string{"example.com/rack"}, []string{"bad key"}), Operator: corev1.NodeSelectorOpIn, Values: []string{"r1"},
			}}}}}
		}
		nSets := 0
		if r.IntN(3) == 0 {
			nSets = r.IntN(12)
		}
		for si := 0; si < nSets; si++ {
			nc := 1 + r.IntN(4)
			if r.Float64() < bad/3 {
				nc = 33
			}
			cs := CounterSet{Name: pick(r, bad/4, []string{fmt.Sprintf("gpu-%d", si)}, []string{"GPU_0"}), Counters: map[string]resource.Quantity{}}
			for ci := 0; ci < nc; ci++ {
				cs.Counters[fmt.Sprintf("c%d", ci)] = randomQuantity(r)
			}
			p.CounterSets = append(p.CounterSets, cs)
		}
		nDev := r.IntN(160)
		for di := 0; di < nDev; di++ {
			d := New(pick(r, bad/8, []string{fmt.Sprintf("dev-%d", di)}, []string{"Dev_1", "", strings.Repeat("a", 64)}))
			nAttr := r.IntN(6)
			if r.Float64() < bad/4 {
				nAttr = 33
			}
			for ai := 0; ai < nAttr; ai++ {
				name := pick(r, bad/4, goodAttrNames, badAttrNames)
				if nAttr > len(goodAttrNames) {
					name = fmt.Sprintf("a%d", ai)
				}
				switch r.IntN(4) {
				case 0:
					s := randomString(r, 40)
					if r.Float64() < bad/4 {
						s = strings.Repeat("s", 65)
					}
					d.StringAttribute(name, s)
				case 1:
					d.IntAttribute(name, r.Int64())
				case 2:
					d.BoolAttribute(name, r.IntN(2) == 0)
				case 3:
					d.VersionAttribute(name, pick(r, bad/2, goodVersions, badVersions))
				}
			}
			if r.IntN(3) == 0 {
				var policy *RequestPolicy
				if r.IntN(3) == 0 {
					d.AllowMultipleAllocations()
					if r.Float64() < bad/2 {
						policy = &RequestPolicy{Default: qp("3Gi"), ValidValues: []resource.Quantity{q("2Gi"), q("1Gi")}}
					} else {
						policy = &RequestPolicy{Default: qp("1Gi"), Min: qp("1Gi"), Step: qp("1Gi")}
					}
				}
				d.Capacity("memory", q("16Gi"), policy)
			}
			if r.Float64() < 0.05 {
				eff := []TaintEffect{NoSchedule, NoExecute, NoEffect}[r.IntN(3)]
				if r.Float64() < bad/4 {
					eff = "Evict"
				}
				d.Taint(Taint{Key: pick(r, bad/4, goodLabelKeys, badLabelKeys), Value: pick(r, bad/4, []string{"", "xid-79"}, []string{"not valid"}), Effect: eff})
			}
			if nSets > 0 && r.IntN(2) == 0 {
				set := fmt.Sprintf("gpu-%d", r.IntN(nSets+1)) // sometimes one that does not exist
				d.ConsumesCounters(set, map[string]resource.Quantity{"c0": randomQuantity(r)})
			}
			if r.Float64() < 0.03 {
				fail := []string{"example.com/failed"}
				if r.Float64() < bad/2 {
					fail = nil
				}
				d.BindingConditions([]string{"example.com/ready"}, fail, r.IntN(2) == 0)
			}
			p.Devices = append(p.Devices, d)
		}
		inv.Pools = append(inv.Pools, p)
	}
	return inv
}
