package driver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"

	"github.com/drakit/drakit/cdi"
	"github.com/drakit/drakit/device"
	"github.com/drakit/drakit/driver/internal/checkpoint"
)

// cdiClass is the default CDI class of the runtime's per-claim devices:
// their IDs are "<driver name>/claim=<claim UID>_<n>-<device>" unless
// [WithCDIKind] says otherwise.
const cdiClass = "claim"

// Driver is a DRA driver assembled from a vendor's [Discoverer] and
// [Preparer]. Create it with [New], start it with [Run].
type Driver struct {
	name    string
	o       options
	metrics *metrics

	ready       chan struct{}
	httpAddr    string
	publishKick chan struct{}
	// slicesSynced is set once the first publish went through: the
	// API server answered and the slice controller runs.
	slicesSynced atomic.Bool

	// callMu serializes prepare and unprepare calls when they must be
	// (see enterCall).
	callMu sync.Mutex

	// events records node events; set by Run before anything reports.
	events record.EventRecorder

	mu     sync.Mutex
	helper *kubeletplugin.Helper
	engine *engine
	client kubernetes.Interface
	health *healthState
	fatal  error
	cancel context.CancelCauseFunc
}

// New checks the driver name and the options and returns a driver that is
// not running yet. name is the driver's name, a DNS subdomain owned by the
// vendor ("gpu.example.com"). Errors name the option at fault.
func New(name string, opts ...Option) (*Driver, error) {
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
	if o.registerer != nil {
		if err := m.register(o.registerer); err != nil {
			return nil, fmt.Errorf("new driver %s: WithRegisterer: register metrics: %w", name, err)
		}
	}
	return &Driver{name: name, o: o, metrics: m, ready: make(chan struct{}), publishKick: make(chan struct{}, 1)}, nil
}

// Name is the driver's name.
func (d *Driver) Name() string { return d.name }

// Ready is closed once the driver serves the kubelet: the checkpoint is
// recovered and the sockets listen. The slices are published in the
// background, as soon as the API server answers (see /readyz with
// [WithHTTPAddress]).
func (d *Driver) Ready() <-chan struct{} { return d.ready }

// HTTPAddr is the address the metrics and health server listens on,
// valid after Ready ("" without [WithHTTPAddress]).
func (d *Driver) HTTPAddr() string { return d.httpAddr }

// Gatherer returns the driver's Prometheus metrics (drakit_driver_*), e.g.
// to serve them on a server of the vendor's own next to its registry:
// prometheus.Gatherers{vendorRegistry, d.Gatherer()}. It has no Go or
// process collectors, so that it merges with a registry that has them.
// [WithRegisterer] puts the same metrics into the vendor's registry
// instead.
func (d *Driver) Gatherer() prometheus.Gatherer { return d.metrics.registry }

// DRASocket is the path of the driver's DRA gRPC socket:
// <plugin data dir>/dra.sock, or dra-<pod UID>.sock with
// [WithRollingUpdate]. The runtime names it and tells the helper.
func (d *Driver) DRASocket() string {
	return filepath.Join(d.o.pluginDataDir, d.pluginSocket())
}

// Run starts the driver and blocks until ctx is canceled or a fatal error
// occurs; then it stops the gRPC servers and the slice publisher and
// returns (nil after a cancel). Run may be called once.
//
// First it takes ownership of the plugin data and checkpoint folders (a
// lock file in each): a second driver process on the same folders fails
// at once with an error wrapping [ErrFoldersInUse] that names the first,
// before it touches anything. Then it recovers the checkpoint: claims
// left half-way by a previous process are undone. Then it serves the
// kubelet, and publishes its ResourceSlices in the background: an API
// server that is down at start delays the slices and readiness
// (/readyz), never the kubelet's calls or liveness (/healthz).
func (d *Driver) Run(ctx context.Context) (err error) {
	logger := klog.LoggerWithValues(klog.FromContext(ctx), "driver", d.name)
	ctx = klog.NewContext(ctx, logger)
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	d.mu.Lock()
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
	release, err := ownFolders([]string{d.o.pluginDataDir, d.o.checkpointDir}, d.o.rollingUpdateUID != "")
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
	d.health = newHealthState(d.name, d.o.healthTimeout)
	d.health.setInventory(inv)
	eng.published = func(pool, dev string) bool {
		return d.o.uncheckedPools[pool] || d.health.published(pool, dev)
	}

	helper, err := kubeletplugin.Start(ctx, (*plugin)(d), d.helperOptions(client)...)
	if err != nil {
		return fmt.Errorf("run driver: start kubelet plugin: %w", err)
	}
	d.mu.Lock()
	d.helper = helper
	d.mu.Unlock()
	defer helper.Stop()

	if d.o.httpAddress != "" {
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

	var wg sync.WaitGroup
	defer wg.Wait()
	d.kickPublish()
	wg.Go(func() { d.publishLoop(ctx) })
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

// housekeep collects orphaned CDI specs and leftover temporary files
// every housekeeping interval until ctx is done. Failures are logged and
// counted, and tried again on the next round.
func (d *Driver) housekeep(ctx context.Context) {
	t := time.NewTicker(d.o.housekeepingInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		err := d.withCrossInstanceLock(func() error {
			if err := d.engine.syncFromDisk(ctx); err != nil {
				return fmt.Errorf("read checkpoint: %w", err)
			}
			d.engine.collect(ctx)
			return nil
		})
		if err != nil {
			d.metrics.error("housekeeping", ReasonCheckpoint)
			klog.FromContext(ctx).Error(err, "Housekeeping failed; will retry", "in", d.o.housekeepingInterval)
		}
	}
}

// nodeLocal rejects pools that are not the node's own: the kubelet plugin
// helper publishes every slice with the node's name, which the API server
// refuses next to a NodeSelector or AllNodes.
func nodeLocal(inv *device.Inventory) error {
	for _, p := range inv.Pools {
		if p.NodeSelector != nil || p.AllNodes {
			return fmt.Errorf("publish devices: pool %q has a NodeSelector or AllNodes (network-attached devices): a node's driver publishes its own node's devices only; publish such pools from a controller, with resourceslice.StartController and Inventory.DriverResources", p.Name)
		}
	}
	return nil
}

// kickPublish asks the publish loop to publish the current inventory.
func (d *Driver) kickPublish() {
	select {
	case d.publishKick <- struct{}{}:
	default: // a publish is pending; it will read the latest inventory
	}
}

// publishLoop publishes the current inventory, with health taints, each
// time it is kicked, until ctx is done. The first publish waits for the
// API server (the helper's slice controller syncs its informer first);
// the kubelet is served meanwhile, and readiness says so.
func (d *Driver) publishLoop(ctx context.Context) {
	logger := klog.FromContext(ctx)
	for {
		select {
		case <-ctx.Done():
			return
		case <-d.publishKick:
		}
		start := time.Now()
		first := !d.slicesSynced.Load()
		var waiting *time.Timer
		if first {
			waiting = time.AfterFunc(5*time.Second, func() {
				logger.Info("Waiting for the API server to publish ResourceSlices; the kubelet is served meanwhile")
			})
		}
		err := d.publish(ctx, d.health.inventory())
		if waiting != nil {
			waiting.Stop()
		}
		if err != nil {
			if ctx.Err() == nil {
				logger.Error(err, "Publishing devices failed")
			}
			continue
		}
		d.metrics.apiReachable.Set(1)
		if first {
			d.slicesSynced.Store(true)
			logger.Info("Publishing ResourceSlices", "waitedForAPIServer", time.Since(start).Round(time.Millisecond))
		}
	}
}

// publish hands inv, with health taints, to the slice publisher. inv has
// passed nodeLocal.
func (d *Driver) publish(ctx context.Context, inv *device.Inventory) error {
	tainted, err := d.health.taintedInventory(inv)
	if err != nil {
		d.metrics.error("publish", ReasonPublish)
		return fmt.Errorf("publish devices: %w", err)
	}
	res, err := tainted.DriverResources()
	if err != nil {
		d.metrics.error("publish", ReasonPublish)
		return fmt.Errorf("publish devices: %w", err)
	}
	if err := d.helper.PublishResources(ctx, *res); err != nil {
		d.metrics.error("publish", ReasonPublish)
		return fmt.Errorf("publish devices: %w", err)
	}
	n := 0
	for _, p := range inv.Pools {
		n += len(p.Devices)
	}
	d.metrics.publishedDevices.Set(float64(n))
	klog.FromContext(ctx).V(3).Info("Published devices", "devices", n)
	return nil
}

func (d *Driver) startHTTP(ctx context.Context) (*http.Server, error) {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(withRuntime(d.metrics.registry), promhttp.HandlerOpts{}))
	probe := func(check func(context.Context) error) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			if err := check(r.Context()); err != nil {
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
				return
			}
			_, _ = w.Write([]byte("ok\n"))
		}
	}
	mux.HandleFunc("/healthz", probe(d.live))
	mux.HandleFunc("/readyz", probe(d.readyCheck))
	ln, err := net.Listen("tcp", d.o.httpAddress)
	if err != nil {
		return nil, fmt.Errorf("listen for metrics: %w", err)
	}
	d.httpAddr = ln.Addr().String()
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, BaseContext: func(net.Listener) context.Context { return ctx }}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			klog.FromContext(ctx).Error(err, "Metrics server failed")
		}
	}()
	return srv, nil
}

