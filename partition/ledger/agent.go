package ledger

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	"k8s.io/klog/v2"

	"github.com/drakit/drakit/partition"
	"github.com/drakit/drakit/partition/plan"
)

// PoolSuffix ends the name of every layout pool: a node's layout pool is
// "<node>/layout", a group of its cards "<node>/layout/<device>-<index>"
// (partition.Scheme.PoolName). An admission webhook's matchConditions
// select the allocations of layout devices by it (LayoutMatchCondition).
const PoolSuffix = "/layout"

// PoolName is node's layout pool name.
func PoolName(node string) string { return node + PoolSuffix }

// NodeOfPool returns the node of a layout pool name, and false for a
// pool that is not one.
func NodeOfPool(pool string) (string, bool) {
	if node, ok := strings.CutSuffix(pool, PoolSuffix); ok && node != "" &&
		!strings.Contains(node, "/") {
		return node, true
	}
	i := strings.Index(pool, PoolSuffix+"/")
	if i <= 0 || strings.Contains(pool[:i], "/") {
		return "", false
	}
	return pool[:i], true
}

// IsLayoutPool reports whether pool is a layout pool (NodeOfPool).
func IsLayoutPool(pool string) bool {
	_, ok := NodeOfPool(pool)
	return ok
}

// Agent is a node's side of the ledger: it keeps the node's ledger's Open
// set planned for what is held, busy and asked (Ledger.Publish) and says
// what the node publishes (Ledger.Layout). It watches only its own
// node's ledger. Two agents of one node (a rolling update's surge) may
// run at once: each Sync is a compare-and-swap. It is safe for
// concurrent use.
type Agent struct {
	store *Store
	node  string
	opts  []Option

	mu       sync.Mutex
	onChange []func()
}

// OnChange registers f, called (from Run's goroutine) after every version
// of the node's ledger Run sees. Call it before Run.
func (a *Agent) OnChange(f func()) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.onChange = append(a.onChange, f)
}

// NewAgent returns the agent of node, publishing in PoolName(node) (and
// its groups) with opts (WithPoolDevices,
// WithDefaultMix).
func NewAgent(store *Store, node string, opts ...Option) (*Agent, error) {
	if store == nil || node == "" {
		return nil, errors.New("new ledger agent: a store and a node name are needed")
	}
	if _, err := gather(opts); err != nil {
		return nil, fmt.Errorf("new ledger agent: %w", err)
	}
	return &Agent{store: store, node: node, opts: opts}, nil
}

// Pool is the node's layout pool name.
func (a *Agent) Pool() string { return PoolName(a.node) }

// Run watches the node's ledger (a field selector on its name) and calls
// the OnChange functions, from one goroutine, after every version it
// sees, until ctx is done; Sync then starts from the version seen.
// synced, when not nil, is closed after the first list.
func (a *Agent) Run(ctx context.Context, synced chan<- struct{}) error {
	return a.store.Watch(ctx, a.node, func(string, *Ledger) {
		a.mu.Lock()
		fs := slices.Clone(a.onChange)
		a.mu.Unlock()
		for _, f := range fs {
			f()
		}
	}, synced)
}

// Sync plans the node's layout for cards (Ledger.Publish, creating the
// ledger when there is none: the planner seeds it) by compare-and-swap
// and returns the ledger written, what the node publishes
// (Ledger.Layout), and the cards withheld with their reasons. When the
// write fails (the API server unreachable), it returns the error with
// the layout of the last ledger it knows: publishing that is safe, since
// allocations are admitted against the ledger, not the slice.
func (a *Agent) Sync(
	ctx context.Context,
	cards []AgentCard,
) (*Ledger, []partition.PublishedCard, map[int]string, error) {
	var withheld map[int]string
	l, err := a.store.Update(ctx, a.node, true, func(l *Ledger) error {
		var err error
		withheld, err = l.Publish(a.Pool(), cards, a.opts...)
		return err
	})
	if err != nil {
		cached, _ := a.store.Cached(a.node)
		if cached == nil {
			cached = &Ledger{Node: a.node}
		}
		layout, lerr := cached.Layout(a.Pool(), cards, a.opts...)
		if lerr != nil {
			return nil, nil, nil, errors.Join(err, lerr)
		}
		return cached, layout, nil, fmt.Errorf("sync the layout ledger: %w", err)
	}
	layout, err := l.Layout(a.Pool(), cards, a.opts...)
	if err != nil {
		return nil, nil, nil, err
	}
	return l, layout, withheld, nil
}

// MemoryAgent is an Agent whose ledger lives in memory, seeded, with a
// fixed Demand and nothing held: what a node publishes for that demand
// when no claim holds anything. For checks and benchmarks that run a
// driver without an API server; never for a node that serves claims.
// It is safe for concurrent use.
type MemoryAgent struct {
	node string
	opts []Option
	mu   sync.Mutex
	l    *Ledger
}

// NewMemoryAgent returns the MemoryAgent of node with demand (opts as
// for NewAgent).
func NewMemoryAgent(node string, demand plan.Demand, opts ...Option) *MemoryAgent {
	d := plan.Demand{}
	for k, v := range demand {
		d[k] = v
	}
	return &MemoryAgent{node: node, opts: opts, l: &Ledger{Node: node, Seeded: true, Demand: d}}
}

// Pool is the node's layout pool name.
func (a *MemoryAgent) Pool() string { return PoolName(a.node) }

// Sync is Agent.Sync on the ledger in memory.
func (a *MemoryAgent) Sync(
	_ context.Context,
	cards []AgentCard,
) (*Ledger, []partition.PublishedCard, map[int]string, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	withheld, err := a.l.Publish(a.Pool(), cards, a.opts...)
	if err != nil {
		return nil, nil, nil, err
	}
	layout, err := a.l.Layout(a.Pool(), cards, a.opts...)
	if err != nil {
		return nil, nil, nil, err
	}
	return a.l.Clone(), layout, withheld, nil
}

// SyncLog logs what an agent's Syncs report once per change, rather than
// on every inventory: a failed ledger write, and each card withheld or
// withheld for another reason. The zero value is ready for use; it is
// safe for concurrent use.
type SyncLog struct {
	mu       sync.Mutex
	err      string
	withheld map[int]string
}

// Log records one Sync's withheld cards and error and logs, through
// logger, err when its message differs from the last one logged (nil
// forgets it) and, after a Sync that wrote the ledger (err nil), each
// withheld card whose reason is new. withheld is not read when err is
// not nil: Sync returns none then.
func (s *SyncLog) Log(logger klog.Logger, withheld map[int]string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		if s.err != err.Error() {
			logger.Error(err, "layout ledger not written; publishing what it last said")
		}
		s.err = err.Error()
		return
	}
	s.err = ""
	if maps.Equal(s.withheld, withheld) {
		return
	}
	cards := slices.Sorted(maps.Keys(withheld))
	for _, card := range cards {
		if why := withheld[card]; s.withheld[card] != why {
			logger.Info("layout card withheld", "card", card, "reason", why)
		}
	}
	s.withheld = maps.Clone(withheld)
}
