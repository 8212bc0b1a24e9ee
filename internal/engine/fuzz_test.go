package engine_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	partition "github.com/drakit/drakit/internal/engine" // the tests predate the move
)

// schemeFrom builds a scheme definition from fuzz bytes: counts, flags,
// profiles, placements, extras and modes drawn from a little past each
// limit on both sides, so that about as many definitions are invalid as
// valid.
func schemeFrom(data []byte) partition.Scheme {
	i := 0
	next := func() int {
		if i >= len(data) {
			return 0
		}
		i++
		return int(data[i-1])
	}
	// A zero byte (and the end of the data) picks a valid value
	// everywhere: all zeros is one 1-unit profile on an 8 x 7 card.
	def := partition.Scheme{Name: "fz"}
	if next()%16 == 15 {
		def.Name = ""
	}
	b := next()
	def.Memory = partition.Units{Count: (8 + b) % 40, Placed: b&64 == 0}
	b = next()
	def.Compute = partition.Units{Count: (9+b)%40 - 2, Placed: b&64 == 0}
	def.MaxPartitions = (next()+1)%10 - 1
	extraNames := []string{"me", "ofa", "Bad Name", "me", ""}
	for n := next() % 6; n > 0; n-- {
		def.Extras = append(def.Extras, partition.Extra{Name: extraNames[next()%len(extraNames)], Capacity: (next()+2)%4 - 1})
	}
	modes := []string{"", "", "a", "b", "Bad Mode"}
	for n, k := (next()+1)%18, 0; k < n; k++ {
		pr := partition.Profile{Name: fmt.Sprintf("p%d", (next()+k)%20), ID: next() % 8, Compute: (next()+2)%10 - 1, Memory: (next()+2)%10 - 1, MaxCount: (next() + 1) % 5, Mode: modes[next()%len(modes)]}
		switch next() % 16 {
		case 13:
			pr.Name = ""
		case 14:
			pr.Name = "a,b"
		case 15:
			pr.Name = "P-1" // same DNS form as p-1, p_1
		}
		for k := (next() + 1) % 4; k > 0; k-- {
			pr.Placements = append(pr.Placements, partition.Placement{Start: (next()+1)%10 - 1, Memory: (next()+1)%34 - 1, Compute: (next()+1)%34 - 1})
		}
		if len(def.Extras) > 0 && next()%2 == 1 {
			pr.Extras = map[string]int{extraNames[next()%len(extraNames)]: (next() + 1) % 3}
		}
		def.Profiles = append(def.Profiles, pr)
	}
	return def
}

// FuzzScheme builds random scheme definitions: NewScheme never panics; a
// rejected definition gets one clear error (ErrInvalidScheme, "build
// scheme", one line, a reason); an accepted one validates every profile
// alone at every placement on an empty card, scores it, and plans a
// request of each profile on two cards without error.
func FuzzScheme(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{0, 0, 0, 0, 1, 0, 0, 3, 0, 0, 0, 0, 1, 0, 0, 1, 2, 0, 0, 1, 1, 0, 0, 0, 1})
	f.Add([]byte{0, 0, 0, 0, 0, 6, 1, 2, 2, 0, 0, 2, 2, 0, 1, 2, 0, 0, 0})
	f.Add([]byte("a fairly long seed that exercises many profiles and placements!"))
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 512 {
			return
		}
		def := schemeFrom(data)
		s, err := partition.NewScheme(def)
		if err != nil {
			msg := err.Error()
			if !errors.Is(err, partition.ErrInvalidScheme) {
				t.Fatalf("error %q does not wrap ErrInvalidScheme", msg)
			}
			if !strings.HasPrefix(msg, "build scheme") || strings.Contains(msg, "\n") {
				t.Fatalf("error %q: want one line starting with \"build scheme\"", msg)
			}
			if _, reason, ok := strings.Cut(msg, partition.ErrInvalidScheme.Error()+": "); !ok || strings.TrimSpace(reason) == "" {
				t.Fatalf("error %q gives no reason", msg)
			}
			return
		}
		if err := s.Validate(nil); err != nil {
			t.Fatalf("empty layout invalid: %v", err)
		}
		var reqs []partition.Request
		for _, pr := range s.Profiles {
			reqs = append(reqs, partition.Request{Profile: pr.Name})
			for _, pl := range pr.Placements {
				l := partition.Layout{{Profile: pr.Name, Start: pl.Start}}
				if err := s.Validate(l); err != nil {
					t.Fatalf("%s alone at %d on an empty card: %v", pr.Name, pl.Start, err)
				}
				if _, err := s.Score(l); err != nil {
					t.Fatalf("score %s@%d: %v", pr.Name, pl.Start, err)
				}
			}
		}
		fleet := []partition.FleetCard{{Node: "n", Index: 0, Scheme: s}, {Node: "n", Index: 1, Scheme: s}}
		plan, err := partition.PlanFleet(fleet, reqs, partition.WithWorkBudget(10_000))
		if err != nil {
			t.Fatalf("plan: %v", err)
		}
		if len(plan.Assignments)+len(plan.Unplaced) != len(reqs) {
			t.Fatalf("plan: %d assigned + %d unplaced of %d requests", len(plan.Assignments), len(plan.Unplaced), len(reqs))
		}
	})
}
