package main

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

	"k8s.io/apimachinery/pkg/types"

	"github.com/drakit/drakit/driver"
	"github.com/drakit/drakit/partition/lifecycle"
)

// faultTool wraps the amd-smi stand-in: it kills its process (SIGKILL)
// the n-th time a point is reached, fails every change on a lost card
// (as amd-smi does for a GPU that stopped answering), and records the
// calls.
type faultTool struct {
	lifecycle.Tool
	mu    sync.Mutex
	point string
	n     int
	hits  map[string]int
	lost  string
	calls []string
}

func (f *faultTool) at(point string, card string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.hits[point]++
	f.calls = append(f.calls, point+" "+card)
	if point == f.point && f.hits[point] == f.n {
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // the signal is on its way
	}
	if card == f.lost {
		return fmt.Errorf("amd-smi: GPU %s does not answer", card)
	}
	return nil
}

func (f *faultTool) Create(ctx context.Context, k lifecycle.Key) (lifecycle.Partition, error) {
	if err := f.at("create", k.Card); err != nil {
		return lifecycle.Partition{}, err
	}
	p, err := f.Tool.Create(ctx, k)
	_ = f.at("created", k.Card)
	return p, err
}

func (f *faultTool) Destroy(ctx context.Context, k lifecycle.Key) error {
	if err := f.at("destroy", k.Card); err != nil {
		return err
	}
	err := f.Tool.Destroy(ctx, k)
	_ = f.at("destroyed", k.Card)
	return err
}

func (f *faultTool) List(ctx context.Context, card string) ([]lifecycle.Partition, error) {
	_ = f.at("list", card) // a lost card still lists
	return f.Tool.List(ctx, card)
}

func (f *faultTool) SetWhole(ctx context.Context, card string, whole bool) error {
	if err := f.at("switch", card); err != nil {
		return err
	}
	err := f.Tool.(lifecycle.WholeSwitcher).SetWhole(ctx, card, whole)
	_ = f.at("switched", card)
	return err
}

// withFaults makes open wrap the tool in f until the test ends.
func withFaults(t testing.TB, f *faultTool) {
	f.hits = map[string]int{}
	wrapTool = func(tool lifecycle.Tool) lifecycle.Tool { f.Tool = tool; return f }
	t.Cleanup(func() { wrapTool = func(tool lifecycle.Tool) lifecycle.Tool { return tool } })
}

// node is a machine of three cards and a state folder.
type node struct {
	t           testing.TB
	root, state string
	ids         []string
	dynamic     []string // the cards named dynamic; nil: every card
	d           *instinct
}

func newNode(t testing.TB) *node {
	root, ids := machine(t, 3)
	return &node{t: t, root: root, state: filepath.Join(t.TempDir(), "state"), ids: ids}
}

// open (re)starts the driver's lifecycle, as a restarted process does.
func (n *node) open() *instinct {
	n.t.Helper()
	if n.d != nil {
		_ = n.d.Close()
	}
	d, err := open("node", n.root, n.state, n.opts()...)
	if err != nil {
		n.t.Fatal(err)
	}
	n.t.Cleanup(func() { _ = d.Close() })
	n.d = d
	return d
}

// opts names n.dynamic as the dynamic cards (the administrator dropped
// the others), when set.
func (n *node) opts() []lifecycle.Option {
	if n.dynamic == nil {
		return nil
	}
	return []lifecycle.Option{lifecycle.WithDynamicCards(n.dynamic...)}
}

func claim(uid string) driver.Claim {
	return driver.Claim{ClaimRef: driver.ClaimRef{UID: types.UID(uid), Namespace: "default", Name: "c-" + uid}}
}

func allocated(names ...string) []driver.AllocatedDevice {
	var out []driver.AllocatedDevice
	for i, n := range names {
		out = append(out, driver.AllocatedDevice{Request: "r" + strconv.Itoa(i), Pool: "node/" + n[:5], Device: n})
	}
	return out
}

