package engine_test

import (
	"errors"
	"strings"
	"testing"

	partition "github.com/drakit/drakit/internal/engine" // the tests predate the move
)

func mustLayout(t testing.TB, s string) partition.Layout {
	t.Helper()
	l, err := partition.ParseLayout(s)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestValidate(t *testing.T) {
	in, ti, co := instinctLike(t), tiles(t), cores(t)
	for _, tc := range []struct {
		name   string
		scheme *partition.Scheme
		layout string
		want   error
		msg    string
	}{
		{"one mode", in, "CPX/NPS4@0,CPX/NPS4@5,CPX/NPS4@7", nil, ""},
		{"canonical name", in, "cpx/nps1@0,Cpx/Nps1@1", nil, ""},
		{"modes differ", in, "CPX/NPS1@0,CPX/NPS4@1", partition.ErrMode, "needs mode CPX/NPS4, instances[0] (CPX/NPS1) mode CPX/NPS1"},
		{"modes differ, larger", in, "DPX/NPS1@0,QPX/NPS1@2", partition.ErrMode, ""},
		{"XCDs overlap", in, "DPX/NPS1@0,DPX/NPS1@0", partition.ErrOverlap, "on XCD 0"},
		{"no such placement", in, "DPX/NPS1@2", partition.ErrPlacement, "may start at [0 1]"},
		{"unknown profile", in, "TPX/NPS1@0", partition.ErrUnknownProfile, ""},
		{"compute and memory apart", ti, "quarter@0,quarter@1,quarter@2,quarter@3", nil, ""},
		{"banks overlap", ti, "half@0,wide@10", partition.ErrOverlap, "on bank 2"},
		{"tiles overlap", ti, "half@0,wide@1", partition.ErrOverlap, "on tile 0"},
		{"one codec", ti, "quarter+codec@0,quarter+codec@2", partition.ErrExtra, "codec"},
		{"wide twice", ti, "wide@0,wide@9", nil, ""},
		{"counted memory", co, "c2@0,c2@2,c1@4", nil, ""},
		{"memory exhausted", co, "c2@0,c2@2,c2@4", partition.ErrMemory, "10 in use, 5 more needed, 12 exist"},
		{"partitions per card", co, "c1@0,c1@1,c1@2,c1@3,c1@4", partition.ErrPartitions, "at most 4"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.scheme.Validate(mustLayout(t, tc.layout))
			if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
				t.Fatalf("Validate(%s) = %v, want %v", tc.layout, err, tc.want)
			}
			if err != nil && !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("Validate(%s) = %q, want it to contain %q", tc.layout, err, tc.msg)
			}
		})
	}
	var unbuilt partition.Scheme
	if err := unbuilt.Validate(nil); !errors.Is(err, partition.ErrSchemeNotBuilt) {
		t.Errorf("unbuilt scheme: %v, want ErrSchemeNotBuilt", err)
	}
}

