package statefile_test

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/drakit/drakit/statefile"
)

// childEnv carries a lockJob to a copy of the test binary that takes an
// instance lock as another process.
const childEnv = "DRAKIT_STATEFILE_TEST_CHILD"

// lockJob is who a process is and how it locks the folder.
type lockJob struct {
	Dir, Driver, Owner string
	Rolling            bool
}

func (j lockJob) opts() []statefile.InstanceOption {
	opts := []statefile.InstanceOption{statefile.As(j.Driver, j.Owner)}
	if j.Rolling {
		opts = append(opts, statefile.RollingUpdate())
	}
	return opts
}

func TestMain(m *testing.M) {
	if raw := os.Getenv(childEnv); raw != "" {
		os.Exit(lockChild(raw))
	}
	os.Exit(m.Run())
}

// lockChild waits for a line on stdin, takes the lock, prints
// "admitted" or "refused <error>", and holds the lock until stdin
// closes (or it is killed).
func lockChild(raw string) int {
	var j lockJob
	if err := json.Unmarshal([]byte(raw), &j); err != nil {
		fmt.Println("error", err)
		return 2
	}
	in := bufio.NewReader(os.Stdin)
	if _, err := in.ReadString('\n'); err != nil {
		return 2
	}
	l, err := statefile.LockInstance(j.Dir, "drakit", j.opts()...)
	switch {
	case errors.Is(err, statefile.ErrInUse):
		fmt.Println("refused", err)
		return 0
	case err != nil:
		fmt.Println("error", err)
		return 2
	}
	fmt.Println("admitted")
	_, _ = io.Copy(io.Discard, in)
	_ = l.Release()
	return 0
}

// proc is a process of lockChild.
type proc struct {
	job lockJob
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Reader
	// said is its answer: "admitted" or "refused <error>".
	said string
}

// spawn starts a process of job, waiting for its go; the test stops it
// by its PID in the end.
func spawn(t *testing.T, job lockJob) *proc {
	t.Helper()
	raw, _ := json.Marshal(job)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+string(raw))
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{job: job, cmd: cmd, in: in, out: bufio.NewReader(out)}
	t.Cleanup(p.kill)
	return p
}

