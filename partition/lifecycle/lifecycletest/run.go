package lifecycletest

import (
	"bufio"
	"context"
	"crypto/rand"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/drakit/drakit/partition/lifecycle"
	"github.com/drakit/drakit/testenv"
)

// Scenarios are the names of [Run]'s scenarios, in the order it runs
// them; [Config.Skip] takes them (a name skips the scenario and what is
// under it).
var Scenarios = []string{
	"script", "kill", "lost-state/journal-deleted", "lost-state/checkpoint-wiped",
	"lost-state/state-folder-deleted", "lost-state/state-and-checkpoint-deleted",
	"second-process", "rolling-update", "rolling-update/second-release", "lost-card", "concurrent",
}

// suite is one Run: its cluster, namespace and nodes.
type suite struct {
	c      Config
	env    *testenv.Env
	ns     string
	prefix string

	mu    sync.Mutex
	nodes int
}

// Run runs the driver of c through the faults a node meets, each
// scenario on a node of its own, with the real driver runtime (package
// driver, over gRPC on unix sockets) in processes of the test binary
// (see [Child]) that it kills with SIGKILL, and the kubelet's calls
// (package drivertest) on claims allocated from the devices the driver
// publishes in a cluster's API server ([testenv.Start]; skipped with go
// test -short). After every fault it checks that the cards hold exactly
// the partitions of the claims the kubelet holds, each the one its claim
// got (none destroyed under a claim or made again, none made in part,
// none leaked), that the journal records exactly their holders and that
// the tool was never called twice at once for one card; after the
// releases, that nothing is left. The scenarios ([Scenarios]):
//
//   - script: Config.Script runs as it is.
//   - kill: the driver is killed at every step of the script, each time
//     it reaches it (before and after each tool call, after each of the
//     lifecycle's journal writes and each call of the preparer), and
//     started again; the first kill at a step kills the restart too, in
//     its recovery. After the restart the claim of the call cut short
//     holds all its partitions or none; then the kubelet retries the
//     call.
//   - lost-state: with the claims of the script's first prepares held,
//     the driver is killed and its journal deleted, its checkpoint wiped,
//     its state folder deleted, or both folders, before it starts again.
//   - second-process: a second driver on the state folder is refused
//     with a message that names the folder and the first.
//   - rolling-update: two instances of a rolling update of the driver
//     share the folder and serve; a third is refused;
//     rolling-update/second-release: a process of another owner (a second
//     release of the driver on the node) is refused.
//   - lost-card: a card stops answering; the unprepare of a claim on it
//     fails (and keeps its partition) while the claims on another card
//     are unprepared and prepared without one call on the lost card;
//     once it is back the kubelet's retry releases it.
//   - concurrent: the first prepares' claims are released while new
//     claims of the same devices are prepared, all at once, a few
//     rounds, on cards whose changes take 50 ms more: the runtime's
//     concurrent calls, with the race detector when the test runs with
//     -race.
//
// The test binary's TestMain must call [Child] first.
func Run(t *testing.T, c Config) {
	if c.Driver == "" || c.Machine == nil || c.Open == nil || len(c.Script) == 0 {
		t.Fatal("lifecycletest: the config needs a driver name, Machine, Open and a Script")
	}
	env := testenv.Start(t)
	s := &suite{c: c, env: env, prefix: "lct-" + strings.ToLower(rand.Text()[:6])}
	s.ns = s.prefix
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: s.ns}}
	ctx := context.Background()
	_, err := env.Client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var hits map[string]int
	s.run(t, "script", func(t *testing.T) { hits = s.script(t) })
	s.run(t, "kill", func(t *testing.T) { s.kill(t, hits) })
	s.run(t, "lost-state", s.lostState)
	s.run(t, "second-process", s.secondProcess)
	s.run(t, "rolling-update", s.rollingUpdate)
	s.run(t, "lost-card", s.lostCard)
	s.run(t, "concurrent", s.concurrent)
}

// run runs scenario name unless it is skipped.
func (s *suite) run(t *testing.T, name string, f func(t *testing.T)) {
	t.Run(name, func(t *testing.T) {
		if s.skipped(t.Name()) {
			t.Skip("skipped by the config")
		}
		f(t)
	})
}

// skipped reports whether the test named name (its path under Run) is
// skipped.
func (s *suite) skipped(name string) bool {
	_, rel, _ := strings.Cut(name, "/")
	return slices.ContainsFunc(s.c.Skip, func(skip string) bool {
		return rel == skip || strings.HasPrefix(rel, skip+"/")
	})
}

// prefixSteps is the script up to its first unprepare: claims held at
// once.
func (s *suite) prefixSteps() []Step {
	i := slices.IndexFunc(s.c.Script, func(st Step) bool { return st.Devices == nil })
	if i < 0 {
		i = len(s.c.Script)
	}
	return s.c.Script[:i]
}

