package lifecycle

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/drakit/drakit/driver"
	"github.com/drakit/drakit/partition/lifecycle/internal/faults"
	"github.com/drakit/drakit/statefile"
)

// The fault tests run the lifecycle in child processes (the test binary
// re-executed with childEnv set to the JSON of a childJob) and kill them
// with SIGKILL at a step, as a node's driver is killed.
const childEnv = "DRAKIT_LIFECYCLE_CHILD"

type childJob struct {
	// Do is "run" (recover like a runtime, then run the script) or
	// "hold" (open the state folder and wait to be killed).
	Do          string
	State, Tool string
	// Log is the runtime's checkpoint as the child keeps it: "begin
	// prepare a", "done prepare a {ids}", "begin unprepare a", "done
	// unprepare a", "undone a" (a half-way prepare undone at start).
	Log     string
	Dynamic []string
	Shared  bool
	// Driver and Owner, when set, open the folder for a rolling update
	// (WithRollingUpdate).
	Driver, Owner string
	// Point and N: the child kills itself at the N-th time it reaches
	// Point (none when N is 0).
	Point string
	N     int
}

// step is one call of the kubelet in the script.
type step struct {
	prepare bool
	claim   string
	devs    []string
}

// script prepares and unprepares partitions on cards c1 and c2 and card
// c3 whole, with every kind of step on the way.
var script = []step{
	{true, "a", []string{"c1-2u-0", "c2-4u-4"}},
	{true, "b", []string{"c1-1u-4"}},
	{true, "w", []string{"c3"}},
	{false, "a", nil},
	{true, "c", []string{"c2-2u-0"}},
	{false, "w", nil},
	{true, "d", []string{"c1-2u-0", "c3-4u-0"}},
}

var scriptDevs = map[string][]string{}

func init() {
	for _, s := range script {
		if s.prepare {
			scriptDevs[s.claim] = s.devs
		}
	}
}

// TestLifecycleChild is the child process.
func TestLifecycleChild(t *testing.T) {
	raw := os.Getenv(childEnv)
	if raw == "" {
		t.Skip("runs only as a child of the fault tests")
	}
	var job childJob
	if err := json.Unmarshal([]byte(raw), &job); err != nil {
		t.Fatal(err)
	}
	hits := map[string]int{}
	var mu sync.Mutex
	kill := func(point string) {
		mu.Lock()
		hits[point]++
		n := hits[point]
		mu.Unlock()
		if point == job.Point && n == job.N {
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {} // the signal is on its way
		}
	}
	faults.Hook = func(_ context.Context, point, _ string) error { kill(point); return nil }
	toolHook = kill
	tool := &fakeTool{doc: fakeDoc(job.Tool)}
	opts := []Option{WithDynamicCards(job.Dynamic...)}
	if job.Shared {
		opts = append(opts, WithSharedState())
	}
	if job.Owner != "" {
		opts = append(opts, WithRollingUpdate(job.Driver, job.Owner))
	}
	m, err := Open(job.State, tool, fakeKeyOf, opts...)
	if err != nil {
		fmt.Println("open:", err)
		os.Exit(3)
	}
	if job.Do == "hold" {
		fmt.Println("ready")
		select {}
	}
	rt := &runtimeLog{path: job.Log}
	if err := rt.recover(m); err != nil {
		t.Fatal(err)
	}
	if err := rt.run(m, script); err != nil {
		t.Fatal(err)
	}
}

// runtimeLog is the part of a runtime this test needs: its checkpoint,
// the undo of what a killed process left half-way, the reconcile with
// what it holds.
type runtimeLog struct{ path string }

