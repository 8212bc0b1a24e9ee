package driver

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2"

	"github.com/drakit/drakit/cdi"
	"github.com/drakit/drakit/driver/internal/checkpoint"
	"github.com/drakit/drakit/driver/internal/health"
	"github.com/drakit/drakit/driver/internal/publication"
)

// cdiClass is the default CDI class of the runtime's per-claim devices:
// their IDs are "<driver name>/claim=<claim UID>_<n>-<device>" unless
// [WithCDIKind] says otherwise.
const cdiClass = "claim"

// Runtime runs a DRA driver assembled from a vendor's [Discoverer] and
// [Preparer]: it serves the kubelet, publishes the slices, keeps the
// checkpoint and reports health. Create it with [New] and call
// [Runtime.Run] once. Its other methods may be called from any goroutine
// (HTTPAddr once Ready is closed).
type Runtime struct {
	name    string
	o       options
	metrics *metrics

	ready       chan struct{}
	httpAddr    string
	publishKick chan struct{}
	// rediscoverKick asks the watch loop to discover again (a follower
	// handed over an inventory change: publisher.go).
	rediscoverKick chan struct{}
	// slicesSynced is set once the first publish went through: the
	// API server answered and the slice controller runs.
	slicesSynced atomic.Bool
	// firstPublish is closed once the inventory is complete in the API
	// server (see Published).
	firstPublish chan struct{}

	// callMu serializes prepare and unprepare calls when they must be
	// (see enterCall).
	callMu sync.Mutex

	// events records node events; set by Run before anything reports.
	events record.EventRecorder

	mu     sync.Mutex
	helper *kubeletplugin.Helper
	// slices writes the node's slices while this process publishes
	// (publisher.go).
	slices *slicePublisher
	engine *engine
	client kubernetes.Interface
	health *health.State
	// published is what the slices were last built from and what the
	// node's slices list (observeSlices), with the recently withdrawn
	// devices.
	published *publication.Set
	// observed is the watch of the node's slices (observeSlices).
	observed cache.SharedIndexInformer
	fatal    error
	cancel   context.CancelCauseFunc
	// ran is set by the first Run (see ErrRunAgain).
	ran bool
}

// Driver is the former name of [Runtime], kept for one release.
//
// Deprecated: use Runtime; a vendor's own driver type is usually called
// Driver, and the runtime is not one.
type Driver = Runtime

// New checks the driver name and the options and returns a driver that is
// not running yet. name is the driver's name, a DNS subdomain owned by the
// vendor ("gpu.example.com"). Errors name the option at fault.
func New(name string, opts ...Option) (*Runtime, error) {
	if errs := utilvalidation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return nil, fmt.Errorf("new driver: name %q: %v", name, errs)
	}
	o := options{
		registrarDir:   kubeletplugin.KubeletRegistryDir,
		pluginDataDir:  filepath.Join(kubeletplugin.KubeletPluginsDir, name),
		cdiDir:         kubeletplugin.DefaultCDIDir,
		healthTimeout:  30 * time.Second,
		resyncInterval: DefaultResyncInterval,

		housekeepingInterval: DefaultHousekeepingInterval,
		cdiVendor:            name,
		cdiClass:             cdiClass,
		bootIDFile:           DefaultBootIDFile,
		sliceSyncDelay:       resourceslice.DefaultSyncDelay,
	}
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return nil, fmt.Errorf("new driver %s: %w", name, err)
		}
	}
	switch {
	case o.discoverer == nil:
		return nil, fmt.Errorf("new driver %s: WithDiscoverer is required", name)
	case o.preparer == nil:
		return nil, fmt.Errorf("new driver %s: WithPreparer is required", name)
	case o.client == nil && o.restConfig == nil:
		return nil, fmt.Errorf("new driver %s: WithKubeClient or WithRESTConfig is required", name)
	case o.client != nil && o.restConfig != nil:
		return nil, fmt.Errorf("new driver %s: WithKubeClient and WithRESTConfig are mutually exclusive", name)
	case o.nodeName == "":
		return nil, fmt.Errorf("new driver %s: WithNodeName is required", name)
	case o.registrarSocket != "" && o.rollingUpdateUID != "":
		return nil, fmt.Errorf("new driver %s: WithRegistrarSocketFilename and WithRollingUpdate are mutually exclusive (a rolling update names the registration socket per pod)", name)
	}
	if hi, ok := o.discoverer.(HealthIntervaler); ok {
		if every := hi.HealthInterval(); every > 0 && o.healthTimeout <= every {
			return nil, fmt.Errorf("new driver %s: the health timeout %v (WithHealthTimeout) is not above the discoverer's health interval %v: every device would show as Unknown between two reports; raise the timeout (twice the interval leaves room for a late report) or report more often", name, o.healthTimeout, every)
		}
	}
	if o.checkpointDir == "" {
		o.checkpointDir = filepath.Join(o.pluginDataDir, "checkpoint")
	}
	if o.lockDir == "" {
		o.lockDir = o.pluginDataDir
	}
	m := newMetrics(name)
	for _, c := range o.collectors {
		if err := m.registry.Register(c); err != nil {
			return nil, fmt.Errorf("new driver %s: WithCollectors: %w", name, err)
		}
	}
	if o.registerer != nil {
		if err := m.register(o.registerer); err != nil {
			return nil, fmt.Errorf("new driver %s: WithRegisterer: register metrics: %w", name, err)
		}
	}
	return &Runtime{name: name, o: o, metrics: m, ready: make(chan struct{}),
		firstPublish: make(chan struct{}), publishKick: make(chan struct{}, 1),
		rediscoverKick: make(chan struct{}, 1)}, nil
}