// prepare prepares claim uid as the runtime does and returns the IDs its
// devices got and what the runtime holds of it.
func (n *node) prepare(uid string, names ...string) (map[string]string, driver.HeldClaim) {
	n.t.Helper()
	ctx := context.Background()
	if err := n.d.PrepareClaim(ctx, claim(uid), allocated(names...)); err != nil {
		n.t.Fatalf("prepare %s %v: %v", uid, names, err)
	}
	ids := map[string]string{}
	h := driver.HeldClaim{ClaimRef: claim(uid).ClaimRef, Prepared: true}
	for _, dev := range allocated(names...) {
		if k, _ := n.d.keyOf(dev, nil); n.d.State(k.Card) != lifecycle.Dynamic {
			// A card being drained: nothing is made on it.
			data, _ := json.Marshal(k)
			ids[dev.Device] = ""
			h.Devices = append(h.Devices, driver.HeldDevice{AllocatedDevice: dev, Data: data})
			continue
		}
		out, err := n.d.PrepareDevice(ctx, claim(uid), dev)
		if err != nil {
			n.t.Fatalf("prepare %s %s: %v", uid, dev.Device, err)
		}
		k, _ := n.d.keyOf(dev, nil)
		p, _ := n.d.Made(k)
		ids[dev.Device] = map[bool]string{true: k.Card, false: p.ID}[k.Whole]
		h.Devices = append(h.Devices, driver.HeldDevice{AllocatedDevice: dev, Data: out.Data})
	}
	return ids, h
}

// parts is what amd-smi shows of every card.
func (n *node) parts() []string {
	var out []string
	for i := range n.ids {
		out = append(out, modes(n.t, n.root, i))
	}
	return out
}

// ownIDs is every partition ID on the cards, by device name.
func (n *node) ownIDs() map[string]string {
	out := map[string]string{}
	for i, id := range n.ids {
		parts, err := n.d.tool.List(context.Background(), id)
		if err != nil {
			n.t.Fatal(err)
		}
		for _, p := range parts {
			name, _ := Scheme.DeviceName(i, p.Profile, p.Start)
			out[name] = p.ID
		}
	}
	return out
}

// empty checks that no partition and no intent is left.
func (n *node) empty(when string) {
	n.t.Helper()
	if got := n.ownIDs(); len(got) > 0 {
		n.t.Errorf("%s: partitions left (leaked): %v", when, got)
	}
	if in, err := n.d.Intents(); err != nil || len(in) > 0 {
		n.t.Errorf("%s: journal %+v, %v, want empty", when, in, err)
	}
}

// The runtime's checkpoint as the fault tests keep it, one line per
// step: "begin prepare a", "done prepare a {ids}", "begin unprepare a",
// "done unprepare a", "undone a" (a half-way prepare undone at start).
type checkpoint string

func (c checkpoint) write(line string) error {
	f, err := os.OpenFile(string(c), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = f.WriteString(line + "\n")
	return err
}

// read returns the claims prepared (with the IDs their devices got), the
// claims begun and not done, and the steps begun.
func (c checkpoint) read() (held map[string]map[string]string, halfway []string, begun int, err error) {
	held, open := map[string]map[string]string{}, map[string]bool{}
	b, err := os.ReadFile(string(c))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, nil, 0, err
	}
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	for sc.Scan() {
		f := strings.SplitN(sc.Text(), " ", 4)
		switch {
		case f[0] == "begin":
			begun++
			open[f[2]] = true
			delete(held, f[2])
		case f[0] == "done" && f[1] == "prepare":
			ids := map[string]string{}
			if err := json.Unmarshal([]byte(f[3]), &ids); err != nil {
				return nil, nil, 0, err
			}
			held[f[2]] = ids
			delete(open, f[2])
		default:
			delete(open, f[len(f)-1])
		}
	}
	for c := range open {
		halfway = append(halfway, c)
	}
	slices.Sort(halfway)
	return held, halfway, begun, nil
}

// step is one call of the kubelet.
type step struct {
	prepare bool
	claim   string
	devs    []string
}

