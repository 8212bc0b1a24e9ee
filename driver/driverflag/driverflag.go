package driverflag

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/component-base/featuregate"
	logsapi "k8s.io/component-base/logs/api/v1"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/drakit/drakit/driver"
)

// The kubelet's folders, which the driver runtime uses when no flag or
// option names another.
const (
	// DefaultRegistrarDir is the kubelet's plugin registry folder.
	DefaultRegistrarDir = kubeletplugin.KubeletRegistryDir
	// DefaultPluginsDir is the kubelet's plugins folder: a driver's own
	// folder is DefaultPluginsDir/<driver name> (see [DefaultPluginDataDir]).
	DefaultPluginsDir = kubeletplugin.KubeletPluginsDir
	// DefaultCDIDir is the folder container runtimes read CDI specs from.
	DefaultCDIDir = kubeletplugin.DefaultCDIDir
)

// DefaultPluginDataDir is the folder the runtime gives driverName for its
// sockets and checkpoint unless told otherwise: DefaultPluginsDir/driverName.
func DefaultPluginDataDir(driverName string) string {
	return filepath.Join(DefaultPluginsDir, driverName)
}

// NodeNameEnv is the environment variable --node-name defaults to; set it
// from the downward API (spec.nodeName) in the driver's DaemonSet.
const NodeNameEnv = "NODE_NAME"

// PodUIDEnv is the environment variable --pod-uid defaults to; set it
// from the downward API (metadata.uid) in the driver's DaemonSet.
const PodUIDEnv = "POD_UID"

// ErrNoConfig is returned (wrapped) by [LoadRESTConfig] when no
// kubeconfig is given and the program does not run in a pod.
var ErrNoConfig = errors.New("no Kubernetes client configuration")

// LoadRESTConfig returns the client configuration the standard way: the
// kubeconfig file at path when path is set, else the files listed in
// $KUBECONFIG (merged as kubectl merges them), else the in-cluster
// configuration of the pod's service account. Without any of them the
// error wraps [ErrNoConfig] and says what to set.
func LoadRESTConfig(path string) (*rest.Config, error) {
	if path != "" {
		cfg, err := clientcmd.BuildConfigFromFlags("", path)
		if err != nil {
			return nil, fmt.Errorf("load kubeconfig %s: %w", path, err)
		}
		return cfg, nil
	}
	if env := os.Getenv(clientcmd.RecommendedConfigPathEnvVar); env != "" {
		rules := &clientcmd.ClientConfigLoadingRules{Precedence: filepath.SplitList(env)}
		cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
		if err != nil {
			return nil, fmt.Errorf("load kubeconfig from $%s=%s: %w", clientcmd.RecommendedConfigPathEnvVar, env, err)
		}
		return cfg, nil
	}
	cfg, err := rest.InClusterConfig()
	if errors.Is(err, rest.ErrNotInCluster) {
		return nil, fmt.Errorf("%w: give --kubeconfig, set $%s, or run in a pod", ErrNoConfig, clientcmd.RecommendedConfigPathEnvVar)
	}
	if err != nil {
		return nil, fmt.Errorf("load in-cluster config: %w", err)
	}
	return cfg, nil
}

