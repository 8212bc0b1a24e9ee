package nvmlsim

import (
	"errors"
	"fmt"
	"maps"
	"math/rand"
	"path/filepath"
	"slices"
	"testing"

	"github.com/drakit/drakit/examples/nvidia/nvml"
	"github.com/drakit/drakit/mig"
)

// memSim opens an in-memory simulator of the named server.
func memSim(t testing.TB, server string, opts ...Option) *Sim {
	t.Helper()
	s, err := Open("", append([]Option{WithServer(server)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// syntheticProduct is a made-up GPU on which every placement rule binds
// on its own, which NVIDIA's geometries do not allow: there each profile's
// count is no more than its placements, a single "+me" profile has count
// 1, and memory runs out before compute. Here 1g has 8 placements but a
// count of 2, two "+me" profiles exist (the second +me is refused with
// either's count to spare), and 4g+2g fit the memory but not the 5 compute
// slices.
func syntheticProduct(t testing.TB) *mig.Product {
	t.Helper()
	p, err := mig.NewProduct("TEST-8M5C", 8, 5, []mig.Profile{
		{
			Name:         "1g.5gb",
			ID:           19,
			MemorySlices: 1,
			MaxCount:     2,
			Starts:       []int{0, 1, 2, 3, 4, 5, 6, 7},
		},
		{
			Name:         "1g.5gb+me",
			ID:           20,
			MemorySlices: 1,
			MaxCount:     2,
			Starts:       []int{0, 1, 2, 3, 4, 5, 6, 7},
		},
		{Name: "2g.10gb", ID: 14, MemorySlices: 2, MaxCount: 4, Starts: []int{0, 2, 4, 6}},
		{Name: "2g.10gb+me", ID: 21, MemorySlices: 2, MaxCount: 1, Starts: []int{0, 2, 4, 6}},
		{Name: "4g.20gb", ID: 5, MemorySlices: 4, MaxCount: 2, Starts: []int{0, 4}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// ruleCases are the simulators the rule tests run on: every server model,
// and the synthetic product.
func ruleCases(t *testing.T) map[string]func() *Sim {
	cases := map[string]func() *Sim{}
	for _, srv := range Servers() {
		cases[srv.Name] = func() *Sim { return memSim(t, srv.Name) }
	}
	cases["synthetic"] = func() *Sim {
		return memSim(t, "dgx-h100", WithProduct(syntheticProduct(t)))
	}
	return cases
}

// geometry is what the placement rules see of a product: profile IDs,
// slices, counts, "+me" and placements, not names or memory sizes.
func geometry(p *mig.Product) string {
	g := fmt.Sprintf("%d/%d", p.MemorySlices, p.ComputeSlices)
	for _, pr := range p.Profiles {
		g += fmt.Sprintf(
			";%d:%d:%d:%d:%v:%v",
			pr.ID,
			pr.ComputeSlices,
			pr.MemorySlices,
			pr.MaxCount,
			pr.MediaExtensions,
			pr.Starts,
		)
	}
	return g
}

// layoutOf reads the simulator's GPU instances on gpu as a mig.Layout.
func layoutOf(t testing.TB, nv nvml.Interface, p *mig.Product, gpu int) mig.Layout {
	t.Helper()
	gis, err := nv.GPUInstances(gpu)
	if err != nil {
		t.Fatal(err)
	}
	l := mig.Layout{}
	for _, gi := range gis {
		l = append(
			l,
			mig.Instance{Profile: profileName(t, p, gi.ProfileID), Start: gi.Placement.Start},
		)
	}
	return l
}

func profileName(t testing.TB, p *mig.Product, id int) string {
	for _, pr := range p.Profiles {
		if pr.ID == id {
			return pr.Name
		}
	}
	t.Fatalf("no profile %d on %s", id, p.Name)
	return ""
}

// createInstance creates in on gpu through the Interface.
func createInstance(
	nv nvml.Interface,
	p *mig.Product,
	gpu int,
	in mig.Instance,
) (nvml.GPUInstance, error) {
	pr, err := p.Profile(in.Profile)
	if err != nil {
		return nvml.GPUInstance{}, err
	}
	return nv.CreateGPUInstance(gpu, pr.ID, mig.Placement{Start: in.Start, Size: pr.MemorySlices})
}

// classOf is the NVML error class real NVML returns for a layout the mig
// validator rejects with verr.
func classOf(verr error) error {
	switch {
	case errors.Is(verr, mig.ErrPlacement), errors.Is(verr, mig.ErrUnknownProfile):
		return nvml.ErrInvalidArgument
	case errors.Is(verr, mig.ErrOverlap),
		errors.Is(verr, mig.ErrMaxCount),
		errors.Is(verr, mig.ErrMediaExtensions),
		errors.Is(verr, mig.ErrCompute):
		return nvml.ErrInsufficientResources
	}
	return fmt.Errorf("unexpected validator error %w", verr)
}

func destroyAll(t testing.TB, nv nvml.Interface, gpu int) {
	t.Helper()
	gis, err := nv.GPUInstances(gpu)
	if err != nil {
		t.Fatal(err)
	}
	for _, gi := range gis {
		for _, ci := range gi.ComputeInstances {
			if err := nv.DestroyComputeInstance(gpu, gi.ID, ci.ID); err != nil {
				t.Fatal(err)
			}
		}
		if err := nv.DestroyGPUInstance(gpu, gi.ID); err != nil {
			t.Fatal(err)
		}
	}
}

// TestSimCreatesEveryValidLayout creates every layout of the mig
// enumeration (all profiles, "+me" included) on every simulated server, in
// a shuffled order, and reads it back.
func TestSimCreatesEveryValidLayout(t *testing.T) {
	for name, open := range ruleCases(t) {
		t.Run(name, func(t *testing.T) {
			s := open()
			p := s.Product()
			layouts, err := p.Layouts()
			if err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewSource(1))
			instances := 0
			for i, l := range layouts {
				gpu := i % 8
				order := append(mig.Layout(nil), l...)
				rng.Shuffle(len(order), func(a, b int) { order[a], order[b] = order[b], order[a] })
				for _, in := range order {
					if _, err := createInstance(s, p, gpu, in); err != nil {
						t.Fatalf("layout %s in order %s: %v", l, order, err)
					}
					instances++
				}
				if got := layoutOf(t, s, p, gpu); got.String() != l.String() {
					t.Fatalf("created %s, simulator lists %s", l, got)
				}
				destroyAll(t, s, gpu)
			}
			t.Logf("%s: %d valid layouts created (%d GPU instances)", name, len(layouts), instances)
			if name != "synthetic" && len(layouts) != 2318 {
				t.Errorf(
					"%d layouts, the mig enumeration has 2318 for 8-slice GPUs with +me",
					len(layouts),
				)
			}
		})
	}
}

// TestSimRefusesEveryInvalidLayoutAtFirstOffendingInstance: any sequence
// of creates that the validator rejects has a valid prefix (a layout of
// the enumeration, or none) and a first offending instance. For every
// valid layout and every profile at every start (allowed or not), the
// simulator must refuse exactly the instances the validator rejects, with
// the error class real NVML returns, and change nothing.
func TestSimRefusesEveryInvalidLayoutAtFirstOffendingInstance(t *testing.T) {
	done := map[string]string{} // geometry -> case that covered it
	cases := ruleCases(t)
	for _, name := range sortedKeys(cases) {
		open := cases[name]
		t.Run(name, func(t *testing.T) {
			s := open()
			p := s.Product()
			if other, ok := done[geometry(p)]; ok {
				t.Skipf(
					"%s has the geometry of %s, covered there (the rules see only IDs, slices, "+
						"counts, +me and placements)",
					p.Name,
					other,
				)
			}
			done[geometry(p)] = name
			layouts, err := p.Layouts()
			if err != nil {
				t.Fatal(err)
			}
			layouts = append([]mig.Layout{{}}, layouts...)
			refused, byRule := map[error]int{}, map[error]int{}
			accepted := 0
			for _, l := range layouts {
				for _, in := range l {
					if _, err := createInstance(s, p, 0, in); err != nil {
						t.Fatal(err)
					}
				}
				before := layoutOf(t, s, p, 0).String()
				for _, pr := range p.Profiles {
					for start := -1; start <= p.MemorySlices; start++ {
						in := mig.Instance{Profile: pr.Name, Start: start}
						verr := p.Validate(append(append(mig.Layout(nil), l...), in))
						gi, err := createInstance(s, p, 0, in)
						if verr == nil {
							if err != nil {
								t.Fatalf(
									"%s + %s: validator accepts, simulator refuses: %v",
									l,
									in,
									err,
								)
							}
							if err := s.DestroyGPUInstance(0, gi.ID); err != nil {
								t.Fatal(err)
							}
							accepted++
							continue
						}
						want := classOf(verr)
						if !errors.Is(err, want) {
							t.Fatalf(
								"%s + %s: validator says %v; simulator returned %v, want %v",
								l,
								in,
								verr,
								err,
								want,
							)
						}
						refused[want]++
						for _, rule := range []error{
							mig.ErrPlacement,
							mig.ErrOverlap,
							mig.ErrMaxCount,
							mig.ErrMediaExtensions,
							mig.ErrCompute,
						} {
							if errors.Is(verr, rule) {
								byRule[rule]++
							}
						}
						if after := layoutOf(t, s, p, 0).String(); after != before {
							t.Fatalf(
								"%s + %s: refused create changed the GPU from %s to %s",
								l,
								in,
								before,
								after,
							)
						}
					}
				}
				destroyAll(t, s, 0)
			}
			t.Logf(
				"%s: over %d valid prefixes, %d extensions accepted, refused %d as insufficient "+
					"resources and %d as invalid argument",
				name,
				len(layouts),
				accepted,
				refused[nvml.ErrInsufficientResources],
				refused[nvml.ErrInvalidArgument],
			)
			t.Logf(
				"%s: refused by rule: placement %d, overlap %d, max count %d, +me %d, compute %d",
				name,
				byRule[mig.ErrPlacement],
				byRule[mig.ErrOverlap],
				byRule[mig.ErrMaxCount],
				byRule[mig.ErrMediaExtensions],
				byRule[mig.ErrCompute],
			)
			if name == "synthetic" {
				for _, rule := range []error{
					mig.ErrMaxCount, mig.ErrMediaExtensions, mig.ErrCompute,
				} {
					if byRule[rule] == 0 {
						t.Errorf(
							"no create refused for %v alone; the synthetic product must make "+
								"every rule bind",
							rule,
						)
					}
				}
			}
		})
	}
}

// TestSimRefusesRandomSequencesWhereTheValidatorDoes creates random
// sequences of instances until the first refusal, which must come at the
// first prefix the validator rejects.
func TestSimRefusesRandomSequencesWhereTheValidatorDoes(t *testing.T) {
	s := memSim(t, "dgx-h100")
	p := s.Product()
	rng := rand.New(rand.NewSource(7))
	for seq := range 5000 {
		var l mig.Layout
		for {
			pr := p.Profiles[rng.Intn(len(p.Profiles))]
			in := mig.Instance{Profile: pr.Name, Start: rng.Intn(p.MemorySlices + 1)}
			verr := p.Validate(append(append(mig.Layout(nil), l...), in))
			_, err := createInstance(s, p, 0, in)
			if (verr == nil) != (err == nil) {
				t.Fatalf(
					"sequence %d: %s then %s: validator %v, simulator %v",
					seq,
					l,
					in,
					verr,
					err,
				)
			}
			if verr != nil {
				if !errors.Is(err, classOf(verr)) {
					t.Fatalf(
						"sequence %d: %s then %s: simulator %v, want class of %v",
						seq,
						l,
						in,
						err,
						verr,
					)
				}
				break
			}
			l = append(l, in)
		}
		destroyAll(t, s, 0)
	}
}

// TestSimWrongPlacementSizeIsInvalid: a placement whose size is not the
// profile's is an invalid argument, as in NVML.
func TestSimWrongPlacementSizeIsInvalid(t *testing.T) {
	s := memSim(t, "dgx-a100-40gb")
	for _, c := range []struct {
		profile int
		at      mig.Placement
	}{
		{9, mig.Placement{Start: 0, Size: 3}},  // 3g is 4 slices (go-nvml's mock says 3)
		{15, mig.Placement{Start: 0, Size: 1}}, // 1g large is 2 slices
		{0, mig.Placement{Start: 0, Size: 7}},  // 7g is 8 slices
		{42, mig.Placement{Start: 0, Size: 1}}, // no such profile
	} {
		_, err := s.CreateGPUInstance(0, c.profile, c.at)
		if !errors.Is(err, nvml.ErrInvalidArgument) {
			t.Errorf("profile %d at %+v: got %v, want invalid argument", c.profile, c.at, err)
		}
	}
	if _, err := s.CreateGPUInstance(8, 19, mig.Placement{Start: 0, Size: 1}); !errors.Is(
		err,
		nvml.ErrInvalidArgument,
	) {
		t.Errorf("GPU 8 of 8: got %v, want invalid argument", err)
	}
}

func TestSimMIGModeOffIsNotSupported(t *testing.T) {
	for _, c := range []struct {
		server     string
		needsReset bool
	}{{"dgx-a100-80gb", true}, {"dgx-h100", false}} {
		t.Run(c.server, func(t *testing.T) {
			s, err := Open("", WithServer(c.server), WithMIGEnabled(false))
			if err != nil {
				t.Fatal(err)
			}
			at := mig.Placement{Start: 0, Size: 8}
			if _, err := s.CreateGPUInstance(0, 0, at); !errors.Is(err, nvml.ErrNotSupported) {
				t.Fatalf("create with MIG off: got %v, want not supported", err)
			}
			if gis, err := s.GPUInstances(0); err != nil || len(gis) != 0 {
				t.Fatalf("GPU instances with MIG off: %v, %v", gis, err)
			}
			if _, err := s.SetMigMode(0, true); err != nil {
				t.Fatal(err)
			}
			m, _ := s.MigMode(0)
			if m.Current == c.needsReset || !m.Pending {
				t.Fatalf("after enabling: %+v (needs reset: %v)", m, c.needsReset)
			}
			if c.needsReset {
				if _, err := s.CreateGPUInstance(0, 0, at); !errors.Is(err, nvml.ErrNotSupported) {
					t.Fatalf("create with MIG pending: got %v, want not supported", err)
				}
				if err := s.ResetGPU(0); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := s.CreateGPUInstance(0, 0, at); err != nil {
				t.Fatal(err)
			}
			if _, err := s.SetMigMode(0, false); !errors.Is(err, nvml.ErrInUse) {
				t.Fatalf("disable MIG with an instance: got %v, want in use", err)
			}
		})
	}
}

// TestSimHalfMadeAndInUse: a GPU instance exists without a compute
// instance; destroying one that has a compute instance is refused as in
// use; a compute instance of a full GPU instance takes all its slices.
func TestSimHalfMadeAndInUse(t *testing.T) {
	s := memSim(t, "dgx-h200")
	gi, err := s.CreateGPUInstance(3, 9, mig.Placement{Start: 4, Size: 4}) // 3g.71gb
	if err != nil {
		t.Fatal(err)
	}
	gis, _ := s.GPUInstances(3)
	if len(gis) != 1 || len(gis[0].ComputeInstances) != 0 {
		t.Fatalf("half-made GPU instance not listed as such: %+v", gis)
	}
	cps, err := s.ComputeInstanceProfiles(3, gi.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(cps) != 3 || cps[2].SliceCount != 3 || cps[2].Name != "3g.71gb" ||
		cps[0].Name != "1c.3g.71gb" ||
		cps[0].InstanceCount != 3 {
		t.Fatalf("compute instance profiles of 3g: %+v", cps)
	}
	ci, err := s.CreateComputeInstance(3, gi.ID, 2)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateComputeInstance(3, gi.ID, 0); !errors.Is(
		err,
		nvml.ErrInsufficientResources,
	) {
		t.Fatalf(
			"second compute instance in a full GPU instance: got %v, want insufficient resources",
			err,
		)
	}
	if _, err := s.CreateComputeInstance(3, gi.ID, 4); !errors.Is(err, nvml.ErrNotSupported) {
		t.Fatalf("7-slice compute instance in 3g: got %v, want not supported", err)
	}
	if err := s.DestroyGPUInstance(3, gi.ID); !errors.Is(err, nvml.ErrInUse) {
		t.Fatalf("destroy GPU instance with a compute instance: got %v, want in use", err)
	}
	if err := s.DestroyComputeInstance(3, gi.ID, ci.ID); err != nil {
		t.Fatal(err)
	}
	if err := s.DestroyComputeInstance(3, gi.ID, ci.ID); !errors.Is(err, nvml.ErrNotFound) {
		t.Fatalf("destroy compute instance twice: got %v, want not found", err)
	}
	if err := s.DestroyGPUInstance(3, gi.ID); err != nil {
		t.Fatal(err)
	}
	if err := s.DestroyGPUInstance(3, gi.ID); !errors.Is(err, nvml.ErrNotFound) {
		t.Fatalf("destroy GPU instance twice: got %v, want not found", err)
	}
	if _, err := s.CreateComputeInstance(3, gi.ID, 0); !errors.Is(err, nvml.ErrNotFound) {
		t.Fatalf("compute instance in a destroyed GPU instance: got %v, want not found", err)
	}
}

// TestSimComputeInstancesShareAGPUInstance: smaller compute instances fill
// a GPU instance up to its slices and the profile counts.
func TestSimComputeInstancesShareAGPUInstance(t *testing.T) {
	s := memSim(t, "dgx-a100-40gb")
	gi, err := s.CreateGPUInstance(0, 0, mig.Placement{Start: 0, Size: 8}) // 7g.40gb
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		profile int
		want    error
	}{
		{2, nil},                           // 3 slices: 0-2
		{2, nil},                           // 3 slices: 3-5
		{2, nvml.ErrInsufficientResources}, // count 7/3 = 2
		{0, nil},                           // 1 slice: 6
		{0, nvml.ErrInsufficientResources}, // no slice left
	}
	for i, st := range steps {
		_, err := s.CreateComputeInstance(0, gi.ID, st.profile)
		if (st.want == nil) != (err == nil) || (st.want != nil && !errors.Is(err, st.want)) {
			t.Fatalf("step %d profile %d: got %v, want %v", i, st.profile, err, st.want)
		}
	}
}

// TestSimRandomOperationsMatchTheValidator runs a seeded random sequence
// of creates and destroys of GPU and compute instances on all GPUs and
// checks after every step that the simulator did what the mig validator
// allows, nothing else, and that every GPU's layout is valid.
func TestSimRandomOperationsMatchTheValidator(t *testing.T) {
	s := memSim(t, "dgx-b200")
	n := randomOps(t, s, s.Product(), rand.New(rand.NewSource(42)), 20000, nil)
	t.Logf("20000 random operations: %v", n)
}

// TestSimRandomOperationsSurviveRestarts runs random operations on a
// state file, reopening the simulator (a new process's view) before every
// step.
func TestSimRandomOperationsSurviveRestarts(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.json")
	s, err := Open(path, WithServer("dgx-a100-40gb"))
	if err != nil {
		t.Fatal(err)
	}
	n := randomOps(t, s, s.Product(), rand.New(rand.NewSource(3)), 300, func() nvml.Interface {
		s2, err := Open(path)
		if err != nil {
			t.Fatal(err)
		}
		return s2
	})
	t.Logf("300 random operations with restarts: %v", n)
}

// randomOps performs steps random operations and checks them against a
// model kept with the mig validator; reopen, when set, gives a fresh
// Interface before each step. It returns counts by outcome.
func randomOps(
	t *testing.T,
	nv nvml.Interface,
	p *mig.Product,
	rng *rand.Rand,
	steps int,
	reopen func() nvml.Interface,
) map[string]int {
	t.Helper()
	model := make([]mig.Layout, 8)
	full := make([]map[int]bool, 8) // GPU instance ID -> has a compute instance
	ids := make([]map[int]mig.Instance, 8)
	for g := range 8 {
		full[g], ids[g] = map[int]bool{}, map[int]mig.Instance{}
	}
	count := map[string]int{}
	for step := range steps {
		if reopen != nil {
			nv = reopen()
		}
		g := rng.Intn(8)
		gis, err := nv.GPUInstances(g)
		if err != nil {
			t.Fatal(err)
		}
		switch op := rng.Intn(10); {
		case op < 5 || len(gis) == 0: // create a GPU instance
			pr := p.Profiles[rng.Intn(len(p.Profiles))]
			in := mig.Instance{Profile: pr.Name, Start: rng.Intn(p.MemorySlices)}
			verr := p.Validate(append(append(mig.Layout(nil), model[g]...), in))
			gi, err := createInstance(nv, p, g, in)
			if (verr == nil) != (err == nil) || (verr != nil && !errors.Is(err, classOf(verr))) {
				t.Fatalf(
					"step %d GPU %d: %s + %s: validator %v, simulator %v",
					step,
					g,
					model[g],
					in,
					verr,
					err,
				)
			}
			if err == nil {
				model[g] = append(model[g], in)
				ids[g][gi.ID] = in
				count["create GI"]++
			} else {
				count["create GI refused"]++
			}
		case op < 7: // create a compute instance in a GPU instance
			gi := gis[rng.Intn(len(gis))]
			pr, _ := p.Profile(ids[g][gi.ID].Profile)
			cps, err := nv.ComputeInstanceProfiles(g, gi.ID)
			if err != nil {
				t.Fatal(err)
			}
			_, err = nv.CreateComputeInstance(g, gi.ID, cps[len(cps)-1].ID) // the full one
			if full[g][gi.ID] != errors.Is(err, nvml.ErrInsufficientResources) ||
				(!full[g][gi.ID] && err != nil) {
				t.Fatalf(
					"step %d GPU %d: full compute instance in %s (has one: %v): %v",
					step,
					g,
					pr.Name,
					full[g][gi.ID],
					err,
				)
			}
			if err == nil {
				full[g][gi.ID] = true
				count["create CI"]++
			} else {
				count["create CI refused"]++
			}
		case op < 8: // destroy a compute instance
			gi := gis[rng.Intn(len(gis))]
			if len(gi.ComputeInstances) == 0 {
				if full[g][gi.ID] {
					t.Fatalf(
						"step %d GPU %d: compute instance of GPU instance %d vanished",
						step,
						g,
						gi.ID,
					)
				}
				continue
			}
			if err := nv.DestroyComputeInstance(g, gi.ID, gi.ComputeInstances[0].ID); err != nil {
				t.Fatal(err)
			}
			full[g][gi.ID] = false
			count["destroy CI"]++
		default: // destroy a GPU instance
			gi := gis[rng.Intn(len(gis))]
			err := nv.DestroyGPUInstance(g, gi.ID)
			if full[g][gi.ID] != errors.Is(err, nvml.ErrInUse) || (!full[g][gi.ID] && err != nil) {
				t.Fatalf(
					"step %d GPU %d: destroy GPU instance %d (has a compute instance: %v): %v",
					step,
					g,
					gi.ID,
					full[g][gi.ID],
					err,
				)
			}
			if err != nil {
				count["destroy GI in use"]++
				continue
			}
			in := ids[g][gi.ID]
			delete(ids[g], gi.ID)
			for i, x := range model[g] {
				if x == in {
					model[g] = append(model[g][:i:i], model[g][i+1:]...)
					break
				}
			}
			count["destroy GI"]++
		}
		got := layoutOf(t, nv, p, g)
		if got.String() != model[g].String() {
			t.Fatalf("step %d GPU %d: simulator has %s, model %s", step, g, got, model[g])
		}
		if err := p.Validate(got); err != nil {
			t.Fatalf("step %d GPU %d: simulator reached an invalid layout: %v", step, g, err)
		}
	}
	return count
}

func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }
