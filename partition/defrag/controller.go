package defrag

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/klog/v2"

	"github.com/drakit/drakit/explain"
	pplan "github.com/drakit/drakit/partition/plan"
)

// AllowValue is the value of the opt-in annotation (Vendor.Domain +
// "/defrag") that lets the controller evict a pod. Any other value, or
// none, and the pod is never evicted.
const AllowValue = "allow"

// Event reasons, on the pods involved.
const (
	// ReasonDefragmenting, on the waiting pod: which pods are evicted to
	// free which placement of which card.
	ReasonDefragmenting = "Defragmenting"
	// ReasonEvicted, on each evicted pod: for which pod.
	ReasonEvicted = "EvictedForDefrag"
	// ReasonAllocated, on the waiting pod: its claim got the freed device.
	ReasonAllocated = "DefragAllocated"
	// ReasonPlaced, on the waiting pod: it is bound, the taints are gone.
	ReasonPlaced = "DefragPlaced"
	// ReasonAbandoned (a Warning), on the waiting pod: the operation
	// stopped early (a PodDisruptionBudget refused an
	// eviction, it timed out, the pod or its claim went away).
	ReasonAbandoned = "DefragAbandoned"
	// ReasonRolledBack, on the waiting pod: a controller stopped while
	// tainting a region (before any eviction) and the one after it
	// removed the taints; the pod is planned for again.
	ReasonRolledBack = "DefragRolledBack"
)

// Defaults of the options.
const (
	// DefaultMinCompute is the least number of compute units a profile
	// must have for a pod waiting for it to trigger a move: the large
	// profiles, which fragmentation blocks (MIG's 3g, 4g, 7g); a small
	// one waits for a partition to end instead.
	DefaultMinCompute = 3
	// DefaultInterval is how often Run looks at the cluster.
	DefaultInterval = 10 * time.Second
	// DefaultTimeout is how long an operation may take from the
	// evictions until the waiting pod is bound before it is abandoned
	// and its taints removed.
	DefaultTimeout = 5 * time.Minute
)

// Option configures a Controller.
type Option func(*options) error

type options struct {
	maxMoves   int
	minCompute int
	interval   time.Duration
	timeout    time.Duration
	dryRun     io.Writer
	features   structured.Features
	now        func() time.Time

	namespaces     map[string]bool // nil: every namespace
	perHour        int
	perNode        int
	backoff        time.Duration
	leaseNamespace string
	leaseName      string
	owner          string
	crash          func(point string) bool // tests: end Step as a kill would
	// Layout publication (layout.go).
	ledgerNS     string
	classProfile func(class string) (string, bool)
}

// WithMaxMoves sets the most pods one operation evicts (default
// plan.DefaultMaxMoves, 2). k must be between 1 and 8.
func WithMaxMoves(k int) Option {
	return func(o *options) error {
		if k < 1 || k > 8 {
			return fmt.Errorf("max moves %d: must be between 1 and 8", k)
		}
		o.maxMoves = k
		return nil
	}
}

// WithMinCompute sets the least compute units of a profile whose waiting
// pods trigger a move (default DefaultMinCompute). n must be at least 1.
func WithMinCompute(n int) Option {
	return func(o *options) error {
		if n < 1 {
			return fmt.Errorf("min compute %d: must be at least 1", n)
		}
		o.minCompute = n
		return nil
	}
}

// WithInterval sets how often Run takes a Step (default DefaultInterval).
func WithInterval(d time.Duration) Option {
	return func(o *options) error {
		if d <= 0 {
			return fmt.Errorf("interval %s: must be positive", d)
		}
		o.interval = d
		return nil
	}
}

// WithTimeout sets how long an operation may take from its evictions
// until the waiting pod is bound (default DefaultTimeout). After that
// its taints are removed and the pod is left to the scheduler.
func WithTimeout(d time.Duration) Option {
	return func(o *options) error {
		if d <= 0 {
			return fmt.Errorf("timeout %s: must be positive", d)
		}
		o.timeout = d
		return nil
	}
}

// WithDryRun makes the controller print to w what it would do (which
// pods it would evict for which pod, the placement freed, the device the
// claim would get) and change nothing: no taint, eviction, allocation
// or Event.
func WithDryRun(w io.Writer) Option {
	return func(o *options) error {
		if w == nil {
			return errors.New("dry run: the writer is nil")
		}
		o.dryRun = w
		return nil
	}
}