func (r *runtimeLog) write(line string) error {
	f, err := os.OpenFile(r.path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = f.WriteString(line + "\n")
	return err
}

// state reads the log: the claims prepared (with the partition IDs they
// got), the claims begun and not done, and the script steps begun.
func (r *runtimeLog) state() (held map[string]map[string]string, halfway []string, begun int, err error) {
	held = map[string]map[string]string{}
	b, err := os.ReadFile(r.path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, nil, 0, err
	}
	open := map[string]bool{}
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	for sc.Scan() {
		f := strings.SplitN(sc.Text(), " ", 4)
		switch {
		case f[0] == "begin":
			begun++
			open[f[2]] = true
			if f[1] == "unprepare" {
				delete(held, f[2])
			}
		case f[0] == "done" && f[1] == "prepare":
			ids := map[string]string{}
			if err := json.Unmarshal([]byte(f[3]), &ids); err != nil {
				return nil, nil, 0, err
			}
			held[f[2]] = ids
			delete(open, f[2])
		case f[0] == "done" || f[0] == "undone":
			delete(open, f[len(f)-1])
		}
	}
	for c := range open {
		halfway = append(halfway, c)
	}
	slices.Sort(halfway)
	return held, halfway, begun, nil
}

// recover is the runtime's start: the claims left half-way are undone,
// then the lifecycle reconciles with the claims held.
func (r *runtimeLog) recover(m *Manager) error {
	ctx := context.Background()
	held, halfway, _, err := r.state()
	if err != nil {
		return err
	}
	for _, c := range halfway {
		if err := m.UnprepareClaim(ctx, claim(c).ClaimRef, nil); err != nil {
			return fmt.Errorf("undo %s: %w", c, err)
		}
		if err := r.write("undone " + c); err != nil {
			return err
		}
	}
	var hc []driver.HeldClaim
	for c := range held {
		hc = append(hc, heldClaimOf(c))
	}
	return m.Reconcile(ctx, hc)
}

func heldClaimOf(c string) driver.HeldClaim { return held(c, scriptDevs[c]...) }

// run runs the steps of the script not begun yet.
func (r *runtimeLog) run(m *Manager, steps []step) error {
	ctx := context.Background()
	_, _, begun, err := r.state()
	if err != nil {
		return err
	}
	for _, s := range steps[min(begun, len(steps)):] {
		verb := map[bool]string{true: "prepare", false: "unprepare"}[s.prepare]
		if err := r.write("begin " + verb + " " + s.claim); err != nil {
			return err
		}
		if !s.prepare {
			if err := m.UnprepareClaim(ctx, claim(s.claim).ClaimRef, nil); err != nil {
				return err
			}
			if err := r.write("done unprepare " + s.claim); err != nil {
				return err
			}
			continue
		}
		if err := m.PrepareClaim(ctx, claim(s.claim), devs(s.devs...)); err != nil {
			return err
		}
		ids := map[string]string{}
		for _, d := range devs(s.devs...) {
			k, _ := fakeKeyOf(d, nil)
			p, _ := m.Made(k)
			ids[d.Device] = p.ID
		}
		b, _ := json.Marshal(ids)
		if err := r.write("done prepare " + s.claim + " " + string(b)); err != nil {
			return err
		}
	}
	return nil
}

func fakeDoc(path string) statefile.Document { return statefile.Document{Path: path, Volatile: true} }

// runChild runs a child with job and waits for it: killed reports
// whether it died of SIGKILL (at its point); any other failure fails t.
func runChild(t *testing.T, job childJob) (killed bool) {
	t.Helper()
	raw, _ := json.Marshal(job)
	cmd := exec.Command(os.Args[0], "-test.run=^TestLifecycleChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), childEnv+"="+string(raw))
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return false
	case errors.As(err, &exit) && exit.Sys().(syscall.WaitStatus).Signal() == syscall.SIGKILL:
		return true
	}
	t.Fatalf("child %+v: %v\n%s", job, err, out)
	return false
}

// TestKillAtEveryStep kills a driver process (SIGKILL) at every step of
// the lifecycle and of its tool, each time it is reached, and restarts,
// sometimes with card c2 no longer named (drained) and sometimes with a
// second kill during the restart's recovery. After the restart nothing
// is leaked, nothing a held claim uses was destroyed or made again, and
// the journal records exactly the held claims' partitions; after their
// release every card is empty.
func TestKillAtEveryStep(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a child process per step")
	}
	points := []string{"prepare/held", "tool/create-half", "prepare/created", "whole/held", "whole/switched", "tool/destroy-half", "release/undone", "release/settled"}
	all := []string{"c1", "c2", "c3"}
	kills := map[string]int{}
	for _, drop := range []bool{false, true} {
		for _, point := range points {
			for n := 1; ; n++ {
				name := fmt.Sprintf("%s#%d", point, n)
				if drop {
					name += "/c2-dropped"
				}
				hit := false
				t.Run(name, func(t *testing.T) {
					e := newEnv(t, all...)
					job := childJob{Do: "run", State: e.state, Tool: e.tool.doc.Path, Log: filepath.Join(e.dir, "runtime.log"), Dynamic: all, Point: point, N: n}
					if hit = runChild(t, job); !hit {
						return // the script never reaches the point an n-th time
					}
					kills[fmt.Sprint(point, drop)]++
					dynamic := all
					if drop {
						dynamic = []string{"c1", "c3"}
					}
					if n == 1 {
						// A second kill, in the restart's recovery.
						second := job
						second.Dynamic, second.Point, second.N = dynamic, "tool/destroy-half", 1
						runChild(t, second)
					}
					e.checkRecovered(job.Log, dynamic)
				})
				if !hit || t.Failed() {
					break
				}
			}
		}
	}
	for _, drop := range []bool{false, true} {
		for _, p := range points {
			if kills[fmt.Sprint(p, drop)] == 0 {
				t.Errorf("no kill at %s (c2 dropped: %v): the script never reached it", p, drop)
			}
		}
	}
	t.Logf("kills: %v", kills)
}

