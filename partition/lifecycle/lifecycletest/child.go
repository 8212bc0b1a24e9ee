package lifecycletest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/drakit/drakit/cdi"
	"github.com/drakit/drakit/driver"
	"github.com/drakit/drakit/driver/driverflag"
	"github.com/drakit/drakit/partition/lifecycle"
	"github.com/drakit/drakit/partition/lifecycle/internal/faults"
)

// childEnv carries a driver process's job (JSON) from the test to the
// test binary it re-executes.
const childEnv = "DRAKIT_LIFECYCLETEST_CHILD"

// readyLine is what a driver process prints on its standard output once
// its runtime serves, followed by its DRA socket.
const readyLine = "lifecycletest: ready "

// job is what one driver process does.
type job struct {
	Node       Node
	Kubeconfig string
	// Dir holds the process's folders: plugins/ (sockets, checkpoint
	// under checkpoint/), registry/, cdi/, and the files the process
	// reports in (overlaps, lost-calls).
	Dir string
	// Point and N: the process kills itself (SIGKILL) the N-th time it
	// reaches Point; none when N is 0.
	Point string
	N     int
	// Lost is a card whose tool calls fail, as a lost card's do.
	Lost string
	// Owner and PodUID, when set, run the process as an instance of a
	// rolling update.
	Owner, PodUID string
	// Hits, when set, is a file the process appends each point it
	// reaches to.
	Hits string
	// Slow makes each change on a card take this long more, as a real
	// card's do (a MIG create takes a good part of a second), so that
	// calls that overlap on one card would be seen overlapping.
	Slow time.Duration
}

// Child runs a driver process of the kit when the test binary was
// started as one, and never returns then; otherwise it returns at once.
// Call it first in the test binary's TestMain:
//
//	func TestMain(m *testing.M) {
//		lifecycletest.Child(kit)
//		os.Exit(m.Run())
//	}
func Child(c Config) {
	raw := os.Getenv(childEnv)
	if raw == "" {
		return
	}
	var j job
	if err := json.Unmarshal([]byte(raw), &j); err != nil {
		fmt.Println("lifecycletest: bad job:", err)
		os.Exit(2)
	}
	if err := j.run(c); err != nil {
		fmt.Println("lifecycletest: driver:", err)
		os.Exit(3)
	}
	os.Exit(0)
}

// run runs the driver until SIGTERM, or until it kills itself at its
// point.
func (j *job) run(c Config) error {
	faults.Hook = j.hook()
	if j.Owner != "" {
		j.Node.Options = append(j.Node.Options, lifecycle.WithRollingUpdate(c.Driver, j.Owner))
		j.Node.Owner = j.Owner
	}
	d, err := c.Open(j.Node)
	if err != nil {
		return fmt.Errorf("open: %w", err)
	}
	cfg, err := driverflag.LoadRESTConfig(j.Kubeconfig)
	if err != nil {
		return err
	}
	plugins := filepath.Join(j.Dir, "plugins")
	opts := []driver.Option{driver.WithRESTConfig(cfg), driver.WithNodeName(j.Node.Name),
		driver.WithRegistrarDir(filepath.Join(j.Dir, "registry")),
		driver.WithPluginDataDir(plugins),
		driver.WithCheckpointDir(filepath.Join(plugins, "checkpoint")),
		driver.WithCDIDir(filepath.Join(j.Dir, "cdi")), driver.WithDiscoverer(d),
		driver.WithPreparer(hooked{d})}
	if j.PodUID != "" {
		opts = append(opts, driver.WithRollingUpdate(types.UID(j.PodUID)))
	}
	if j.Owner != "" {
		opts = append(opts, driver.WithRollingUpdateOwner(j.Owner))
	}
	rt, err := driver.New(c.Driver, opts...)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	go func() {
		select {
		case <-rt.Ready():
			fmt.Println(readyLine + rt.DRASocket())
		case <-ctx.Done():
		}
	}()
	return rt.Run(ctx)
}