// Flags are the settings every DRA driver takes from its command line.
// [Register] fills them in when the flag set is parsed; a program may
// also set them directly. Empty fields mean the defaults described at
// each field.
type Flags struct {
	// NodeName is the node the driver serves (--node-name, default
	// $NODE_NAME). Required.
	NodeName string
	// Kubeconfig is the kubeconfig file (--kubeconfig); empty means
	// $KUBECONFIG, then the in-cluster configuration (see [LoadRESTConfig]).
	Kubeconfig string
	// RegistrarDir is the kubelet's plugin registry folder
	// (--registrar-dir, default [DefaultRegistrarDir]).
	RegistrarDir string
	// PluginDataDir is the driver's own folder for its sockets and
	// checkpoint (--plugin-data-dir, default [DefaultPluginDataDir]).
	PluginDataDir string
	// CDIDir is the container runtime's CDI spec folder (--cdi-dir,
	// default [DefaultCDIDir]).
	CDIDir string
	// HTTPAddress serves /metrics and /healthz (--http-address, e.g.
	// ":8080"); empty means no HTTP server.
	HTTPAddress string
	// KubeAPIQPS and KubeAPIBurst are the client's sustained rate and
	// burst of API requests (--kube-api-qps, --kube-api-burst; defaults
	// [driver.DefaultQPS] = 200 and [driver.DefaultBurst] = 400). A
	// negative QPS turns the client's rate limiter off. The driver makes
	// one API request per prepared claim, so the burst is how many claims
	// a node prepares at once without waiting; raise both only for
	// benchmarks or nodes that prepare hundreds of claims a second
	// (docs/runtime.md says why the defaults are what they are).
	KubeAPIQPS   float64
	KubeAPIBurst int
	// HealthTimeout is how long a health report of the driver's monitor
	// stays valid (--health-timeout, see [driver.WithHealthTimeout]);
	// zero means the runtime's default of 30s, the kubelet's. A driver
	// whose monitor reports every N seconds needs a timeout above N.
	HealthTimeout time.Duration
	// PodUID is the driver pod's UID (--pod-uid, default $POD_UID from the
	// downward API's metadata.uid). Set, the driver runs for a seamless
	// rolling update ([driver.WithRollingUpdate]): a DaemonSet with
	// maxSurge starts the new pod beside the old one, and the kubelet
	// (1.33+) moves to the new one without a gap.
	PodUID string
	// RollingUpdateOwner names the deployment whose pods run the driver
	// (--rolling-update-owner, e.g. the DaemonSet's namespace/name), so
	// that a rolling update admits the other pod of the same DaemonSet
	// only and a second release of the driver on the node is refused
	// ([driver.WithRollingUpdateOwner]); empty: none.
	RollingUpdateOwner string
	// ProbeSocket is a unix socket, private to the pod, on which the
	// driver also serves /healthz and /readyz (--probe-socket, see
	// [driver.WithProbeSocket] and [Probe]); empty: none.
	ProbeSocket string
	// Logging is component-base's logging configuration: --logging-format
	// (text or json), -v, --vmodule, --log-flush-frequency and the
	// formats' options, as every Kubernetes component has them (see
	// [Flags.ApplyLogging]). nil when the flag set had its own "v" flag.
	Logging *logsapi.LoggingConfiguration
	// FeatureGate is the program's feature gates (--feature-gates),
	// component-base's, holding the logging gates (ContextualLogging,
	// LoggingAlphaOptions, LoggingBetaOptions); a driver adds its own
	// with [Flags.AddFeatureGates] before parsing and asks
	// FeatureGate.Enabled after.
	FeatureGate featuregate.MutableVersionedFeatureGate

	fs *flag.FlagSet
}

// Register adds the standard driver flags to fs (flag.CommandLine for a
// program's own) and returns the Flags they are parsed into. It also adds
// --feature-gates and component-base's logging flags (--logging-format,
// -v, --vmodule, ...) unless fs already has a "v" flag, e.g. from an
// earlier klog.InitFlags(fs).
func Register(fs *flag.FlagSet) *Flags {
	f := &Flags{}
	fs.StringVar(&f.NodeName, "node-name", os.Getenv(NodeNameEnv), "name of the node this driver serves (default $"+NodeNameEnv+")")
	fs.StringVar(&f.Kubeconfig, "kubeconfig", "", "kubeconfig file; empty means $KUBECONFIG, then the in-cluster configuration")
	fs.StringVar(&f.RegistrarDir, "registrar-dir", "", "kubelet plugin registry folder (default "+DefaultRegistrarDir+")")
	fs.StringVar(&f.PluginDataDir, "plugin-data-dir", "", "the driver's folder for sockets and checkpoint (default "+DefaultPluginsDir+"/<driver name>)")
	fs.StringVar(&f.CDIDir, "cdi-dir", "", "container runtime's CDI spec folder (default "+DefaultCDIDir+")")
	fs.StringVar(&f.HTTPAddress, "http-address", "", "address for /metrics and /healthz, e.g. :8080 (default: none)")
	fs.Float64Var(&f.KubeAPIQPS, "kube-api-qps", driver.DefaultQPS, "sustained API requests per second of the driver's client (one per prepared claim); negative: no limit")
	fs.IntVar(&f.KubeAPIBurst, "kube-api-burst", driver.DefaultBurst, "API requests the driver's client may make at once above --kube-api-qps: claims prepared in a burst without waiting")
	fs.StringVar(&f.PodUID, "pod-uid", os.Getenv(PodUIDEnv), "the driver pod's UID (default $"+PodUIDEnv+"); set: the driver supports a seamless rolling update, a new pod beside the old one (DaemonSet maxSurge)")
	fs.StringVar(&f.RollingUpdateOwner, "rolling-update-owner", "", "the deployment whose pods "+
		"run this driver, e.g. the DaemonSet's namespace/name: a rolling update admits the other "+
		"pod of the same owner only, and refuses a second release of the driver on the node")
	fs.StringVar(&f.ProbeSocket, "probe-socket", "", "a unix socket, private to the pod, that also serves /healthz and /readyz, for exec probes (driverflag.Probe) that must reach this instance while another holds --http-address")
	fs.DurationVar(&f.HealthTimeout, "health-timeout", 0, "how long a device health report stays valid before the device shows as Unknown; must exceed the health monitor's report interval (default 30s)")
	f.registerLogging(fs)
	return f
}

