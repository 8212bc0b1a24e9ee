package driver

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"google.golang.org/grpc"

	"github.com/prometheus/client_golang/prometheus"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/drakit/drakit/cdi"
	"github.com/drakit/drakit/device"
)

// Default client rate limits set on a REST config given to
// [WithRESTConfig] that has none. The kubelet plugin helper GETs every
// claim on prepare; client-go's own default of 5 requests/s would cap a
// driver at 5 prepares/s.
const (
	DefaultQPS   = 200
	DefaultBurst = 400
)

// Option configures a [Runtime]. Options are applied in order; an option
// with a bad value makes [New] fail with an error naming it.
type Option func(*options) error

type options struct {
	discoverer           Discoverer
	preparer             Preparer
	client               kubernetes.Interface
	restConfig           *rest.Config
	nodeName             string
	registrarDir         string
	pluginDataDir        string
	cdiDir               string
	checkpointDir        string
	lockDir              string
	registerer           prometheus.Registerer
	httpAddress          string
	probeSocket          string
	deviceKind           func(device.DeviceID) string
	collectors           []prometheus.Collector
	rollingUpdateUID     types.UID
	rollingUpdateOwner   string
	serialize            bool
	healthTimeout        time.Duration
	extraHelperOpts      []kubeletplugin.Option
	helperKnobs          []kubeletplugin.Option
	registrarSocket      string
	deviceMetadata       bool
	resyncInterval       time.Duration
	housekeepingInterval time.Duration
	cdiVendor, cdiClass  string
	uncheckedPools       map[string]bool
	bootIDFile           string

	// sliceSyncDelay is the slice controller's delay after a slice
	// event (tests shorten it); soloPublisher turns the one-publisher
	// rule off (publisher.go; the measurement that compares the two).
	sliceSyncDelay time.Duration
	soloPublisher  bool
}

// DefaultHousekeepingInterval is how often the runtime collects orphaned
// CDI specs and temporary files left by crashed writes, unless
// [WithHousekeepingInterval] says otherwise.
const DefaultHousekeepingInterval = time.Minute

// WithDiscoverer sets the vendor's device discovery (required). Its
// inventory is published as ResourceSlices at start, again after each
// change event (retried with a growing delay while Inventory fails) and
// every [WithResyncInterval]; its health events become device taints and
// kubelet health reports. The inventory's Driver must be the driver's
// name or empty (see [ErrDriverMismatch]).
func WithDiscoverer(d Discoverer) Option {
	return func(o *options) error {
		if d == nil {
			return errors.New("WithDiscoverer: nil discoverer")
		}
		o.discoverer = d
		return nil
	}
}

// WithPreparer sets the vendor's per-device prepare and unprepare
// (required). If it also implements [ClaimPreparer], its claim-level
// hooks are called too.
func WithPreparer(p Preparer) Option {
	return func(o *options) error {
		if p == nil {
			return errors.New("WithPreparer: nil preparer")
		}
		o.preparer = p
		return nil
	}
}

// WithKubeClient sets the client used to publish slices and to read
// claims. The client's rate limit is used as is: build it with a QPS and
// burst that allow your prepare rate (each prepare GETs each claim), or
// use [WithRESTConfig], which sets them. One of the two is required.
func WithKubeClient(c kubernetes.Interface) Option {
	return func(o *options) error {
		if c == nil {
			return errors.New("WithKubeClient: nil client")
		}
		o.client = c
		return nil
	}
}

// WithRESTConfig builds the driver's client from cfg. When cfg sets no
// rate limit (QPS and Burst zero, which means 5/s and 10 in client-go),
// the driver uses [DefaultQPS] and [DefaultBurst]. cfg is copied.
func WithRESTConfig(cfg *rest.Config) Option {
	return func(o *options) error {
		if cfg == nil {
			return errors.New("WithRESTConfig: nil config")
		}
		o.restConfig = rest.CopyConfig(cfg)
		return nil
	}
}