// script runs the script as it is and returns the steps it reached.
func (s *suite) script(t *testing.T) map[string]int {
	n := s.newNode(t)
	j := n.job()
	j.Hits = filepath.Join(n.dir, "hits")
	n.start(j)
	for _, st := range s.c.Script {
		n.do(st, nil, false)
		n.check("after " + st.String())
	}
	n.releaseAll()
	n.empty("after the script")
	hits := map[string]int{}
	f, err := os.Open(j.Hits)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if p := sc.Text(); killable(p) {
			hits[p]++
		}
	}
	t.Logf("steps reached: %v", hits)
	return hits
}

// killable says whether the kill scenario kills at a point: not before
// or after a read, not while waiting for a card, and not at the
// lifecycle's steps that follow a tool call with nothing written between
// (prepare/created, release/undone, whole/switched): the process leaves
// the same state there as at the tool call's end.
func killable(point string) bool {
	switch point {
	case "tool/list", "tool/listed", "card/wait",
		"prepare/created", "release/undone", "whole/switched":
		return false
	}
	return true
}

// killRuns is how many kill runs go at once: each waits mostly for the
// driver's republish and the API server, not for a core.
const killRuns = 8

// kill kills the driver at every step the script reaches.
func (s *suite) kill(t *testing.T, hits map[string]int) {
	if hits == nil {
		t.Skip("the script scenario did not run")
	}
	var wg sync.WaitGroup
	slots := make(chan struct{}, killRuns)
	for _, point := range slices.Sorted(maps.Keys(hits)) {
		for i := 1; i <= hits[point]; i++ {
			slots <- struct{}{}
			wg.Go(func() {
				defer func() { <-slots }()
				t.Run(fmt.Sprintf("%s@%d", point, i), func(t *testing.T) { s.killAt(t, point, i) })
			})
		}
	}
	wg.Wait()
}

// killAt runs the script with the driver killed the i-th time it reaches
// point (in its start, or in the call the kubelet then retries).
func (s *suite) killAt(t *testing.T, point string, i int) {
	n := s.newNode(t)
	j := n.job()
	j.Point, j.N = point, i
	died := false
	if err := n.startErr(j); err != nil {
		if !n.proc.killed() {
			t.Fatal(err)
		}
		died = true // in the start's recovery
		n.restart(n.job(), i == 1)
	}
	for _, st := range s.c.Script {
		if n.do(st, n.job, i == 1 && !died) {
			died = true
			n.check("after the restart and " + st.String())
		}
	}
	if !died {
		t.Fatalf("the script did not reach %s %d times, as it did at first", point, i)
	}
	n.releaseAll()
	n.empty("after every release")
}

// lostState loses the driver's state while claims are held.
func (s *suite) lostState(t *testing.T) {
	for _, tc := range []struct {
		name     string
		lose     []string // under the node's folder
		runtimed bool     // whether the runtime still holds the claims
	}{
		{"journal-deleted", []string{"state/" + lifecycle.JournalFile}, true},
		{"checkpoint-wiped", []string{"driver/plugins/checkpoint"}, false},
		{"state-folder-deleted", []string{"state"}, true},
		{"state-and-checkpoint-deleted", []string{"state", "driver/plugins/checkpoint"}, false},
	} {
		s.run(t, tc.name, func(t *testing.T) {
			n := s.newNode(t)
			n.start(n.job())
			for _, st := range s.prefixSteps() {
				n.do(st, nil, false)
			}
			n.stop()
			for _, p := range tc.lose {
				if err := os.RemoveAll(filepath.Join(n.dir, p)); err != nil {
					t.Fatal(err)
				}
			}
			n.start(n.job())
			held := n.held
			if !tc.runtimed {
				n.held = nil // the driver forgot them: their partitions go
			}
			n.check("after the restart")
			n.held = held
			n.releaseAll()
			n.empty("after every release")
		})
	}
}

// secondProcess starts a second driver on the node's state folder.
func (s *suite) secondProcess(t *testing.T) {
	n := s.newNode(t)
	n.start(n.job())
	first := n.proc
	second := n.job()
	second.Dir = filepath.Join(n.dir, "second")
	n.refused(second, n.state(), fmt.Sprint("process ", first.cmd.Process.Pid))
	first.kill()
	n.start(n.job())
}

// refused starts a driver process with j and checks that it exits at
// start with the lifecycle's ErrStateInUse naming what want says.
func (n *node) refused(j job, want ...string) {
	n.t.Helper()
	p, err := n.startProc(j)
	if err != nil {
		n.t.Fatal(err)
	}
	if err := p.exited(); err != nil {
		n.t.Fatalf("a driver process that must be refused: %v\n%s", err, p.tail())
	}
	out := p.tail()
	for _, w := range append([]string{lifecycle.ErrStateInUse.Error()}, want...) {
		if !strings.Contains(out, w) {
			n.t.Errorf("the refused process says\n%s\nwhich does not name %q", out, w)
		}
	}
}