// script prepares and unprepares partitions of every mode change: card 0
// from SPX to CPX/NPS4, card 1 from QPX/NPS1 to DPX/NPS1 once its
// partition is gone, card 2 whole and then partitioned.
var script = []step{
	{true, "a", []string{"gpu-0-cpx-nps4-3", "gpu-1-qpx-nps1-1"}},
	{true, "b", []string{"gpu-0-cpx-nps4-5"}},
	{true, "w", []string{"gpu-2"}},
	{false, "a", nil},
	{true, "c", []string{"gpu-1-dpx-nps1-0"}},
	{false, "w", nil},
	{true, "d", []string{"gpu-0-cpx-nps4-3", "gpu-2-cpx-nps1-0"}},
	{false, "c", nil},
	{false, "b", nil},
}

func scriptDevs(c string) []string {
	for _, s := range script {
		if s.prepare && s.claim == c {
			return s.devs
		}
	}
	return nil
}

// recover is the runtime's start: the claims left half-way are undone,
// then the lifecycle reconciles with the claims held.
func (n *node) recover(cp checkpoint) error {
	ctx := context.Background()
	held, halfway, _, err := cp.read()
	if err != nil {
		return err
	}
	for _, c := range halfway {
		if err := n.d.UnprepareClaim(ctx, claim(c).ClaimRef, nil); err != nil {
			return fmt.Errorf("undo %s: %w", c, err)
		}
		if err := cp.write("undone " + c); err != nil {
			return err
		}
	}
	var hc []driver.HeldClaim
	for c := range held {
		h := driver.HeldClaim{ClaimRef: claim(c).ClaimRef, Prepared: true}
		for _, dev := range allocated(scriptDevs(c)...) {
			k, _ := n.d.keyOf(dev, nil)
			data, _ := json.Marshal(k)
			h.Devices = append(h.Devices, driver.HeldDevice{AllocatedDevice: dev, Data: data})
		}
		hc = append(hc, h)
	}
	return n.d.Reconcile(ctx, hc)
}

// run runs the steps of the script not begun yet.
func (n *node) run(cp checkpoint) error {
	_, _, begun, err := cp.read()
	if err != nil {
		return err
	}
	for _, s := range script[min(begun, len(script)):] {
		verb := map[bool]string{true: "prepare", false: "unprepare"}[s.prepare]
		if err := cp.write("begin " + verb + " " + s.claim); err != nil {
			return err
		}
		if !s.prepare {
			if err := n.d.UnprepareClaim(context.Background(), claim(s.claim).ClaimRef, nil); err != nil {
				return err
			}
			if err := cp.write("done unprepare " + s.claim); err != nil {
				return err
			}
			continue
		}
		ids, _ := n.prepare(s.claim, s.devs...)
		b, _ := json.Marshal(ids)
		if err := cp.write("done prepare " + s.claim + " " + string(b)); err != nil {
			return err
		}
	}
	return nil
}

// job is what a child process does: "run" (recover as a runtime, then
// the script), killed at the n-th time it reaches point, or "hold" (open
// the state folder and wait to be killed).
type job struct {
	Do, Root, State, Checkpoint, Point string
	N                                  int
	Dynamic                            []string // nil: every card
}

// childT is the testing.TB of a child: a failure ends it with status 3.
type childT struct{ testing.TB }

func (childT) Helper()                        {}
func (childT) Cleanup(func())                 {}
func (childT) Fatal(args ...any)              { fmt.Println(args...); os.Exit(3) }
func (childT) Fatalf(format string, a ...any) { fmt.Printf(format+"\n", a...); os.Exit(3) }
func (childT) Errorf(format string, a ...any) { fmt.Printf(format+"\n", a...); os.Exit(3) }
func (childT) TempDir() string                { return os.TempDir() }

