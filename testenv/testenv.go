package testenv

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/drakit/drakit/conformance"
	"github.com/drakit/drakit/driver"
	"github.com/drakit/drakit/internal/cluster"
)

// DefaultNodeName is the node's name unless [WithNodeName] gives another.
const DefaultNodeName = "drakit-node"

// Env is a running test cluster and the node a driver under test serves.
// Its fields are valid until the test ends.
type Env struct {
	// Kubeconfig is the path of a cluster-admin kubeconfig.
	Kubeconfig string
	// RESTConfig is the cluster-admin REST config.
	RESTConfig *rest.Config
	// Client is a cluster-admin clientset.
	Client kubernetes.Interface
	// NodeName is the node a driver serves: the real node, or the fake
	// node Start created.
	NodeName string
	// RealNode says whether NodeName has a kubelet ([WithRealNode]).
	RealNode bool
	// RegistrarDir is where the driver puts its registration socket: the
	// kubelet's plugin registry on a real node, an empty folder otherwise
	// (where conformance.Test looks for it).
	RegistrarDir string
	// PluginsDir holds the drivers' own folders ([Env.PluginDataDir]).
	PluginsDir string
	// CDIDir is the folder the container runtime reads CDI specs from
	// (on a fake node, an empty folder).
	CDIDir string
	// BusyboxImage and PauseImage are images loaded on a real node, for
	// pods with imagePullPolicy Never (busybox has sh, env, cat, sleep).
	BusyboxImage, PauseImage string
	// Dir holds the cluster's state; the components' logs are in
	// Dir/logs/<component>.log.
	Dir string

	c *cluster.Cluster
}

// Option configures [Start].
type Option func(*options) error

type options struct {
	realNode  bool
	nodeName  string
	fakeNodes []string
	cluster   []cluster.Option
}

// WithRealNode makes the node a real one: kubelet, containerd 2.4 and runc
// on this host, running pods with hostNetwork (there is no CNI). It needs
// root. Up to two real nodes run on a host at a time ($DRAKIT_NODE_SLOTS
// sets how many): Start waits while other tests' real nodes take them.
func WithRealNode() Option {
	return func(o *options) error { o.realNode = true; return nil }
}

// WithNodeName names the node the driver serves (default
// [DefaultNodeName]).
func WithNodeName(name string) Option {
	return func(o *options) error {
		if name == "" {
			return fmt.Errorf("WithNodeName: empty name")
		}
		o.nodeName = name
		return nil
	}
}

// WithFakeNodes adds more Nodes without a kubelet (Ready, schedulable,
// 16 CPUs, 64Gi memory), e.g. for a driver that publishes
// network-attached devices or for scheduling tests across nodes.
func WithFakeNodes(names ...string) Option {
	return func(o *options) error {
		for _, n := range names {
			if n == "" {
				return fmt.Errorf("WithFakeNodes: empty name")
			}
		}
		o.fakeNodes = append(o.fakeNodes, names...)
		return nil
	}
}

// WithFeatureGates turns feature gates on or off in every component that
// knows them. Later calls add to earlier ones.
func WithFeatureGates(gates map[string]bool) Option {
	return func(o *options) error {
		o.cluster = append(o.cluster, cluster.WithFeatureGates(gates))
		return nil
	}
}

// WithGangScheduling serves the Workload and PodGroup APIs and turns on
// gang and topology-aware workload scheduling.
func WithGangScheduling() Option {
	return func(o *options) error {
		o.cluster = append(o.cluster, cluster.WithGangScheduling())
		return nil
	}
}

// Start starts a cluster for t and stops it when t ends. It fails t when
// the cluster does not start (a missing component says which command
// installs it), and skips t under go test -short.
func Start(t testing.TB, opts ...Option) *Env {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a Kubernetes cluster; skipped with -short")
	}
	o := options{nodeName: DefaultNodeName}
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			t.Fatalf("testenv: %v", err)
		}
	}
	copts := append([]cluster.Option{cluster.WithDieWithParent()}, o.cluster...)
	if o.realNode {
		copts = append(copts, cluster.WithNode(), cluster.WithNodeName(o.nodeName))
	}
	c, err := cluster.Start(context.Background(), copts...)
	if err != nil {
		t.Fatalf("testenv: start cluster: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Stop(); err != nil {
			t.Errorf("testenv: stop cluster: %v", err)
		}
	})
	e := &Env{
		Kubeconfig: c.Kubeconfig, RESTConfig: c.RESTConfig, Client: c.Client,
		NodeName: o.nodeName, RealNode: o.realNode, Dir: c.Dir, c: c,
		RegistrarDir: c.PluginRegistryDir, PluginsDir: c.PluginsDir, CDIDir: c.CDIDir,
		BusyboxImage: c.Images.Busybox, PauseImage: c.Images.Pause,
	}
	fakes := o.fakeNodes
	if !o.realNode {
		fakes = append([]string{o.nodeName}, fakes...)
		// Under the cluster's folder (short paths: unix sockets go here),
		// removed with it.
		dir := filepath.Join(c.Dir, "fake-node")
		e.RegistrarDir, e.PluginsDir, e.CDIDir = filepath.Join(dir, "registry"), filepath.Join(dir, "plugins"), filepath.Join(dir, "cdi")
		for _, d := range []string{e.RegistrarDir, e.PluginsDir, e.CDIDir} {
			if err := os.MkdirAll(d, 0o750); err != nil {
				t.Fatalf("testenv: %v", err)
			}
		}
	}
	for _, n := range fakes {
		if err := e.AddFakeNode(context.Background(), n, nil); err != nil {
			t.Fatalf("testenv: %v", err)
		}
	}
	return e
}