// checkRecovered restarts in this process as a runtime does and checks
// the invariants, then releases every held claim.
func (e *env) checkRecovered(log string, dynamic []string) {
	t := e.t
	t.Helper()
	m := e.open(WithDynamicCards(dynamic...))
	rt := &runtimeLog{path: log}
	if err := rt.recover(m); err != nil {
		t.Fatalf("recover: %v", err)
	}
	held, _, _, err := rt.state()
	if err != nil {
		t.Fatal(err)
	}
	// What the held claims use, by card, and the journal they make.
	want := map[string][]string{}
	var wantJournal []string
	for c, ids := range held {
		for dev, id := range ids {
			k, _ := fakeKeyOf(devs(dev)[0], nil)
			if id == "" && !k.Whole {
				continue // prepared on a card being drained: nothing made
			}
			if k.Whole {
				want[k.Card] = append(want[k.Card], "whole")
				wantJournal = append(wantJournal, k.Card+"/whole:"+c)
				continue
			}
			want[k.Card] = append(want[k.Card], fmt.Sprintf("%s@%d", k.Profile, k.Start))
			wantJournal = append(wantJournal, fmt.Sprintf("%s/%s@%d:%s", k.Card, k.Profile, k.Start, c))
			// Not destroyed, not made again: the partition the claim got.
			parts, err := e.tool.List(context.Background(), k.Card)
			if err != nil {
				t.Fatal(err)
			}
			if i := slices.IndexFunc(parts, func(p Partition) bool { return p.Key == k }); i < 0 || parts[i].ID != id || !parts[i].Complete {
				t.Errorf("claim %s's %s: %+v, want the complete partition %s it got", c, k, parts, id)
			}
		}
	}
	for _, card := range []string{"c1", "c2", "c3"} {
		slices.Sort(want[card])
		if got := e.parts(card); got != strings.Join(want[card], " ") {
			t.Errorf("card %s after the restart: %q, want what the held claims use: %q", card, got, strings.Join(want[card], " "))
		}
	}
	in, _ := m.Intents()
	var got []string
	for _, i := range in {
		for _, c := range i.Claims {
			k := fmt.Sprintf("%s/%s@%d", i.Card, i.Profile, i.Start)
			if i.Whole {
				k = i.Card + "/whole"
			}
			got = append(got, k+":"+c)
		}
		if len(i.Claims) == 0 {
			t.Errorf("journal keeps released %s after the restart", i.Key)
		}
	}
	slices.Sort(got)
	slices.Sort(wantJournal)
	if !slices.Equal(got, wantJournal) {
		t.Errorf("journal after the restart: %v, want %v", got, wantJournal)
	}
	// Every card still works by the tool's rules, and nothing is left
	// once the held claims are released.
	for c := range held {
		if err := e.release(c); err != nil {
			t.Fatalf("release %s: %v", c, err)
		}
	}
	for _, card := range dynamic {
		e.prepare("z-"+card, card+"-8u-0")
		if err := e.release("z-" + card); err != nil {
			t.Fatal(err)
		}
	}
	for _, card := range []string{"c1", "c2", "c3"} {
		if got := e.parts(card); got != "" {
			t.Errorf("card %s after every release: %q, want nothing (leaked)", card, got)
		}
	}
	if got := e.intents(); got != "" {
		t.Errorf("journal after every release: %q", got)
	}
}