// hook is the process's fault seam: it kills the process at its point,
// fails the tool calls on a lost card, records the points reached, and
// records two tool calls on one card at once (which the lifecycle's card
// lock must never allow).
func (j *job) hook() func(ctx context.Context, point, card string) error {
	s := &seam{j: j, hits: map[string]int{}, busy: map[string]int{}}
	return func(_ context.Context, point, card string) error {
		err := s.at(point, card)
		if err == nil && j.Slow > 0 && slices.Contains(changes, point) {
			time.Sleep(j.Slow)
		}
		return err
	}
}

// changes are the points right before a tool call that changes a card.
var changes = []string{"tool/create", "tool/destroy", "tool/switch"}

// seam is the hook's state: the points reached, the tool calls under way
// per card.
type seam struct {
	j          *job
	mu         sync.Mutex
	hits, busy map[string]int
}

func (s *seam) at(point, card string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hits[point]++
	if s.j.Hits != "" {
		appendLine(s.j.Hits, point)
	}
	if point == s.j.Point && s.hits[point] == s.j.N {
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // the signal is on its way
	}
	op, ok := strings.CutPrefix(point, "tool/")
	if !ok {
		return nil
	}
	switch op {
	case "create", "destroy", "switch", "list":
		if s.busy[card]++; s.busy[card] > 1 {
			msg := "two tool calls at once on card " + card + ": " + op
			appendLine(filepath.Join(s.j.Dir, "overlaps"), msg)
		}
		if card == s.j.Lost {
			s.busy[card]--
			appendLine(filepath.Join(s.j.Dir, "lost-calls"), op)
			return fmt.Errorf("lifecycletest: card %s is lost: it answers nothing", card)
		}
	default:
		s.busy[card]--
	}
	return nil
}

func appendLine(path, line string) {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return
	}
	_, _ = f.WriteString(line + "\n")
	_ = f.Close()
}

// hooked is the vendor's preparer with a kill point after each call
// that succeeded (the runtime records the result after it), and every
// optional interface the runtime asks for, forwarded when the vendor's
// preparer has it.
type hooked struct{ d Driver }

var (
	_ driver.ClaimPreparer = hooked{}
	_ driver.Reconciler    = hooked{}
	_ driver.ClaimEditor   = hooked{}
)

func at(ctx context.Context, point string, err error) error {
	if err == nil {
		_ = faults.At(ctx, point, "")
	}
	return err
}

func (h hooked) PrepareDevice(ctx context.Context, c driver.Claim, dev driver.AllocatedDevice) (
	driver.PreparedDevice, error) {
	out, err := h.d.PrepareDevice(ctx, c, dev)
	return out, at(ctx, "preparer/device-prepared", err)
}

func (h hooked) UnprepareDevice(ctx context.Context, c driver.ClaimRef, dev driver.AllocatedDevice,
	data json.RawMessage) error {
	return at(ctx, "preparer/device-unprepared", h.d.UnprepareDevice(ctx, c, dev, data))
}

func (h hooked) PrepareClaim(ctx context.Context, c driver.Claim, devs []driver.AllocatedDevice,
) error {
	cp, ok := h.d.(driver.ClaimPreparer)
	if !ok {
		return nil
	}
	return at(ctx, "preparer/claim-prepared", cp.PrepareClaim(ctx, c, devs))
}

func (h hooked) UnprepareClaim(ctx context.Context, c driver.ClaimRef,
	devs []driver.AllocatedDevice) error {
	cp, ok := h.d.(driver.ClaimPreparer)
	if !ok {
		return nil
	}
	return at(ctx, "preparer/claim-unprepared", cp.UnprepareClaim(ctx, c, devs))
}

func (h hooked) Reconcile(ctx context.Context, held []driver.HeldClaim) error {
	if r, ok := h.d.(driver.Reconciler); ok {
		return r.Reconcile(ctx, held)
	}
	return nil
}

func (h hooked) ClaimEdits(ctx context.Context, c driver.Claim, devs []driver.AllocatedDevice,
) (*cdi.Edits, error) {
	if e, ok := h.d.(driver.ClaimEditor); ok {
		return e.ClaimEdits(ctx, c, devs)
	}
	return nil, nil
}