// WithNodeName sets the name of the node the driver runs on (required):
// its slices are published for it.
func WithNodeName(name string) Option {
	return func(o *options) error {
		if name == "" {
			return errors.New("WithNodeName: empty node name")
		}
		o.nodeName = name
		return nil
	}
}

// WithRegistrarDir sets the kubelet's plugin registration folder. Default
// /var/lib/kubelet/plugins_registry.
func WithRegistrarDir(dir string) Option {
	return func(o *options) error {
		if dir == "" {
			return errors.New("WithRegistrarDir: empty path")
		}
		o.registrarDir = dir
		return nil
	}
}

// WithPluginDataDir sets the driver's own folder, where its gRPC socket
// and (unless [WithCheckpointDir]) its checkpoint live. Default
// /var/lib/kubelet/plugins/<driver name>. It is created if missing.
func WithPluginDataDir(dir string) Option {
	return func(o *options) error {
		if dir == "" {
			return errors.New("WithPluginDataDir: empty path")
		}
		o.pluginDataDir = dir
		return nil
	}
}

// WithCDIDir sets the folder the container runtime reads CDI specs from.
// Default /var/run/cdi.
func WithCDIDir(dir string) Option {
	return func(o *options) error {
		if dir == "" {
			return errors.New("WithCDIDir: empty path")
		}
		o.cdiDir = dir
		return nil
	}
}

// WithCheckpointDir sets where the per-claim checkpoint records are kept.
// Default <plugin data dir>/checkpoint. It must survive driver restarts
// (a host path), and be shared by both instances in a rolling update.
func WithCheckpointDir(dir string) Option {
	return func(o *options) error {
		if dir == "" {
			return errors.New("WithCheckpointDir: empty path")
		}
		o.checkpointDir = dir
		return nil
	}
}

// WithHTTPAddress serves /metrics (Prometheus), /healthz (liveness) and
// /readyz (readiness) on addr, e.g. ":8080" or "127.0.0.1:0". Default: no
// HTTP server. /healthz fails when the kubelet reported a failed
// registration or the driver's gRPC socket does not accept connections:
// the driver's own health, never the API server's, so that an API
// outage does not make a liveness probe restart it. /readyz fails also
// until the first slices are published (which waits for the API server);
// a probe asks the API server nothing.
func WithHTTPAddress(addr string) Option {
	return func(o *options) error {
		o.httpAddress = addr
		return nil
	}
}

// WithProbeSocket serves the HTTP server's paths (/healthz, /readyz,
// /metrics) also on a unix socket at path, created with mode 0600 (a
// stale file there is replaced). Give it a path private to the pod (its
// /tmp): an exec probe through it (see driverflag.Probe) asks this
// instance, also while the other pod of a rolling update holds the TCP
// address of [WithHTTPAddress] on the host's network, where an httpGet
// probe would reach the other instance.
func WithProbeSocket(path string) Option {
	return func(o *options) error {
		if path == "" {
			return errors.New("WithProbeSocket: empty path")
		}
		o.probeSocket = path
		return nil
	}
}

// WithRollingUpdate lets a new driver pod run beside the old one during a
// DaemonSet rolling update; podUID must be the pod's UID (downward API).
// Both instances must share the plugin data, checkpoint and lock
// ([WithLockDir]) folders: their calls then take turns through a lock
// file, either can unprepare what the other prepared, and only the newer
// one writes the slices ([Runtime.Publishing]). The folders admit this
// process and the other instance of the same driver and owner
// ([WithRollingUpdateOwner]) only; anyone else, and this process beside
// a driver that runs without the option, gets [ErrFoldersInUse], so the
// rollout that turns the option on must use maxUnavailable, not
// maxSurge. Give each pod its probes through [WithProbeSocket]: the other
// instance may hold the HTTP address.
func WithRollingUpdate(podUID types.UID) Option {
	return func(o *options) error {
		if podUID == "" {
			return errors.New("WithRollingUpdate: empty pod UID")
		}
		o.rollingUpdateUID = podUID
		return nil
	}
}