// A second process on the same state folder is refused, naming the
// folder and the first; the processes of a rolling update share it, and
// a third process is refused whoever it is.
func TestSecondProcessIsRefused(t *testing.T) {
	for _, shared := range []bool{false, true} {
		t.Run(fmt.Sprint("shared=", shared), func(t *testing.T) {
			e := newEnv(t, "c1")
			first := holdChild(t, e, childJob{Shared: shared})
			_, err := Open(e.state, e.tool, fakeKeyOf, WithDynamicCards("c1"))
			if !errors.Is(err, ErrStateInUse) {
				t.Fatalf("a second process on the state folder: %v, want ErrStateInUse", err)
			}
			for _, want := range []string{e.state, "process " + strconv.Itoa(first.Process.Pid)} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("the refusal %q does not name %s", err, want)
				}
			}
			if shared {
				second := holdChild(t, e, childJob{Shared: true})
				_, err := Open(e.state, e.tool, fakeKeyOf, WithDynamicCards("c1"), WithSharedState())
				if !errors.Is(err, ErrStateInUse) {
					t.Fatalf("a third process beside a rolling update's two: %v, "+
						"want ErrStateInUse", err)
				}
				t.Log(err)
				for _, c := range []*exec.Cmd{first, second} {
					if pid := strconv.Itoa(c.Process.Pid); !strings.Contains(err.Error(), pid) {
						t.Errorf("the refusal %q does not name process %s", err, pid)
					}
				}
				stop(second)
			}
			stop(first)
			// The kernel released the dead process's lock.
			m, err := Open(e.state, e.tool, fakeKeyOf)
			if err != nil {
				t.Fatalf("open after the first process died: %v", err)
			}
			_ = m.Close()
		})
	}
}

// A second release of the same driver on the node (another owner) is
// refused beside the first, with a message naming the folder, the process
// and its owner; the other instance of the first's rolling update is let
// in and prepares beside it.
func TestSecondReleaseIsRefused(t *testing.T) {
	e := newEnv(t, "c1")
	first := holdChild(t, e, childJob{Driver: "gpu.example.com", Owner: "gpus/release-a"})
	_, err := Open(e.state, e.tool, fakeKeyOf, WithDynamicCards("c1"),
		WithRollingUpdate("gpu.example.com", "gpus/release-b"))
	if !errors.Is(err, ErrStateInUse) {
		t.Fatalf("a second release beside the first: %v, want ErrStateInUse", err)
	}
	t.Log(err)
	for _, want := range []string{e.state, "process " + strconv.Itoa(first.Process.Pid),
		"gpus/release-a", "gpus/release-b"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal %q does not name %s", err, want)
		}
	}
	m, err := Open(e.state, e.tool, fakeKeyOf, WithDynamicCards("c1"),
		WithRollingUpdate("gpu.example.com", "gpus/release-a"))
	if err != nil {
		t.Fatalf("the other instance of the rolling update: %v", err)
	}
	e.m = m
	e.prepare("a", "c1-2u-2")
	_ = m.Close()
	stop(first)
}

// holdChild starts a child that opens the state folder with job's
// sharing and holds it until stop; the test stops it by PID in the end.
func holdChild(t *testing.T, e *env, job childJob) *exec.Cmd {
	t.Helper()
	job.Do, job.State, job.Tool, job.Dynamic = "hold", e.state, e.tool.doc.Path, []string{"c1"}
	raw, _ := json.Marshal(job)
	cmd := exec.Command(os.Args[0], "-test.run=^TestLifecycleChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), childEnv+"="+string(raw))
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stop(cmd) })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || line != "ready\n" {
		t.Fatalf("child: %q, %v", line, err)
	}
	return cmd
}

// stop kills a child by PID and waits for it; again is a no-op.
func stop(cmd *exec.Cmd) {
	if cmd.ProcessState == nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}
}