// RESTConfig returns the client configuration of [LoadRESTConfig] with
// the client limits of --kube-api-qps and --kube-api-burst (a negative
// QPS: no limit). Both zero, as in a Flags not made by [Register], leave
// the limits zero, which [driver.WithRESTConfig] reads as
// [driver.DefaultQPS] and [driver.DefaultBurst]. A QPS of 0 with a burst
// set is refused, because client-go would read it as its own default of
// 5 requests/s.
func (f *Flags) RESTConfig() (*rest.Config, error) {
	qps, burst := f.KubeAPIQPS, f.KubeAPIBurst
	switch {
	case qps == 0 && burst == 0: // the runtime applies its defaults
	case qps == 0:
		return nil, errors.New("driver flags: --kube-api-qps is 0, which client-go reads as its own default of 5/s; give a rate, or a negative value for no limit")
	case qps > 0 && burst < 1:
		return nil, fmt.Errorf("driver flags: --kube-api-burst is %d; it must be >= 1 when --kube-api-qps is set", burst)
	}
	cfg, err := LoadRESTConfig(f.Kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("driver flags: %w", err)
	}
	cfg.QPS, cfg.Burst = float32(qps), burst
	return cfg, nil
}

// Options returns the driver options the flags stand for: the node name,
// a client built from [LoadRESTConfig] with the client limits of
// --kube-api-qps and --kube-api-burst (zero fields: the runtime's
// defaults), and the folders, HTTP address and health timeout that are
// set. Errors name the flag to fix. It applies the logging flags first
// ([Flags.ApplyLogging]).
func (f *Flags) Options() ([]driver.Option, error) {
	if err := f.ApplyLogging(); err != nil {
		return nil, err
	}
	if f.NodeName == "" {
		return nil, fmt.Errorf("driver flags: --node-name is empty and $%s is not set", NodeNameEnv)
	}
	cfg, err := f.RESTConfig()
	if err != nil {
		return nil, err
	}
	opts := []driver.Option{driver.WithNodeName(f.NodeName), driver.WithRESTConfig(cfg)}
	for _, o := range []struct {
		value string
		opt   func(string) driver.Option
	}{
		{f.RegistrarDir, driver.WithRegistrarDir},
		{f.PluginDataDir, driver.WithPluginDataDir},
		{f.CDIDir, driver.WithCDIDir},
		{f.HTTPAddress, driver.WithHTTPAddress},
		{f.ProbeSocket, driver.WithProbeSocket},
		{f.PodUID, func(uid string) driver.Option { return driver.WithRollingUpdate(types.UID(uid)) }},
		{f.RollingUpdateOwner, driver.WithRollingUpdateOwner},
	} {
		if o.value != "" {
			opts = append(opts, o.opt(o.value))
		}
	}
	switch {
	case f.HealthTimeout < 0:
		return nil, fmt.Errorf("driver flags: --health-timeout is %v; it must be positive (or 0 for the default)", f.HealthTimeout)
	case f.HealthTimeout > 0:
		opts = append(opts, driver.WithHealthTimeout(f.HealthTimeout))
	}
	return opts, nil
}