// rollingUpdate runs the two instances of a rolling update, and the
// processes the lock must refuse.
func (s *suite) rollingUpdate(t *testing.T) {
	n := s.newNode(t)
	instance := func(owner, pod string) job {
		j := n.job()
		j.Owner, j.PodUID = owner, pod
		return j
	}
	n.start(instance("drivers/release-a", "pod-1"))
	old := n.proc
	n.start(instance("drivers/release-a", "pod-2"))
	surge := n.proc
	pids := []string{fmt.Sprint("process ", old.cmd.Process.Pid),
		fmt.Sprint("process ", surge.cmd.Process.Pid)}
	n.refused(instance("drivers/release-a", "pod-3"), append(pids, n.state())...)
	// The new instance serves.
	first := s.prefixSteps()[0]
	n.retry(first)
	n.check("a claim prepared by the rolling update's new instance")
	old.kill()
	s.run(t, "second-release", func(t *testing.T) {
		n.t = t
		n.refused(instance("drivers/release-b", "pod-4"), n.state(), pids[1], "drivers/release-a")
	})
	n.t = t
	n.retry(Unprepare(first.Claim))
	n.empty("after the release")
}

// lostCard loses a card while claims hold partitions on it and another.
func (s *suite) lostCard(t *testing.T) {
	n := s.newNode(t)
	n.start(n.job())
	for _, st := range s.prefixSteps() {
		n.do(st, nil, false)
	}
	lost, other := n.twoCards()
	if lost == "" {
		t.Skip("the script holds no partitions on two cards before its first unprepare")
	}
	n.stop()
	j := n.job()
	j.Lost = n.cardOf(lost)
	n.start(j)
	if err := n.call(Unprepare(lost)); err == nil {
		t.Fatalf("the unprepare of claim %s on lost card %s succeeded", lost, j.Lost)
	}
	calls := func() int {
		b, _ := os.ReadFile(filepath.Join(n.dir, "driver", "lost-calls"))
		return strings.Count(string(b), "\n")
	}
	before := calls()
	devs := n.devs[other]
	n.retry(Unprepare(other))
	n.retry(Step{Claim: other, Devices: devs, Config: n.cfgs[other]})
	if after := calls(); after != before {
		t.Errorf("the work on card %s called the tool on lost card %s %d times",
			n.cardOf(other), j.Lost, after-before)
	}
	n.check("while card " + j.Lost + " is lost")
	n.stop()
	n.start(n.job())
	n.retry(Unprepare(lost))
	n.releaseAll()
	n.empty("once the card is back")
}

// twoCards picks two held claims whose partitions are on different
// cards, each on one card only.
func (n *node) twoCards() (a, b string) {
	for _, x := range n.held {
		for _, y := range n.held {
			cx, cy := n.cardOf(x), n.cardOf(y)
			if cx != "" && cy != "" && cx != cy {
				return x, y
			}
		}
	}
	return "", ""
}

// cardOf is the one card whose partitions claim holds, "" for none or
// several.
func (n *node) cardOf(claim string) string {
	card := ""
	for _, d := range n.devs[claim] {
		k, _ := n.m.Key(d)
		if k.Whole || card != "" && k.Card != card {
			return ""
		}
		card = k.Card
	}
	return card
}

// concurrent releases claims while new claims of their devices are
// prepared, all at once, on cards whose changes take a while.
func (s *suite) concurrent(t *testing.T) {
	n := s.newNode(t)
	j := n.job()
	j.Slow = 50 * time.Millisecond
	n.start(j)
	steps := s.prefixSteps()
	for _, st := range steps {
		n.do(st, nil, false)
	}
	ctx := context.Background()
	for round := 1; round <= 3; round++ {
		var wg sync.WaitGroup
		errs := make(chan error, 2*len(steps))
		next := map[string]string{}
		for _, st := range steps {
			old := st.Claim
			if round > 1 {
				old = fmt.Sprintf("%s-r%d", st.Claim, round-1)
			}
			renamed := fmt.Sprintf("%s-r%d", st.Claim, round)
			next[old] = renamed
			oldClaim := n.claims[old]
			again := Step{Claim: renamed, Devices: st.Devices, Config: st.Config}
			newClaim, err := n.claim(ctx, again)
			if err != nil {
				t.Fatal(err)
			}
			wg.Go(func() { errs <- n.kubelet.Unprepare(ctx, oldClaim) })
			wg.Go(func() { errs <- n.kubeletRetry(ctx, newClaim) })
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
		}
		for old, renamed := range next {
			n.held = slices.DeleteFunc(n.held, func(h string) bool { return h == old })
			n.held = append(n.held, renamed)
			n.devs[renamed], n.cfgs[renamed] = n.devs[old], n.cfgs[old]
			delete(n.claims, old)
			delete(n.ids, old)
			if err := n.record(ctx, renamed, n.devs[renamed]); err != nil {
				t.Fatal(err)
			}
		}
		n.check(fmt.Sprintf("after round %d", round))
	}
	n.releaseAll()
	n.empty("after every release")
}

// kubeletRetry prepares claim, retrying as the kubelet does while the
// runtime refuses a device another claim still holds.
func (n *node) kubeletRetry(ctx context.Context, claim *resourceapi.ResourceClaim) error {
	deadline := time.Now().Add(time.Minute)
	for {
		_, err := n.kubelet.Prepare(ctx, claim)
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}