// WithRollingUpdateOwner names the deployment whose pods run this driver
// on the node, the same for both instances of a rolling update and
// different for any other: the DaemonSet's namespace/name, which a chart
// knows (driverflag's --rolling-update-owner). With [WithRollingUpdate]
// the folders' instance lock admits beside this process only the other
// instance of the same driver and owner, so that a second release of the
// driver on the node is refused at start instead of running beside the
// first; refusals name the owner. Without it the owner is empty: a rolling
// update's process pairs with any other process of the driver that gives
// no owner, and a third is still refused.
func WithRollingUpdateOwner(owner string) Option {
	return func(o *options) error {
		if owner == "" {
			return errors.New("WithRollingUpdateOwner: empty owner")
		}
		o.rollingUpdateOwner = owner
		return nil
	}
}

// WithSerializedCalls makes the runtime handle one prepare or unprepare
// call at a time (the kubelet plugin helper's default, which drakit turns
// off and does itself). By default drakit lets calls for different claims
// run concurrently (each claim is still handled by one call at a time).
func WithSerializedCalls() Option {
	return func(o *options) error {
		o.serialize = true
		return nil
	}
}

// WithHealthTimeout sets how long a health report of the vendor stays
// valid. A device whose last report is older is reported to the kubelet
// as Unknown (its taint, if it was Unhealthy, stays until a report says
// otherwise), and the kubelet itself shows it as unknown after this time
// without a report (HealthCheckTimeout). The vendor's health monitor must
// so report on each device more often than this: the runtime never
// repeats a report on its behalf. Default 30s, the kubelet's default.
func WithHealthTimeout(d time.Duration) Option {
	return func(o *options) error {
		if d < 2*time.Second {
			return fmt.Errorf("WithHealthTimeout: %v is below 2s", d)
		}
		o.healthTimeout = d
		return nil
	}
}

// WithResyncInterval sets how often the runtime asks the discoverer for
// its inventory again without a change event, so that a change whose
// event was lost reaches the slices. Default [DefaultResyncInterval]. An
// inventory equal to the published one changes no slice.
func WithResyncInterval(d time.Duration) Option {
	return func(o *options) error {
		if d <= 0 {
			return fmt.Errorf("WithResyncInterval: %v is not positive", d)
		}
		o.resyncInterval = d
		return nil
	}
}

// WithDeviceMetadata makes the device metadata that [Preparer]s return
// ([PreparedDevice.Metadata]) readable by the claim's containers (KEP-5304,
// through the kubelet plugin helper): one JSON file per request, in
// metadata.resource.k8s.io/v1beta1, bind-mounted by a CDI spec that the
// helper writes next to drakit's own in the CDI folder and removes on
// unprepare. Default off.
func WithDeviceMetadata() Option {
	return func(o *options) error {
		o.deviceMetadata = true
		return nil
	}
}

// WithHousekeepingInterval sets how often the runtime removes CDI specs of
// claims that are not prepared (left by a crash, or by a failed removal)
// and temporary files of writes a crash interrupted (once they are a
// minute old). Default [DefaultHousekeepingInterval]. A failed removal is
// logged, counted (drakit_driver_errors_total{operation="housekeeping"},
// drakit_driver_orphaned_cdi_specs) and tried again next time; it never
// stops the driver.
func WithHousekeepingInterval(d time.Duration) Option {
	return func(o *options) error {
		if d <= 0 {
			return fmt.Errorf("WithHousekeepingInterval: %v is not positive", d)
		}
		o.housekeepingInterval = d
		return nil
	}
}

// WithCDIKind sets the CDI kind of the runtime's per-claim CDI devices,
// "<vendor>/<class>" (e.g. "acme.example.com/fpga"): their IDs are
// "<kind>=<claim UID>_<n>-<device>" and their spec files
// "<vendor>+<class>+<claim UID>.json". Default "<driver name>/claim".
// Changing the kind of a running deployment leaves the specs of claims
// prepared before with the old kind: unprepare them first.
func WithCDIKind(kind string) Option {
	return func(o *options) error {
		vendor, class, err := cdi.ParseKind(kind)
		if err != nil {
			return fmt.Errorf("WithCDIKind: %w", err)
		}
		o.cdiVendor, o.cdiClass = vendor, class
		return nil
	}
}