func TestNewSchemeErrors(t *testing.T) {
	good := func() partition.Scheme {
		return partition.Scheme{
			Name:    "x",
			Compute: partition.Units{Count: 4, Placed: true},
			Memory:  partition.Units{Count: 4},
			Profiles: []partition.Profile{
				{Name: "one", Compute: 1, Memory: 1, MaxCount: 4, Placements: []partition.Placement{{Start: 0}, {Start: 1, Compute: 1}, {Start: 2, Compute: 2}, {Start: 3, Compute: 3}}},
				{Name: "all", ID: 1, Compute: 4, Memory: 4, MaxCount: 1, Placements: []partition.Placement{{}}},
			},
		}
	}
	if _, err := partition.NewScheme(good()); err != nil {
		t.Fatalf("good scheme: %v", err)
	}
	for _, tc := range []struct {
		name string
		edit func(*partition.Scheme)
		want string
	}{
		{"no name", func(s *partition.Scheme) { s.Name = "" }, "name is empty"},
		{"no compute", func(s *partition.Scheme) { s.Compute.Count = 0 }, "compute.count must be positive"},
		{"too many placed units", func(s *partition.Scheme) { s.Compute.Count = 33 }, "out of range 0..32"},
		{"no profiles", func(s *partition.Scheme) { s.Profiles = nil }, "0 profiles"},
		{"duplicate profile", func(s *partition.Scheme) { s.Profiles[1].Name = "one" }, "duplicate profile one"},
		{"same device names", func(s *partition.Scheme) { s.Profiles[1].Name = "ONE" }, `both name their devices "one"`},
		{"layout characters", func(s *partition.Scheme) { s.Profiles[1].Name = "a@b" }, `contains one of`},
		{"placement outside", func(s *partition.Scheme) { s.Profiles[0].Placements[3].Compute = 4 }, "compute units 4..4 do not fit the card's 4"},
		{"counted dimension with a start", func(s *partition.Scheme) { s.Profiles[0].Placements[0].Memory = 1 }, "memory is not placed"},
		{"duplicate start", func(s *partition.Scheme) { s.Profiles[0].Placements[1].Start = 0 }, "duplicate start 0"},
		{"same units twice", func(s *partition.Scheme) { s.Profiles[0].Placements[1].Compute = 0 }, "the same units as another placement"},
		{"unknown extra", func(s *partition.Scheme) { s.Profiles[0].Extras = map[string]int{"codec": 1} }, `"codec" is not one of the scheme's extras`},
		{"max count", func(s *partition.Scheme) { s.Profiles[0].MaxCount = 0 }, "maxCount 0"},
		{"device name", func(s *partition.Scheme) { s.Names.Device = "GPU" }, "names.device"},
		{"attribute name", func(s *partition.Scheme) { s.Names.ProfileAttribute = "profile-name" }, "names.profileAttribute"},
		{"nothing placed", func(s *partition.Scheme) {
			s.Compute.Placed = false
			s.Profiles[0].Placements = []partition.Placement{{}}
		}, "covers no placed unit"},
		{"modes without a placed dimension", func(s *partition.Scheme) {
			s.Compute.Placed, s.Memory.Placed = false, true
			s.Profiles[0].Placements = []partition.Placement{{Start: 0}, {Start: 1, Memory: 1}}
			s.Profiles[0].Memory, s.Profiles[0].MaxCount = 0, 2
			s.Profiles[0].Mode, s.Profiles[1].Mode = "a", "b"
		}, "covers no placed unit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			def := good()
			tc.edit(&def)
			_, err := partition.NewScheme(def)
			if !errors.Is(err, partition.ErrInvalidScheme) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("NewScheme = %v, want ErrInvalidScheme containing %q", err, tc.want)
			}
		})
	}
}

// TestSchemeIsACopy checks that NewScheme keeps nothing of its input that
// the caller may change afterwards.
func TestSchemeIsACopy(t *testing.T) {
	def := partition.Scheme{
		Name:    "copy",
		Compute: partition.Units{Count: 2, Placed: true},
		Profiles: []partition.Profile{
			{Name: "one", Compute: 1, MaxCount: 2, Placements: []partition.Placement{{Start: 0}, {Start: 1, Compute: 1}}},
		},
	}
	s, err := partition.NewScheme(def)
	if err != nil {
		t.Fatal(err)
	}
	def.Profiles[0].Placements[1].Compute = 0
	def.Profiles[0].Name = "changed"
	if err := s.Validate(mustLayout(t, "one@0,one@1")); err != nil {
		t.Errorf("scheme changed with its input: %v", err)
	}
}

func TestPicture(t *testing.T) {
	ti := tiles(t)
	got := ti.Picture("acc-0", mustLayout(t, "half@0*,quarter@3"))
	want := "acc-0        |quarter |........|half*            |\n" +
		"             |half*            |........|quarter |"
	if got != want {
		t.Errorf("Picture =\n%s\nwant\n%s", got, want)
	}
}
