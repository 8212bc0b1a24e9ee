package cluster

import (
	"fmt"
	"io"
	"sort"
	"strings"
)

// Option configures Start.
type Option func(*options) error

type options struct {
	node          bool
	dir           string
	keepDir       bool
	binDir        string
	imageDir      string
	featureGates  map[string]bool
	runtimeConfig []string
	disabledCtrls []string
	log           io.Writer
	nodeName      string
	dieWithParent bool
	schedQPS      float32
	schedBurst    int
}

// WithDieWithParent makes every process of the cluster get SIGKILL when
// the calling process dies (used by tests, so that a crashed test binary
// leaves nothing running). drakit cluster up does not use it.
func WithDieWithParent() Option {
	return func(o *options) error { o.dieWithParent = true; return nil }
}

// WithNode adds a real node: a kubelet with containerd and runc, CDI specs
// read from Cluster.CDIDir, hostNetwork pods only (there is no CNI), and the
// busybox and pause images loaded. Up to [DefaultNodeSlots] real nodes
// ($DRAKIT_NODE_SLOTS) run on a host at a time: Start waits for a free
// node slot.
func WithNode() Option {
	return func(o *options) error { o.node = true; return nil }
}

// WithNodeName sets the real node's name (default: "drakit-node").
func WithNodeName(name string) Option {
	return func(o *options) error {
		if name == "" {
			return fmt.Errorf("node name must not be empty")
		}
		o.nodeName = name
		return nil
	}
}

// WithDir puts the cluster's state in dir instead of a new temporary
// folder. Whatever an earlier cluster left there (running or crashed) is
// stopped and removed first: each Start is a fresh cluster. The folder is
// kept after Stop (a temporary one is removed).
func WithDir(dir string) Option {
	return func(o *options) error { o.dir = dir; o.keepDir = true; return nil }
}

// WithBinDir overrides where the component binaries are (default BinDir()).
func WithBinDir(dir string) Option {
	return func(o *options) error { o.binDir = dir; return nil }
}

// WithFeatureGates turns feature gates on or off in every component that
// knows them (kube-apiserver, kube-scheduler, kube-controller-manager,
// kubelet). Later calls add to earlier ones.
func WithFeatureGates(gates map[string]bool) Option {
	return func(o *options) error {
		if o.featureGates == nil {
			o.featureGates = map[string]bool{}
		}
		for k, v := range gates {
			o.featureGates[k] = v
		}
		return nil
	}
}

// WithRuntimeConfig adds kube-apiserver --runtime-config entries such as
// "scheduling.k8s.io/v1beta1=true".
func WithRuntimeConfig(entries ...string) Option {
	return func(o *options) error {
		o.runtimeConfig = append(o.runtimeConfig, entries...)
		return nil
	}
}

// WithGangScheduling serves the Workload and PodGroup APIs
// (scheduling.k8s.io v1beta1 and v1alpha3) and turns on the gang and
// topology-aware workload scheduling gates, as verified for 1.37.
func WithGangScheduling() Option {
	return func(o *options) error {
		_ = WithFeatureGates(map[string]bool{"GenericWorkload": true, "TopologyAwareWorkloadScheduling": true})(o)
		return WithRuntimeConfig("scheduling.k8s.io/v1beta1=true", "scheduling.k8s.io/v1alpha3=true")(o)
	}
}

// WithSchedulerClient sets kube-scheduler's client rate limits (its
// KubeSchedulerConfiguration's clientConnection.qps and burst; the
// scheduler's own defaults are 50 and 100, which cap DRA pods near 25/s
// since each costs two writes). Upstream's scheduler_perf runs at QPS
// 5,000. qps and burst must be positive.
func WithSchedulerClient(qps float32, burst int) Option {
	return func(o *options) error {
		if qps <= 0 || burst <= 0 {
			return fmt.Errorf("scheduler client: qps %v and burst %d must be positive", qps, burst)
		}
		o.schedQPS, o.schedBurst = qps, burst
		return nil
	}
}

// WithLogWriter sends progress lines ("etcd ready", ...) to w.
func WithLogWriter(w io.Writer) Option {
	return func(o *options) error { o.log = w; return nil }
}

func (o *options) gatesFlag() string {
	if len(o.featureGates) == 0 {
		return ""
	}
	keys := make([]string, 0, len(o.featureGates))
	for k := range o.featureGates {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s=%t", k, o.featureGates[k])
	}
	return strings.Join(parts, ",")
}