// Name is the driver's name.
func (d *Runtime) Name() string { return d.name }

// Ready is closed once the driver serves the kubelet: the checkpoint is
// recovered and the sockets listen. It says nothing about the slices:
// they are published in the background, as soon as the API server
// answers, and are complete there only later, when [Runtime.Published]
// is closed (a pod created between the two may find no device and stay
// Unschedulable until the scheduler retries it).
func (d *Runtime) Ready() <-chan struct{} { return d.ready }

// HTTPAddr is the address the metrics and health server listens on,
// valid after Ready ("" without [WithHTTPAddress], and during a rolling
// update while the other instance holds the address).
func (d *Runtime) HTTPAddr() string { return d.httpAddr }

// Gatherer returns the driver's Prometheus metrics (drakit_driver_*), e.g.
// to serve them on a server of the vendor's own next to its registry:
// prometheus.Gatherers{vendorRegistry, d.Gatherer()}. It has no Go or
// process collectors, so that it merges with a registry that has them.
// [WithRegisterer] puts the same metrics into the vendor's registry
// instead.
func (d *Runtime) Gatherer() prometheus.Gatherer { return d.metrics.registry }

// DRASocket is the path of the driver's DRA gRPC socket:
// <plugin data dir>/dra.sock, or dra-<pod UID>.sock with
// [WithRollingUpdate] (dra-<hash of the UID>.sock where the UID would make
// the path too long for a unix socket). The runtime names it and tells
// the helper.
func (d *Runtime) DRASocket() string {
	return filepath.Join(d.o.pluginDataDir, d.pluginSocket())
}