// WithUncheckedPools names pools whose allocated devices the driver
// prepares without checking that it publishes them. By default a device
// is prepared only when the current inventory or this driver's slices of
// the node in the API server (whoever wrote them) list it, or did less
// than a minute ago; any other is refused before vendor code runs.
// Name here the pools a controller publishes for this driver
// (network-attached devices, see resourceslice.StartController) that this
// node prepares, or a pool a benchmark allocates from without a
// scheduler.
func WithUncheckedPools(pools ...string) Option {
	return func(o *options) error {
		if o.uncheckedPools == nil {
			o.uncheckedPools = map[string]bool{}
		}
		for _, p := range pools {
			if p == "" {
				return errors.New("WithUncheckedPools: empty pool name")
			}
			o.uncheckedPools[p] = true
		}
		return nil
	}
}

// WithRegisterer registers the driver's metrics (drakit_driver_*, with
// a constant label driver=<name>) in r as well, so that they are served
// with the vendor's own; [New] fails when r refuses them (a driver of the
// same name registered there already). The Go and process collectors
// are left to the program: the runtime registers none in r.
func WithRegisterer(r prometheus.Registerer) Option {
	return func(o *options) error {
		if r == nil {
			return errors.New("WithRegisterer: nil registerer")
		}
		o.registerer = r
		return nil
	}
}

// WithDeviceKind names each device's kind for the runtime's metrics
// (drakit_driver_devices{health,kind}, drakit_driver_prepared_devices{kind}):
// a profile, a model, "half" or "whole", whatever an operator graphs
// devices by. Keep the kinds few: each is a time series. kind is called
// at each scrape for every published and prepared device, also for a
// device no longer published; it must be fast and safe for concurrent
// use. Default: every device's kind is "".
func WithDeviceKind(kind func(device.DeviceID) string) Option {
	return func(o *options) error {
		o.deviceKind = kind
		return nil
	}
}

// WithCollectors adds the vendor's own Prometheus collectors to the
// runtime's registry: they are served on its /metrics ([WithHTTPAddress])
// and returned by [Runtime.Gatherer]. [New] fails when one collides with
// the runtime's or another's.
func WithCollectors(cs ...prometheus.Collector) Option {
	return func(o *options) error {
		o.collectors = append(o.collectors, cs...)
		return nil
	}
}

// WithBootIDFile reads the node's boot ID from path instead of
// [DefaultBootIDFile]. The runtime records the boot ID with its
// checkpoint; when it finds another one at start, the node rebooted: every
// claim in the checkpoint is undone through the preparer's (idempotent)
// unprepare before the driver serves, so the kubelet's prepare after the
// reboot makes the devices afresh instead of getting an answer that names
// devices and files that are gone. An empty path turns reboot detection
// off; so does a path that does not exist.
func WithBootIDFile(path string) Option {
	return func(o *options) error { o.bootIDFile = path; return nil }
}

// WithLockDir sets the folder of the lock file through which the two
// instances of a rolling update ([WithRollingUpdate]) serialize their
// calls, recovery and housekeeping. Both instances must use the same
// folder, on a file system with flock, reserved for the driver: it is
// created if missing, and others' write permission is taken away, as for
// the plugin data folder. Default: the plugin data folder.
func WithLockDir(dir string) Option {
	return func(o *options) error {
		if dir == "" {
			return errors.New("WithLockDir: empty path")
		}
		o.lockDir = dir
		return nil
	}
}