// readyCheck reports why the driver is not ready: not alive, or its
// slices not yet published (the first publish waits for the API server).
// It asks the API server nothing: a probe every few seconds on every node
// would be thousands of requests a second on a large cluster, for a
// readiness that only gates the DaemonSet's rollout. Later publishing
// errors show in drakit_driver_api_server_reachable and the errors metric.
func (d *Driver) readyCheck(ctx context.Context) error {
	if err := d.live(ctx); err != nil {
		return err
	}
	if !d.slicesSynced.Load() {
		return errors.New("ResourceSlices not published yet: waiting for the API server")
	}
	return nil
}

// live reports why the driver is not alive: a registration the kubelet
// rejected, or a DRA socket that does not accept connections.
func (d *Driver) live(ctx context.Context) error {
	d.mu.Lock()
	helper := d.helper
	d.mu.Unlock()
	if helper == nil {
		return errors.New("kubelet plugin not started")
	}
	if st := helper.RegistrationStatus(); st != nil && !st.PluginRegistered {
		return fmt.Errorf("kubelet rejected registration: %s", st.Error)
	}
	var dialer net.Dialer
	dctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	conn, err := dialer.DialContext(dctx, "unix", d.DRASocket())
	if err != nil {
		return fmt.Errorf("DRA socket: %w", err)
	}
	_ = conn.Close()
	return nil
}

// plugin implements kubeletplugin.DRAPlugin for a Driver.
type plugin Driver

var _ kubeletplugin.DRAPlugin = (*plugin)(nil)

// PrepareResourceClaims prepares each claim (concurrently for a batch).
func (p *plugin) PrepareResourceClaims(ctx context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	exit, err := (*Driver)(p).enterCall()
	if err != nil {
		return nil, err
	}
	defer exit()
	e := p.engine
	if err := e.syncFromDisk(ctx); err != nil {
		return nil, fmt.Errorf("read checkpoint: %w", err)
	}
	out := make(map[types.UID]kubeletplugin.PrepareResult, len(claims))
	if len(claims) == 1 {
		out[claims[0].UID] = e.prepare(ctx, claims[0])
		return out, nil
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, c := range claims {
		wg.Go(func() {
			r := e.prepare(ctx, c)
			mu.Lock()
			out[c.UID] = r
			mu.Unlock()
		})
	}
	wg.Wait()
	return out, nil
}

// UnprepareResourceClaims unprepares each claim from the checkpoint.
func (p *plugin) UnprepareResourceClaims(ctx context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	exit, err := (*Driver)(p).enterCall()
	if err != nil {
		return nil, err
	}
	defer exit()
	e := p.engine
	if err := e.syncFromDisk(ctx); err != nil {
		return nil, fmt.Errorf("read checkpoint: %w", err)
	}
	out := make(map[types.UID]error, len(claims))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, c := range claims {
		wg.Go(func() {
			err := e.unprepare(ctx, ClaimRef{UID: c.UID, Namespace: c.Namespace, Name: c.Name})
			mu.Lock()
			out[c.UID] = err
			mu.Unlock()
		})
	}
	wg.Wait()
	return out, nil
}

// HandleError logs background errors; a non-recoverable one stops Run.
func (p *plugin) HandleError(ctx context.Context, err error, msg string) {
	logger := klog.FromContext(ctx)
	if errors.Is(err, kubeletplugin.ErrRecoverable) {
		// Background errors come from the ResourceSlice controller.
		p.metrics.error("background", ReasonPublish)
		p.metrics.apiReachable.Set(0)
		logger.Error(err, msg)
		return
	}
	logger.Error(err, msg+"; stopping the driver")
	p.mu.Lock()
	if p.fatal == nil {
		p.fatal = fmt.Errorf("%s: %w", msg, err)
	}
	cancel := p.cancel
	p.mu.Unlock()
	if cancel != nil {
		cancel(err)
	}
}

// WatchHealthStatus streams device health to the kubelet.
func (p *plugin) WatchHealthStatus(ctx context.Context, reports chan<- kubeletplugin.DeviceHealthReport) error {
	return p.health.stream(ctx, reports)
}