// child runs a job in a child process and returns its exit status.
func child(raw string) int {
	var j job
	if err := json.Unmarshal([]byte(raw), &j); err != nil {
		fmt.Println(err)
		return 3
	}
	t := childT{}
	f := &faultTool{point: j.Point, n: j.N}
	withFaults(t, f)
	n := &node{t: t, root: j.Root, state: j.State, dynamic: j.Dynamic}
	d, err := open("node", j.Root, j.State, n.opts()...)
	if err != nil {
		fmt.Println("open:", err)
		return 4
	}
	n.d, n.ids = d, d.ids
	if j.Do == "hold" {
		fmt.Println("ready")
		select {}
	}
	if err := n.recover(checkpoint(j.Checkpoint)); err != nil {
		fmt.Println("recover:", err)
		return 3
	}
	if err := n.run(checkpoint(j.Checkpoint)); err != nil {
		fmt.Println("run:", err)
		return 3
	}
	return 0
}

// runChild runs a child and waits for it: killed reports whether it died
// of SIGKILL; any other failure fails t.
func runChild(t *testing.T, j job) (killed bool) {
	t.Helper()
	raw, _ := json.Marshal(j)
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), faultChild+"="+string(raw))
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return false
	case errors.As(err, &exit) && exit.Sys().(syscall.WaitStatus).Signal() == syscall.SIGKILL:
		return true
	}
	t.Fatalf("child %+v: %v\n%s", j, err, out)
	return false
}

// TestKillAtEveryStep kills the driver (SIGKILL) at every step of the
// lifecycle's tool calls, each time the script reaches it (before and
// after each create, destroy and mode switch), and restarts it, also
// with card 1 no longer named dynamic (the administrator dropped it: only
// what the journal records on it is the lifecycle's); for the first kill
// at each point it kills the restart too, in its recovery. After the
// restart nothing is leaked, nothing a held claim uses was destroyed or
// made again, no partition was handed out twice, and the journal records
// exactly the held claims' partitions; after their release every card is
// empty and every dynamic card still takes every mode.
func TestKillAtEveryStep(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a child process per step")
	}
	points := []string{"create", "created", "destroy", "destroyed", "switch", "switched"}
	kills := map[string]int{}
	for _, drop := range []bool{false, true} {
		for _, point := range points {
			for i := 1; ; i++ {
				hit := false
				name := fmt.Sprintf("%s#%d", point, i)
				if drop {
					name += "/card-1-dropped"
				}
				t.Run(name, func(t *testing.T) {
					n := newNode(t)
					j := job{Do: "run", Root: n.root, State: n.state, Checkpoint: filepath.Join(t.TempDir(), "checkpoint"), Point: point, N: i}
					if hit = runChild(t, j); !hit {
						return // the script reaches the point fewer than i times
					}
					kills[fmt.Sprint(point, map[bool]string{true: " (card 1 dropped)"}[drop])]++
					if drop {
						n.dynamic = []string{n.ids[0], n.ids[2]}
					}
					if i == 1 {
						second := j
						second.Point, second.Dynamic = "destroy", n.dynamic
						if runChild(t, second) {
							kills["in the recovery"]++
						}
					}
					n.checkRecovered(checkpoint(j.Checkpoint))
				})
				if !hit || t.Failed() {
					break
				}
			}
		}
	}
	for _, p := range points {
		if kills[p] == 0 || kills[p+" (card 1 dropped)"] == 0 {
			t.Errorf("no kill at %s: the script never reached it", p)
		}
	}
	t.Logf("kills: %v", kills)
}