// WithHelperOptions passes options to the kubelet plugin helper
// (kubeletplugin.Start) before the runtime's own: every setting the
// runtime relies on (names, folders, sockets, listeners, serialization,
// the services, rolling update, slice reconciliation, device metadata)
// is stated after them and wins, so these options can change only what
// the typed options below change.
//
// Deprecated: use WithGRPCVerbosity, WithGRPCInterceptor,
// WithGRPCStreamInterceptor, WithKubeletAPIVersions, WithHealthService
// and WithRegistrarSocketFilename. WithHelperOptions will be removed in
// the next release.
func WithHelperOptions(opts ...kubeletplugin.Option) Option {
	return func(o *options) error {
		for _, opt := range opts {
			if opt == nil {
				return errors.New("WithHelperOptions: nil option")
			}
		}
		o.extraHelperOpts = append(o.extraHelperOpts, opts...)
		return nil
	}
}

// WithGRPCVerbosity sets the klog verbosity at which the kubelet plugin
// helper logs each gRPC call and its response. Default 6; negative: never.
func WithGRPCVerbosity(level int) Option {
	return func(o *options) error {
		o.helperKnobs = append(o.helperKnobs, kubeletplugin.GRPCVerbosity(level))
		return nil
	}
}

// WithGRPCInterceptor adds a unary interceptor to the driver's gRPC
// servers (registration and DRA), e.g. for tracing. Interceptors run in
// the order given, after the helper's logging.
func WithGRPCInterceptor(interceptor grpc.UnaryServerInterceptor) Option {
	return func(o *options) error {
		if interceptor == nil {
			return errors.New("WithGRPCInterceptor: nil interceptor")
		}
		o.helperKnobs = append(o.helperKnobs, kubeletplugin.GRPCInterceptor(interceptor))
		return nil
	}
}

// WithGRPCStreamInterceptor adds a stream interceptor to the driver's
// gRPC servers (the health stream is one).
func WithGRPCStreamInterceptor(interceptor grpc.StreamServerInterceptor) Option {
	return func(o *options) error {
		if interceptor == nil {
			return errors.New("WithGRPCStreamInterceptor: nil interceptor")
		}
		o.helperKnobs = append(o.helperKnobs, kubeletplugin.GRPCStreamInterceptor(interceptor))
		return nil
	}
}

// WithKubeletAPIVersions chooses which versions of the kubelet's DRA gRPC
// API (k8s.io/kubelet/pkg/apis/dra) the driver serves: v1 (kubelet 1.34
// and newer) and v1beta1 (older kubelets). Default: both. At least one
// must be on.
func WithKubeletAPIVersions(v1, v1beta1 bool) Option {
	return func(o *options) error {
		if !v1 && !v1beta1 {
			return errors.New("WithKubeletAPIVersions: no version left to serve")
		}
		o.helperKnobs = append(o.helperKnobs, kubeletplugin.NodeV1(v1), kubeletplugin.NodeV1beta1(v1beta1))
		return nil
	}
}

// WithHealthService turns the DRAResourceHealth service (device health
// streamed to the kubelet, KEP-4680) on or off, and chooses its API
// versions: v1, and v1alpha1 for kubelets 1.36 and older. Default: on,
// both versions. Off, the kubelet never asks for health; the slices still
// carry the health taints.
func WithHealthService(enabled, v1, v1alpha1 bool) Option {
	return func(o *options) error {
		if enabled && !v1 && !v1alpha1 {
			return errors.New("WithHealthService: enabled with no API version")
		}
		o.helperKnobs = append(o.helperKnobs, kubeletplugin.HealthService(enabled), kubeletplugin.HealthV1(v1), kubeletplugin.HealthV1alpha1(v1alpha1))
		return nil
	}
}

// WithRegistrarSocketFilename names the registration socket in the
// kubelet's plugin registry (default "<driver name>-reg.sock"), for an
// installation that used another name. It cannot be combined with
// [WithRollingUpdate], which names the socket per pod.
func WithRegistrarSocketFilename(name string) Option {
	return func(o *options) error {
		if name == "" || strings.Contains(name, "/") {
			return fmt.Errorf("WithRegistrarSocketFilename: %q is not a file name", name)
		}
		o.registrarSocket = name
		return nil
	}
}