// lockAtOnce starts a process per job, then lets them all lock at once,
// and returns them with their answers.
func lockAtOnce(t *testing.T, jobs ...lockJob) []*proc {
	t.Helper()
	var ps []*proc
	for _, j := range jobs {
		ps = append(ps, spawn(t, j))
	}
	for _, p := range ps {
		if _, err := io.WriteString(p.in, "go\n"); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range ps {
		line, err := p.out.ReadString('\n')
		ok := strings.HasPrefix(line, "admitted") || strings.HasPrefix(line, "refused")
		if err != nil || !ok {
			t.Fatalf("process %d: %q, %v", p.pid(), line, err)
		}
		p.said = strings.TrimSpace(line)
	}
	return ps
}

func (p *proc) pid() int       { return p.cmd.Process.Pid }
func (p *proc) admitted() bool { return p.said == "admitted" }

// named is how a refusal names the process.
func (p *proc) named() string { return fmt.Sprintf("process %d (", p.pid()) }

// kill stops the process by its PID (SIGKILL) and waits for it; again
// is a no-op.
func (p *proc) kill() {
	if p.cmd.ProcessState == nil {
		_ = p.cmd.Process.Kill()
		_ = p.cmd.Wait()
	}
}

// TestLockInstanceProcessesAtOnce: processes that lock one folder at
// once are admitted exactly as the contract says, whichever comes first:
// one alone; the two instances of a rolling update of one owner (a third
// refused); of two releases, the two of one; a process alone or a
// rolling update, never both. Each refusal names the folder and only
// processes that hold it.
func TestLockInstanceProcessesAtOnce(t *testing.T) {
	alone := func(owner string) lockJob { return lockJob{Driver: "gpu.example.com", Owner: owner} }
	rolling := func(owner string) lockJob {
		j := alone(owner)
		j.Rolling = true
		return j
	}
	for _, c := range []struct {
		name string
		jobs []lockJob
		// admit lists the sets of jobs (by index) that may be admitted.
		admit [][]int
		// reason is in every refusal: of one of them, per set of admit.
		reasons []string
	}{
		{"alone", []lockJob{alone("ns/a"), alone("ns/a"), alone("ns/a"), alone("ns/b")},
			[][]int{{0}, {1}, {2}, {3}}, []string{"a second process is refused"}},
		{"rolling update", []lockJob{rolling("ns/a"), rolling("ns/a"), rolling("ns/a"),
			rolling("ns/a")}, [][]int{{0, 1}, {0, 2}, {0, 3}, {1, 2}, {1, 3}, {2, 3}},
			[]string{"a third process is refused"}},
		{"two releases", []lockJob{rolling("ns/a"), rolling("ns/b"), rolling("ns/a"),
			rolling("ns/b")}, [][]int{{0, 2}, {1, 3}},
			[]string{"is not the other instance of its rolling update", "a third process"}},
		{"alone or rolling", []lockJob{alone("ns/a"), rolling("ns/a"), rolling("ns/a")},
			[][]int{{0}, {1, 2}}, []string{"not as an instance of a rolling update",
				"this process is not one of them"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			for round := range 3 {
				dir := t.TempDir()
				jobs := slices.Clone(c.jobs)
				for i := range jobs {
					jobs[i].Dir = dir
				}
				ps := lockAtOnce(t, jobs...)
				var in []int
				for i, p := range ps {
					if p.admitted() {
						in = append(in, i)
					}
				}
				same := func(s []int) bool { return slices.Equal(s, in) }
				if !slices.ContainsFunc(c.admit, same) {
					t.Fatalf("round %d: admitted %v, want one of %v", round, in, c.admit)
				}
				for _, p := range ps {
					if !p.admitted() {
						checkRefusal(t, p, ps, dir, c.reasons)
					}
				}
				for _, p := range ps {
					p.kill()
				}
			}
		})
	}
}

// checkRefusal checks that p's refusal names dir, one of the reasons,
// at least one admitted process and no refused one.
func checkRefusal(t *testing.T, p *proc, ps []*proc, dir string, reasons []string) {
	t.Helper()
	msg := p.said
	if !strings.Contains(msg, dir+" is held by ") {
		t.Errorf("refusal %q does not name the folder %s", msg, dir)
	}
	if !slices.ContainsFunc(reasons, func(r string) bool { return strings.Contains(msg, r) }) {
		t.Errorf("refusal %q says none of %q", msg, reasons)
	}
	holders := 0
	for _, o := range ps {
		if o == p || !strings.Contains(msg, "held by "+o.named()) &&
			!strings.Contains(msg, "and "+o.named()) {
			continue
		}
		if !o.admitted() {
			t.Errorf("refusal %q names process %d, which was refused too", msg, o.pid())
		}
		holders++
	}
	if holders == 0 {
		t.Errorf("refusal %q names no process that holds the folder", msg)
	}
}

// TestLockInstanceCrashedHolder: the place of a holder killed with
// SIGKILL is free at once, also in a rolling update, and refusals name
// the processes that hold the folder now, not the dead one.
func TestLockInstanceCrashedHolder(t *testing.T) {
	dir := t.TempDir()
	job := lockJob{Dir: dir, Driver: "gpu.example.com", Owner: "ns/a", Rolling: true}
	a := lockAtOnce(t, job)[0]
	b := lockAtOnce(t, job)[0]
	third := lockAtOnce(t, job)[0]
	if !a.admitted() || !b.admitted() || third.admitted() {
		t.Fatalf("a rolling update's processes one after the other: %q, %q, %q",
			a.said, b.said, third.said)
	}
	a.kill()
	c := lockAtOnce(t, job)[0]
	if !c.admitted() {
		t.Fatalf("after the first was killed: %q", c.said)
	}
	d := lockAtOnce(t, job)[0]
	if d.admitted() {
		t.Fatal("a third process beside the new pair was admitted")
	}
	checkRefusal(t, d, []*proc{a, b, c, d}, dir, []string{"a third process is refused"})
	if strings.Contains(d.said, a.named()) {
		t.Errorf("refusal %q names the dead process %d", d.said, a.pid())
	}
	for _, p := range []*proc{b, c} {
		p.kill()
	}
	job.Rolling = false
	e := lockAtOnce(t, job)[0]
	f := lockAtOnce(t, job)[0]
	e.kill()
	g := lockAtOnce(t, job)[0]
	if !e.admitted() || f.admitted() || !g.admitted() {
		t.Errorf("processes alone, the first killed before the third: %q, %q, %q",
			e.said, f.said, g.said)
	}
}

// TestLockInstanceInProcess: calls in one process are separate holders;
// many at once admit exactly the contract's (run it with -race).
func TestLockInstanceInProcess(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		opts []statefile.InstanceOption
		want int
	}{
		{[]statefile.InstanceOption{statefile.As("d", "ns/a")}, 1},
		{[]statefile.InstanceOption{statefile.As("d", "ns/a"), statefile.RollingUpdate()}, 2},
	} {
		var (
			wg   sync.WaitGroup
			mu   sync.Mutex
			held []*statefile.InstanceLock
			errs []error
		)
		start := make(chan struct{})
		for range 8 {
			wg.Go(func() {
				<-start
				l, err := statefile.LockInstance(dir, "drakit", c.opts...)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					errs = append(errs, err)
					return
				}
				held = append(held, l)
			})
		}
		close(start)
		wg.Wait()
		if len(held) != c.want {
			t.Errorf("%d of 8 calls at once admitted, want %d", len(held), c.want)
		}
		for _, err := range errs {
			var inUse *statefile.InUseError
			if !errors.As(err, &inUse) || !errors.Is(err, statefile.ErrInUse) || inUse.Dir != dir ||
				len(inUse.Holders) == 0 {
				t.Errorf("refusal %v: want an InUseError naming %s and its holders", err, dir)
			}
		}
		for _, l := range held {
			if err := l.Release(); err != nil {
				t.Error(err)
			}
			_ = l.Release() // again: a no-op
		}
	}
}

