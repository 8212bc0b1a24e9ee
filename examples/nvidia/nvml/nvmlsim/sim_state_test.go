package nvmlsim

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/drakit/drakit/examples/nvidia/nvml"
	"github.com/drakit/drakit/mig"
)

// migUUID is the form of a MIG device's UUID.
var migUUID = regexp.MustCompile(
	`^MIG-[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`,
)

// TestSimUUIDsAreUniqueAndStable creates many MIG devices, checks the
// UUIDs' form and uniqueness, and reads them back from the state file
// through a second simulator.
func TestSimUUIDsAreUniqueAndStable(t *testing.T) {
	mem := memSim(t, "dgx-a100-40gb")
	seen := map[string]bool{}
	makeAll := func(s *Sim, gpus, rounds int) {
		for round := range rounds {
			for g := range gpus {
				destroyAll(t, s, g)
				for start := range 7 {
					gi, err := s.CreateGPUInstance(g, 19, mig.Placement{Start: start, Size: 1})
					if err != nil {
						t.Fatal(err)
					}
					ci, err := s.CreateComputeInstance(g, gi.ID, 0)
					if err != nil {
						t.Fatal(err)
					}
					if !migUUID.MatchString(ci.UUID) || seen[ci.UUID] {
						t.Fatalf("round %d: MIG UUID %q malformed or repeated", round, ci.UUID)
					}
					seen[ci.UUID] = true
				}
			}
		}
	}
	makeAll(mem, 8, 20)
	t.Logf("%d MIG UUIDs, all distinct", len(seen))

	path := filepath.Join(t.TempDir(), "state.json")
	s, err := Open(path, WithServer("dgx-a100-40gb"))
	if err != nil {
		t.Fatal(err)
	}
	makeAll(s, 2, 1)
	gpus1, _ := s.GPUs()
	s2, err := Open(path, WithServer("dgx-a100-40gb"))
	if err != nil {
		t.Fatal(err)
	}
	gpus2, _ := s2.GPUs()
	for g := range 8 {
		a, _ := s.GPUInstances(g)
		b, _ := s2.GPUInstances(g)
		if want := map[bool]int{true: 7, false: 0}[g < 2]; len(a) != want || len(b) != want {
			t.Fatalf("GPU %d: %d instances, reopened %d, want %d", g, len(a), len(b), want)
		}
		for i := range a {
			if a[i].ComputeInstances[0].UUID != b[i].ComputeInstances[0].UUID {
				t.Fatalf("GPU %d: UUID changed on reopen", g)
			}
		}
		if gpus1[g].UUID != gpus2[g].UUID || !strings.HasPrefix(gpus1[g].UUID, "GPU-") {
			t.Fatalf("GPU UUID %q vs %q", gpus1[g].UUID, gpus2[g].UUID)
		}
	}
	if _, err := Open(path, WithServer("dgx-h100")); err == nil {
		t.Fatal("opening an A100 state as an H100 succeeded")
	}
}

// TestSimStateIsSafeForConcurrentProcesses: simulators sharing a state
// file (each call takes its own flock, as separate processes do) race to
// create 1g instances at every start of GPU 0; every start must be won
// exactly once and no update lost.
func TestSimStateIsSafeForConcurrentProcesses(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.json")
	if _, err := Open(path, WithServer("dgx-h100")); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wins := make([][]int, 4)
	for w := range 4 {
		s, err := Open(path)
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for start := range 7 {
				_, err := s.CreateGPUInstance(0, 19, mig.Placement{Start: start, Size: 1})
				switch {
				case err == nil:
					wins[w] = append(wins[w], start)
				case !errors.Is(err, nvml.ErrInsufficientResources):
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	won := map[int]int{}
	for _, ws := range wins {
		for _, st := range ws {
			won[st]++
		}
	}
	s, _ := Open(path)
	gis, _ := s.GPUInstances(0)
	if len(gis) != 7 || len(won) != 7 {
		t.Fatalf("%d instances exist, starts won: %v", len(gis), won)
	}
	for st, n := range won {
		if n != 1 {
			t.Fatalf("start %d won %d times", st, n)
		}
	}
}

// raceEnv carries the state file path to TestRaceHelperProcess.
const raceEnv = "DRAKIT_NVML_RACE_STATE"

// TestRaceHelperProcess is a child of TestProcessesShareTheStateSafely: it
// tries to create a 1g instance at every start of GPU 0 and prints the
// starts it won.
func TestRaceHelperProcess(t *testing.T) {
	path := os.Getenv(raceEnv)
	if path == "" {
		t.Skip("runs only as the child of TestProcessesShareTheStateSafely")
	}
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	for start := range 7 {
		_, err := s.CreateGPUInstance(0, 19, mig.Placement{Start: start, Size: 1})
		switch {
		case err == nil:
			fmt.Printf("won %d\n", start)
		case !errors.Is(err, nvml.ErrInsufficientResources):
			t.Fatal(err)
		}
	}
}

// TestProcessesShareTheStateSafely: four processes race for the seven 1g
// placements of one GPU through one state file; each placement is won
// exactly once and the state holds all seven.
func TestProcessesShareTheStateSafely(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.json")
	s, err := Open(path, WithServer("dgx-h200"))
	if err != nil {
		t.Fatal(err)
	}
	var cmds []*exec.Cmd
	var outs []*bytes.Buffer
	for range 4 {
		cmd := exec.Command(os.Args[0], "-test.run=^TestRaceHelperProcess$", "-test.count=1")
		cmd.Env = append(os.Environ(), raceEnv+"="+path)
		out := &bytes.Buffer{}
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds, outs = append(cmds, cmd), append(outs, out)
	}
	won := map[string]int{}
	for i, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Fatalf("child %d (pid %d): %v\n%s", i, cmd.Process.Pid, err, outs[i].String())
		}
		for _, line := range strings.Split(outs[i].String(), "\n") {
			if strings.HasPrefix(line, "won ") {
				won[line]++
			}
		}
	}
	gis, err := s.GPUInstances(0)
	if err != nil {
		t.Fatal(err)
	}
	if len(gis) != 7 || len(won) != 7 {
		t.Fatalf("%d instances exist; wins: %v", len(gis), won)
	}
	for w, n := range won {
		if n != 1 {
			t.Fatalf("%s by %d processes", w, n)
		}
	}
}