// AddFakeNode creates a Node with no kubelet: Ready, schedulable, with the
// given labels (added to kubernetes.io/hostname and kubernetes.io/os) and
// 16 CPUs, 64Gi memory, 110 pods. The scheduler binds pods to it and
// allocates claims against slices for it; nothing runs the pods.
func (e *Env) AddFakeNode(ctx context.Context, name string, labels map[string]string) error {
	return e.c.AddFakeNode(ctx, name, labels, nil)
}

// PluginDataDir is the folder of driverName's sockets and checkpoint
// under [Env.PluginsDir], where the kubelet (or conformance.Test) expects
// them.
func (e *Env) PluginDataDir(driverName string) string {
	return filepath.Join(e.PluginsDir, driverName)
}

// DriverOptions are the options that make a driver built in the test's
// process serve this environment's node: client, node name, folders.
func (e *Env) DriverOptions(driverName string) []driver.Option {
	return []driver.Option{
		driver.WithRESTConfig(e.RESTConfig), driver.WithNodeName(e.NodeName),
		driver.WithRegistrarDir(e.RegistrarDir), driver.WithPluginDataDir(e.PluginDataDir(driverName)),
		driver.WithCDIDir(e.CDIDir),
	}
}

// DriverArgs are the command-line flags that make a driver built with
// package driverflag serve this environment's node when started as a
// process: --kubeconfig, --node-name, the folders, and an HTTP server on
// a free port.
func (e *Env) DriverArgs(driverName string) []string {
	return []string{
		"--kubeconfig", e.Kubeconfig, "--node-name", e.NodeName,
		"--registrar-dir", e.RegistrarDir, "--plugin-data-dir", e.PluginDataDir(driverName),
		"--cdi-dir", e.CDIDir, "--http-address", "127.0.0.1:0",
	}
}

// ConformanceConfig is the conformance suite's configuration for
// driverName on this environment's node. Set StartCommand (for the
// restart checks) and anything else before passing it to
// conformance.Test. Its PublishTimeout is 20 s: a driver on this local
// cluster publishes within a second or two, and the suite waits that
// long after a restart for a driver that publishes the same slices
// again (and so writes none).
func (e *Env) ConformanceConfig(driverName string) conformance.Config {
	return conformance.Config{
		DriverName: driverName, NodeName: e.NodeName, Client: e.Client,
		RegistrationPath: e.RegistrarDir, CDIDirs: []string{e.CDIDir},
		PublishTimeout: 20 * time.Second,
	}
}

// ContainerLog returns what a container of a pod on the real node printed,
// trimmed. It asks the API server and, when that cannot reach the kubelet,
// reads the node's log file.
func (e *Env) ContainerLog(ctx context.Context, namespace, pod, container string) (string, error) {
	logs, apiErr := e.Client.CoreV1().Pods(namespace).GetLogs(pod, &corev1.PodLogOptions{Container: container}).DoRaw(ctx)
	if apiErr == nil {
		return strings.TrimSpace(string(logs)), nil
	}
	files, _ := filepath.Glob(filepath.Join(e.Dir, "pod-logs", namespace+"_"+pod+"_*", container, "*.log"))
	var out []string
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return "", fmt.Errorf("read container log: %w", err)
		}
		// CRI log lines: "<time> <stream> <tag> <text>".
		for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
			if parts := strings.SplitN(line, " ", 4); len(parts) == 4 {
				out = append(out, parts[3])
			}
		}
	}
	if len(files) == 0 {
		return "", fmt.Errorf("read container log of %s/%s/%s: %w", namespace, pod, container, apiErr)
	}
	return strings.TrimSpace(strings.Join(out, "\n")), nil
}

// ImportImage loads a container image tarball (an OCI image layout or a
// docker-archive) into the real node's containerd, where the kubelet finds
// it: pods run it with imagePullPolicy Never or IfNotPresent under the
// name the tarball gives it. It fails without [WithRealNode].
func (e *Env) ImportImage(ctx context.Context, tarball string) error {
	return e.c.ImportImage(ctx, tarball)
}

// Helm returns the path of the helm binary (Helm v4) that
// `drakit setup` builds into the cache next to the cluster's components,
// for tests that install a driver's chart onto the cluster with
// helm --kubeconfig [Env.Kubeconfig]. The error says how to install it.
func Helm() (string, error) {
	p := cluster.HelmBinary()
	if st, err := os.Stat(p); err != nil || st.Mode()&0o111 == 0 {
		return "", &cluster.ErrMissing{What: []string{p + " (Helm " + cluster.HelmVersion + ")"}, Hint: "install it with: " + cluster.SetupCommand}
	}
	return p, nil
}