// Run starts the driver and blocks until ctx is canceled or a fatal error
// occurs; then it stops the gRPC servers and the slice publisher and
// returns (nil after a cancel). Call it once: a second call returns
// [ErrRunAgain] at once.
//
// First it takes ownership of the plugin data and checkpoint folders (a
// lock file in each): a second driver process on the same folders fails
// at once with an error wrapping [ErrFoldersInUse] that names the first,
// before it touches anything. Then it recovers the checkpoint: claims
// left half-way by a previous process are undone. Then it serves the
// kubelet, and publishes its ResourceSlices in the background: an API
// server that is down at start delays the slices and readiness
// (/readyz), never the kubelet's calls or liveness (/healthz).
func (d *Runtime) Run(ctx context.Context) (err error) {
	logger := klog.LoggerWithValues(klog.FromContext(ctx), "driver", d.name)
	ctx = klog.NewContext(ctx, logger)
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	d.mu.Lock()
	if d.ran {
		d.mu.Unlock()
		return ErrRunAgain
	}
	d.ran = true
	d.cancel = cancel
	d.mu.Unlock()

	client := d.o.client
	if client == nil {
		cfg := d.o.restConfig
		if cfg.QPS == 0 && cfg.Burst == 0 {
			cfg.QPS, cfg.Burst = DefaultQPS, DefaultBurst
		}
		if client, err = kubernetes.NewForConfig(cfg); err != nil {
			return fmt.Errorf("run driver: build client: %w", err)
		}
	}
	d.client = client
	stopEvents := d.startEvents(ctx, client)
	defer stopEvents()
	for _, f := range []struct {
		dir             string
		create, maxMode os.FileMode
	}{
		{d.o.pluginDataDir, folderMode, folderMode},
		// The kubelet's folder, shared with other plugins: only writes
		// by others are taken away.
		{d.o.registrarDir, folderMode, 0o755},
		{d.o.checkpointDir, checkpointMode, checkpointMode},
		{d.o.lockDir, folderMode, folderMode},
	} {
		if err := ensureFolder(ctx, f.dir, f.create, f.maxMode); err != nil {
			return fmt.Errorf("run driver: %w", err)
		}
	}
	// Own the folders before anything in them is read or changed.
	rolling := d.o.rollingUpdateUID != ""
	if rolling && d.o.rollingUpdateOwner == "" {
		klog.FromContext(ctx).Info("Rolling update without an owner " +
			"(WithRollingUpdateOwner): a second release of the driver on this node that names " +
			"no owner either would be taken for this one's other instance")
	}
	release, err := ownFolders([]string{d.o.pluginDataDir, d.o.checkpointDir},
		d.name, d.o.rollingUpdateOwner, rolling)
	if err != nil {
		return fmt.Errorf("run driver: %w", err)
	}
	defer release()
	store, err := checkpoint.Open(d.o.checkpointDir)
	if err != nil {
		return fmt.Errorf("run driver: %w", err)
	}
	// CDI specs are not fsynced: recovery checks every prepared claim's
	// spec and undoes the claim when it is missing or torn.
	specs, err := cdi.NewWriter(d.o.cdiDir, d.o.cdiVendor, d.o.cdiClass, cdi.WithoutFsync())
	if err != nil {
		return fmt.Errorf("run driver: %w", err)
	}
	eng := newEngine(d.name, store, specs, d.o.preparer, d.metrics)
	eng.reloadPerCall = d.o.rollingUpdateUID != ""
	eng.onCorrupt = d.reportCorrupt
	eng.getClaim = func(ctx context.Context, ref ClaimRef) (*resourceapi.ResourceClaim, error) {
		return client.ResourceV1().ResourceClaims(ref.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
	}
	eng.onUnreleased = d.reportUnreleased
	eng.onUnusedConfig = d.reportUnusedConfig
	if eng.bootID, err = readBootID(d.o.bootIDFile); err != nil {
		return fmt.Errorf("run driver: %w", err)
	}
	d.engine = eng

	// Recover before serving. With a rolling update the other instance
	// may be serving: hold its lock meanwhile.
	if err := d.withCrossInstanceLock(func() error { return eng.recover(ctx) }); err != nil {
		return fmt.Errorf("run driver: %w", err)
	}

	inv, err := d.o.discoverer.Inventory(ctx)
	if err != nil {
		return fmt.Errorf("run driver: discover devices: %w", err)
	}
	if inv, err = d.accept(inv); err != nil {
		return fmt.Errorf("run driver: discover devices: %w", err)
	}
	// Publishing happens in the background, once the API server answers:
	// an inventory that cannot become slices fails now, not then.
	if _, err := inv.DriverResources(); err != nil {
		return fmt.Errorf("run driver: publish devices: %w", err)
	}
	d.published = publication.New()
	d.health = health.New(d.name, d.o.healthTimeout, d.published)
	d.setInventory(inv)
	d.metrics.state.src.Store(&stateSource{published: d.published, health: d.health, engine: eng, kind: d.o.deviceKind})
	d.observed = d.observeSlices(ctx)
	eng.published = func(ctx context.Context, pool, dev string) bool {
		return d.o.uncheckedPools[pool] || d.published.Has(pool, dev) || d.listedNow(ctx, pool, dev)
	}

	helper, err := kubeletplugin.Start(ctx, (*plugin)(d), d.helperOptions(client)...)
	if err != nil {
		return fmt.Errorf("run driver: start kubelet plugin: %w", err)
	}
	d.mu.Lock()
	d.helper = helper
	d.mu.Unlock()
	defer helper.Stop()

	if d.o.httpAddress != "" || d.o.probeSocket != "" {
		srv, err := d.startHTTP(ctx)
		if err != nil {
			return fmt.Errorf("run driver: %w", err)
		}
		defer func() {
			sctx, c := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer c()
			_ = srv.Shutdown(sctx)
		}()
	}

	// The instance that started last publishes (publisher.go).
	slices, err := newSlicePublisher(d)
	if err != nil {
		return fmt.Errorf("run driver: %w", err)
	}
	d.mu.Lock()
	d.slices = slices
	d.mu.Unlock()
	defer slices.close()

	var wg sync.WaitGroup
	defer wg.Wait()
	d.kickPublish()
	wg.Go(func() { slices.run(ctx) })
	wg.Go(func() { d.publishLoop(ctx) })
	wg.Go(func() { d.awaitFirstPublish(ctx) })
	wg.Go(func() { d.watch(ctx) })
	wg.Go(func() { d.housekeep(ctx) })

	logger.Info("Driver ready", "node", d.o.nodeName, "socket", d.DRASocket(), "preparedClaims", eng.preparedCount())
	close(d.ready)
	<-ctx.Done()
	logger.Info("Driver stopping", "cause", context.Cause(ctx))
	d.mu.Lock()
	fatal := d.fatal
	d.mu.Unlock()
	return fatal
}
