package mig

import (
	"testing"
)

// FuzzLayout feeds arbitrary text through ParseLayout, Validate and
// Picture: no panics, and a valid layout prints back to itself.
func FuzzLayout(f *testing.F) {
	for _, s := range []string{"-", "4g.40gb@0*,3g.40gb@4", "1g.10gb+me@6", "7g.80gb@9", "1g.10gb@-1", "3g.40gb@2,1g.10gb@2*"} {
		f.Add(s)
	}
	h, _ := Lookup("H100-80GB")
	f.Fuzz(func(t *testing.T, s string) {
		l, err := ParseLayout(s)
		if err != nil {
			return
		}
		_ = h.Picture("gpu", l)
		if h.Validate(l) != nil {
			return
		}
		again, err := ParseLayout(l.String())
		if err != nil {
			t.Fatalf("%q prints as %q, which does not parse: %v", s, l.String(), err)
		}
		if again.String() != l.String() {
			t.Fatalf("round trip %q -> %q", l.String(), again.String())
		}
		if _, err := PlanFleet([]FleetGPU{{Node: "n", Product: testProduct("H100-80GB"), Layout: l}}, []Request{{Profile: "1g.10gb"}}); err != nil {
			t.Fatalf("plan on valid layout %s: %v", l, err)
		}
	})
}

// FuzzProfileName checks that ParseProfileName never panics and that its
// canonical form parses to itself.
func FuzzProfileName(f *testing.F) {
	for _, s := range []string{"1g.10gb", "MIG 1g.10gb+me", "7G.141GB", "1g10gb", "+me"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseProfileName(s)
		if err != nil {
			return
		}
		m, err := ParseProfileName(n.String())
		if err != nil || m.String() != n.String() {
			t.Fatalf("%q -> %q -> %v, %v", s, n.String(), m, err)
		}
	})
}