// WithFeatures sets the allocator features the controller's allocations
// use (default explain.DefaultFeatures, kube-scheduler 1.37's defaults):
// pass what the cluster's scheduler runs with.
func WithFeatures(f structured.Features) Option {
	return func(o *options) error { o.features = f; return nil }
}

// Controller moves restartable pods off a card so that a pod waiting for
// a large profile gets the freed placement (see the package doc).
// Create it with New; Run and Step are not to be called concurrently.
type Controller struct {
	client kubernetes.Interface
	driver string
	n      names
	o      options

	mu   sync.Mutex
	told map[string]string // pod UID -> the last "no plan" message logged for it
	mem  memory
	// ownerUID is the UID of the ClusterRole of WithOwner, once read.
	ownerUID types.UID
	// cache, while Run runs, is where a Step reads the cluster.
	cache *cache
	// refused counts plans refused because a replacement would not land
	// (RefusedPlans).
	refused int64
}

// New returns a controller for the partitionable cards of DRA driver
// driver, whose slices follow the counter model (package
// partition/counter) of the schemes vendor names, or whose layout
// ledgers WithLayoutLedgers names. It reaches the API server through
// client. An invalid vendor or option is an error.
func New(
	client kubernetes.Interface, driver string, vendor Vendor, opts ...Option,
) (*Controller, error) {
	if client == nil {
		return nil, errors.New("new defrag controller: the client is nil")
	}
	if driver == "" {
		return nil, errors.New("new defrag controller: the driver name is empty")
	}
	n, err := vendor.names()
	if err != nil {
		return nil, fmt.Errorf("new defrag controller: %w", err)
	}
	o := options{maxMoves: pplan.DefaultMaxMoves, minCompute: DefaultMinCompute,
		interval: DefaultInterval, timeout: DefaultTimeout, features: explain.DefaultFeatures,
		now: time.Now, perHour: DefaultEvictionsPerHour, perNode: DefaultEvictionsPerNodePerHour,
		backoff: DefaultBackoff}
	for i, opt := range opts {
		if opt == nil {
			return nil, fmt.Errorf("new defrag controller: option %d is nil", i)
		}
		if err := opt(&o); err != nil {
			return nil, fmt.Errorf("new defrag controller: %w", err)
		}
	}
	return &Controller{client: client, driver: driver, n: n, o: o, told: map[string]string{},
		mem: memory{abandoned: map[types.UID]time.Time{}}}, nil
}

// Run takes a Step every interval until ctx is done; a Step's error is
// logged and the next Step tries again. It returns nil when ctx ends.
// With WithLeaderElection it steps only while it holds the lease, and
// returns an error when it loses it.
func (c *Controller) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	logger.Info("Defragmenter running", "driver", c.driver, "maxMoves", c.o.maxMoves,
		"minCompute", c.o.minCompute, "dryRun", c.o.dryRun != nil,
		"evictionsPerHour", c.o.perHour, "evictionsPerNodePerHour", c.o.perNode,
		"backoff", c.o.backoff, "leaderElection", c.o.leaseName != "")
	if c.o.leaseName != "" {
		return c.runElected(ctx)
	}
	return c.loop(ctx)
}

// loop takes a Step every interval until ctx is done.
func (c *Controller) loop(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	ca, err := c.startCache(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	c.cache = ca
	defer func() { c.cache = nil; ca.stop() }()
	t := time.NewTicker(c.o.interval)
	defer t.Stop()
	for {
		if _, err := c.Step(ctx); err != nil && ctx.Err() == nil {
			logger.Error(err, "defrag step")
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Step looks at the cluster once. With an operation under way it
// advances it (allocates the waiting claim once the region is free,
// removes the taints once the pod is bound or the operation is over);
// otherwise it looks for a pod that waits for a large profile and,
// when some opted-in pods can move to make room for it, starts an
// operation (or, in a dry run, prints it). It returns the operation it
// started or advanced, nil when there was none.
func (c *Controller) Step(ctx context.Context) (*Operation, error) {
	if c.o.ledgerNS != "" {
		return c.layoutStep(ctx)
	}
	if c.o.dryRun == nil {
		op, err := c.current(ctx)
		if err != nil {
			return nil, err
		}
		if op != nil {
			return op, c.advance(ctx, op)
		}
	}
	p, err := c.findPlan(ctx)
	if err != nil || p == nil {
		return nil, err
	}
	if c.o.dryRun != nil {
		c.print(c.o.dryRun, p)
		return &p.op, nil
	}
	return &p.op, c.start(ctx, p)
}