// TestLockInstanceMessages: each refusal says which folder, which
// processes hold it and why this one is refused; Release removes the
// process's record.
func TestLockInstanceMessages(t *testing.T) {
	pid := os.Getpid()
	rolling := func(owner string) []statefile.InstanceOption {
		return []statefile.InstanceOption{statefile.As("gpu.example.com", owner),
			statefile.RollingUpdate()}
	}
	alone := []statefile.InstanceOption{statefile.As("gpu.example.com", "ns/a")}
	who := func(owner string) string {
		return fmt.Sprintf("process %d (driver gpu.example.com of %s)", pid, owner)
	}
	for _, c := range []struct {
		name    string
		holders [][]statefile.InstanceOption
		lose    string // a record removed before the call
		call    []statefile.InstanceOption
		want    string // after "<dir> is held by "
	}{
		{"alone beside alone", [][]statefile.InstanceOption{alone}, "", alone,
			who("ns/a") + ": a second process is refused"},
		{"rolling beside alone", [][]statefile.InstanceOption{alone}, "", rolling("ns/a"),
			who("ns/a") + ": it holds the folder alone, not as an instance of a rolling update"},
		{"alone beside rolling", [][]statefile.InstanceOption{rolling("ns/a")}, "", alone,
			who("ns/a") + ": they are the instances of a rolling update, and this process is " +
				"not one of them"},
		{"second release", [][]statefile.InstanceOption{rolling("ns/a")}, "", rolling("ns/b"),
			who("ns/a") + ": " + who("ns/b") + " is not the other instance of its rolling " +
				"update (another release of the driver on this node?)"},
		{"third", [][]statefile.InstanceOption{rolling("ns/a"), rolling("ns/a")}, "",
			rolling("ns/a"), who("ns/a") + " and " + who("ns/a") + ": they are the two " +
				"instances of a rolling update, and a third process is refused"},
		{"record lost", [][]statefile.InstanceOption{rolling("ns/a")}, "drakit.slot0.holder",
			rolling("ns/a"), fmt.Sprintf("process %d: its record of who it is is missing, "+
				"so %s cannot tell that it is the other instance of its rolling update", pid,
				who("ns/a"))},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			var held []*statefile.InstanceLock
			for _, opts := range c.holders {
				l, err := statefile.LockInstance(dir, "drakit", opts...)
				if err != nil {
					t.Fatal(err)
				}
				held = append(held, l)
			}
			if c.lose != "" {
				if err := os.Remove(filepath.Join(dir, c.lose)); err != nil {
					t.Fatal(err)
				}
			}
			_, err := statefile.LockInstance(dir, "drakit", c.call...)
			if want := dir + " is held by " + c.want; err == nil || err.Error() != want {
				t.Errorf("got  %v\nwant %s", err, want)
			}
			for _, l := range held {
				if err := l.Release(); err != nil {
					t.Fatal(err)
				}
			}
			if m, _ := filepath.Glob(filepath.Join(dir, "*.holder")); len(m) != 0 {
				t.Errorf("records left after Release: %v", m)
			}
			l, err := statefile.LockInstance(dir, "drakit", c.call...)
			if err != nil {
				t.Fatalf("after the holders released the folder: %v", err)
			}
			_ = l.Release()
		})
	}
	if _, err := statefile.LockInstance(t.TempDir(), "a/b"); err == nil {
		t.Error("a lock name with a folder was taken")
	}
}