// checkRecovered restarts in this process as a runtime does and checks
// the invariants, then releases every held claim.
func (n *node) checkRecovered(cp checkpoint) {
	t := n.t
	t.Helper()
	n.open()
	if err := n.recover(cp); err != nil {
		t.Fatalf("recover: %v", err)
	}
	held, _, _, err := cp.read()
	if err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(string(cp))
	seen := map[string]string{} // partition ID → the claim that got it
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.SplitN(line, " ", 4)
		if len(f) < 4 || f[1] != "prepare" {
			continue
		}
		ids := map[string]string{}
		_ = json.Unmarshal([]byte(f[3]), &ids)
		for dev, id := range ids {
			if other, ok := seen[id]; ok && other != f[2] && !strings.HasPrefix(id, "0x") {
				t.Errorf("partition %s handed out twice: to %s and to %s (%s)", id, other, f[2], dev)
			}
			seen[id] = f[2]
		}
	}
	want, whole := map[string]string{}, map[int]bool{}
	var wantJournal []string
	for c, ids := range held {
		for dev, id := range ids {
			k, _ := n.d.keyOf(allocated(dev)[0], nil)
			wantJournal = append(wantJournal, k.String()+":"+c)
			if k.Whole {
				whole[slices.Index(n.ids, k.Card)] = true
				continue
			}
			if id == "" {
				wantJournal = wantJournal[:len(wantJournal)-1] // prepared on a card being drained: nothing made
				continue
			}
			want[dev] = id
		}
	}
	got := n.ownIDs()
	for dev, id := range want {
		if got[dev] != id {
			t.Errorf("claim's %s after the restart: %q, want the partition %s it got (destroyed or made again)", dev, got[dev], id)
		}
	}
	for dev := range got {
		if _, ok := want[dev]; !ok {
			t.Errorf("%s left after the restart, no held claim has it (leaked)", dev)
		}
	}
	for i := range whole {
		if m := modes(t, n.root, i); m != "SPX/NPS1" {
			t.Errorf("card %d held whole is %q", i, m)
		}
	}
	in, _ := n.d.Intents()
	var gotJournal []string
	for _, i := range in {
		for _, c := range i.Claims {
			gotJournal = append(gotJournal, i.Key.String()+":"+c)
		}
		if i.Released() {
			t.Errorf("journal keeps released %s after the restart", i.Key)
		}
	}
	slices.Sort(gotJournal)
	slices.Sort(wantJournal)
	if !slices.Equal(gotJournal, wantJournal) {
		t.Errorf("journal after the restart: %v, want %v", gotJournal, wantJournal)
	}
	for c := range held {
		if err := n.d.UnprepareClaim(context.Background(), claim(c).ClaimRef, nil); err != nil {
			t.Fatalf("release %s: %v", c, err)
		}
	}
	n.empty("after every release")
	for i, id := range n.ids {
		if n.dynamic != nil && !slices.Contains(n.dynamic, id) {
			continue
		}
		for _, p := range []string{"DPX/NPS1", "QPX/NPS4"} { // the two ends of the modes
			name, _ := Scheme.DeviceName(i, p, 1)
			n.prepare("z", name)
			if err := n.d.UnprepareClaim(context.Background(), claim("z").ClaimRef, nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	n.empty("after a partition of every mode on every card")
}

// The operators' faults at start: the journal deleted, the checkpoint
// wiped, the whole state folder deleted (and both). Nothing a held claim
// names is destroyed or made again, a claim whose record is lost in
// every case ("gone") loses its partition, and nothing is left after
// every release.
func TestLostState(t *testing.T) {
	for _, tc := range []struct {
		name   string
		break_ func(n *node)
		held   bool // whether the runtime still holds a and b
	}{
		{"journal deleted", func(n *node) { rm(n.t, filepath.Join(n.state, lifecycle.JournalFile)) }, true},
		{"checkpoint wiped", func(*node) {}, false},
		{"state folder deleted", func(n *node) { rm(n.t, n.state) }, true},
		{"state folder and checkpoint deleted", func(n *node) { rm(n.t, n.state) }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := newNode(t)
			n.open()
			if err := n.d.Reconcile(context.Background(), nil); err != nil {
				t.Fatal(err)
			}
			idsA, a := n.prepare("a", "gpu-0-qpx-nps4-1", "gpu-1-cpx-nps1-2")
			idsB, b := n.prepare("b", "gpu-0-qpx-nps4-3")
			n.prepare("gone", "gpu-1-cpx-nps1-5")
			_ = n.d.Close()
			n.d = nil
			tc.break_(n)
			var h []driver.HeldClaim
			want := map[string]string{}
			if tc.held {
				h = []driver.HeldClaim{a, b}
				for _, ids := range []map[string]string{idsA, idsB} {
					for dev, id := range ids {
						want[dev] = id
					}
				}
			}
			n.open()
			if err := n.d.Reconcile(context.Background(), h); err != nil {
				t.Fatal(err)
			}
			if got := n.ownIDs(); !mapsEqual(got, want) {
				t.Errorf("after the restart: %v, want what the held claims got: %v", got, want)
			}
			for _, uid := range []string{"a", "b", "gone"} {
				if err := n.d.UnprepareClaim(context.Background(), claim(uid).ClaimRef, nil); err != nil {
					t.Fatal(err)
				}
			}
			n.empty("after every release")
		})
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func rm(t testing.TB, path string) {
	t.Helper()
	if err := os.RemoveAll(path); err != nil {
		t.Fatal(err)
	}
}

// TestSecondProcessIsRefused: a second driver on the same state folder is
// refused, naming the first; once the first is gone it starts.
func TestSecondProcessIsRefused(t *testing.T) {
	n := newNode(t)
	raw, _ := json.Marshal(job{Do: "hold", Root: n.root, State: n.state})
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), faultChild+"="+string(raw))
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	if line, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || line != "ready\n" {
		t.Fatalf("child: %q, %v", line, err)
	}
	d, err := open("node", n.root, n.state)
	if !errors.Is(err, lifecycle.ErrStateInUse) || !strings.Contains(err.Error(), strconv.Itoa(cmd.Process.Pid)) {
		t.Fatalf("a second driver on the state folder: %v, want ErrStateInUse naming process %d", err, cmd.Process.Pid)
	}
	if d.Manager != nil {
		t.Error("the refused driver has a lifecycle")
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	n.open()
}

// TestLostCardDuringUnprepare: card 0 stops answering amd-smi's changes
// (it still lists). A restart cannot destroy what a claim lost with the
// checkpoint ("g") left on it, and the unprepare of a partition on it
// fails (keeping the partition recorded), while the unprepares and
// prepares of card 1's partitions go on without a single call on card 0.
// Once card 0 answers again, the kubelet's retry destroys its partitions;
// nothing is left.
func TestLostCardDuringUnprepare(t *testing.T) {
	f := &faultTool{}
	withFaults(t, f)
	n := newNode(t)
	n.open()
	if err := n.d.Reconcile(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	_, a := n.prepare("a", "gpu-0-cpx-nps4-0")
	n.prepare("g", "gpu-0-cpx-nps4-1")
	_, b := n.prepare("b", "gpu-1-qpx-nps1-0")
	_, c := n.prepare("c", "gpu-1-qpx-nps1-2")
	f.mu.Lock()
	f.lost = n.ids[0]
	f.mu.Unlock()
	n.open()
	if err := n.d.Reconcile(context.Background(), []driver.HeldClaim{a, b, c}); err == nil || !strings.Contains(err.Error(), n.ids[0]) {
		t.Errorf("a restart with card 0 lost: %v, want card 0's error", err)
	}
	if err := n.d.UnprepareClaim(context.Background(), claim("a").ClaimRef, nil); err == nil {
		t.Fatal("the unprepare of a partition on a lost card succeeded")
	}
	f.mu.Lock()
	f.calls = nil
	f.mu.Unlock()
	for _, uid := range []string{"b", "c"} {
		if err := n.d.UnprepareClaim(context.Background(), claim(uid).ClaimRef, nil); err != nil {
			t.Fatalf("unprepare %s on card 1 while card 0 is lost: %v", uid, err)
		}
	}
	n.prepare("d", "gpu-1-dpx-nps1-1")
	f.mu.Lock()
	for _, c := range f.calls {
		if strings.HasSuffix(c, n.ids[0]) {
			t.Errorf("card 1's work called amd-smi on lost card 0: %s", c)
		}
	}
	f.lost = ""
	f.mu.Unlock()
	if got := modes(t, n.root, 0); got != "CPX/NPS4 0 1" {
		t.Errorf("card 0 while lost: %q, want both partitions still there", got)
	}
	for _, uid := range []string{"a", "d"} {
		if err := n.d.UnprepareClaim(context.Background(), claim(uid).ClaimRef, nil); err != nil {
			t.Fatal(err)
		}
	}
	n.empty("once card 0 answers again")
}
