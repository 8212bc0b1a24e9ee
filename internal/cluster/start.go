package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/client-go/util/retry"

	"github.com/drakit/drakit/statefile"
)

// state is what Stop needs, also from another process (drakit cluster
// down): it is saved as Dir/state.json after every change.
type state struct {
	Dir     string     `json:"dir"`
	KeepDir bool       `json:"keepDir"`
	Procs   []*proc    `json:"procs"`
	Ports   Ports      `json:"ports"`
	Host    *hostState `json:"host,omitempty"`
	Node    string     `json:"node,omitempty"`
	// NodeSlot is the node's slot (see slots.go) while Host is set.
	NodeSlot int `json:"nodeSlot,omitempty"`

	dir           string
	log           io.Writer
	dieWithParent bool
	pki           *pki
	nodeLock      *os.File // the node's slot, held from node start until its changes are undone
	mu            sync.Mutex
}

// Ports are the TCP ports of the cluster's components on 127.0.0.1.
type Ports struct {
	EtcdClient, EtcdPeer, APIServer, Scheduler, ControllerManager int
	Kubelet, KubeletHealthz                                       int `json:",omitempty"`
}

func (s *state) logf(format string, args ...any) {
	if s.log != nil {
		fmt.Fprintf(s.log, "[cluster %s] %s\n", time.Now().Format("15:04:05.000"), fmt.Sprintf(format, args...))
	}
}

func (s *state) save() error {
	data, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return fmt.Errorf("encode cluster state: %w", err)
	}
	if err := statefile.WriteFile(filepath.Join(s.dir, "state.json"), data); err != nil {
		return fmt.Errorf("save cluster state: %w", err)
	}
	return nil
}

// Start brings up a cluster and returns when the API server answers, the
// default ServiceAccount exists and (WithNode) the node is Ready. On error
// everything already started is stopped.
func Start(ctx context.Context, opts ...Option) (_ *Cluster, err error) {
	o := options{nodeName: "drakit-node", log: io.Discard}
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return nil, fmt.Errorf("cluster option: %w", err)
		}
	}
	if o.binDir == "" {
		o.binDir = BinDir()
	}
	if o.imageDir == "" {
		o.imageDir = ImageDir()
	}
	if err := checkPrereqs(o.binDir, o.imageDir, o.node); err != nil {
		return nil, err
	}
	t0 := time.Now()
	s := &state{log: o.log, KeepDir: o.keepDir, dieWithParent: o.dieWithParent}
	if o.dir == "" {
		d, err := os.MkdirTemp("", "drakit-cluster-")
		if err != nil {
			return nil, fmt.Errorf("create cluster folder: %w", err)
		}
		o.dir = d
	} else {
		// A folder left by a crashed cluster: stop what it recorded first.
		if err := stopDir(o.dir, o.log); err != nil {
			return nil, fmt.Errorf("clean stale cluster in %s: %w", o.dir, err)
		}
		// Every start is a fresh cluster: no etcd data, sockets or kubelet
		// state of an earlier one.
		if err := os.RemoveAll(o.dir); err != nil {
			return nil, fmt.Errorf("clean stale cluster in %s: %w", o.dir, err)
		}
		if err := os.MkdirAll(o.dir, 0o755); err != nil {
			return nil, fmt.Errorf("create cluster folder: %w", err)
		}
	}
	abs, err := filepath.Abs(o.dir)
	if err != nil {
		return nil, fmt.Errorf("cluster folder: %w", err)
	}
	s.dir, s.Dir = abs, abs
	c := &Cluster{Dir: abs, c: s}
	defer func() {
		if err != nil {
			if serr := c.Stop(); serr != nil {
				s.logf("stop after failed start: %v", serr)
			}
		}
	}()
	if err := s.save(); err != nil {
		return nil, err
	}
	ports, err := freePorts(7)
	if err != nil {
		return nil, err
	}
	s.Ports = Ports{EtcdClient: ports[0], EtcdPeer: ports[1], APIServer: ports[2], Scheduler: ports[3], ControllerManager: ports[4]}
	if o.node {
		s.Ports.Kubelet, s.Ports.KubeletHealthz = ports[5], ports[6]
	}
	if err := s.startControlPlane(ctx, c, &o); err != nil {
		return nil, err
	}
	s.logf("control plane ready in %s", time.Since(t0).Round(time.Millisecond))
	if o.node {
		t1 := time.Now()
		if err := s.startNode(ctx, c, &o); err != nil {
			return nil, err
		}
		s.logf("node %s ready in %s", c.NodeName, time.Since(t1).Round(time.Millisecond))
	}
	return c, nil
}

func (s *state) startControlPlane(ctx context.Context, c *Cluster, o *options) error {
	p, err := newPKI(filepath.Join(s.dir, "pki"))
	if err != nil {
		return err
	}
	s.pki = p
	loop := []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("10.0.0.1")}
	for _, cert := range []struct {
		name, cn string
		orgs     []string
		server   bool
	}{
		{"apiserver", "kube-apiserver", nil, true},
		{"admin", "drakit-admin", []string{"system:masters"}, false},
		{"scheduler", "system:kube-scheduler", nil, false},
		{"controller-manager", "system:kube-controller-manager", nil, false},
		{"kubelet-client", "kube-apiserver-kubelet-client", []string{"system:masters"}, false},
	} {
		if err := p.issue(cert.name, cert.cn, cert.orgs, cert.server, loop,
			[]string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"}); err != nil {
			return err
		}
	}
	if err := p.serviceAccountKeys(); err != nil {
		return err
	}

	bin := func(name string) string { return filepath.Join(o.binDir, name) }
	etcdURL := fmt.Sprintf("http://127.0.0.1:%d", s.Ports.EtcdClient)
	etcd, err := s.startProc("etcd", bin("etcd"), []string{
		"--name=drakit", "--data-dir=" + filepath.Join(s.dir, "etcd"),
		"--listen-client-urls=" + etcdURL, "--advertise-client-urls=" + etcdURL,
		fmt.Sprintf("--listen-peer-urls=http://127.0.0.1:%d", s.Ports.EtcdPeer),
		fmt.Sprintf("--initial-advertise-peer-urls=http://127.0.0.1:%d", s.Ports.EtcdPeer),
		fmt.Sprintf("--initial-cluster=drakit=http://127.0.0.1:%d", s.Ports.EtcdPeer),
		"--listen-metrics-urls=", "--unsafe-no-fsync", "--log-level=warn",
		"--quota-backend-bytes=4294967296",
	}, nil)
	if err != nil {
		return err
	}
	if err := s.waitFor(ctx, "etcd", etcd, 30*time.Second, httpOK(etcdURL+"/health")); err != nil {
		return err
	}

	gates := o.gatesFlag()
	apiArgs := []string{
		"--etcd-servers=" + etcdURL,
		"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", "--secure-port=" + itoa(s.Ports.APIServer),
		"--endpoint-reconciler-type=none",
		"--authorization-mode=Node,RBAC",
		"--client-ca-file=" + p.path("ca.crt"),
		"--tls-cert-file=" + p.path("apiserver.crt"), "--tls-private-key-file=" + p.path("apiserver.key"),
		"--kubelet-client-certificate=" + p.path("kubelet-client.crt"), "--kubelet-client-key=" + p.path("kubelet-client.key"),
		"--kubelet-preferred-address-types=InternalIP,Hostname",
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file=" + p.path("sa.pub"), "--service-account-signing-key-file=" + p.path("sa.key"),
		"--service-cluster-ip-range=10.0.0.0/24",
		"--allow-privileged=true", "--profiling=false",
		"--max-requests-inflight=800", "--max-mutating-requests-inflight=400",
	}
	if gates != "" {
		apiArgs = append(apiArgs, "--feature-gates="+gates)
	}
	if len(o.runtimeConfig) > 0 {
		apiArgs = append(apiArgs, "--runtime-config="+strings.Join(o.runtimeConfig, ","))
	}
	api, err := s.startProc("kube-apiserver", bin("kube-apiserver"), apiArgs, nil)
	if err != nil {
		return err
	}

	server := fmt.Sprintf("https://127.0.0.1:%d", s.Ports.APIServer)
	for _, kc := range []struct{ file, cert string }{
		{"admin.kubeconfig", "admin"}, {"scheduler.kubeconfig", "scheduler"}, {"controller-manager.kubeconfig", "controller-manager"},
	} {
		if err := writeKubeconfig(filepath.Join(s.dir, kc.file), server, p, kc.cert); err != nil {
			return err
		}
	}
	c.Kubeconfig = filepath.Join(s.dir, "admin.kubeconfig")
	cfg, err := clientcmd.BuildConfigFromFlags("", c.Kubeconfig)
	if err != nil {
		return fmt.Errorf("load admin kubeconfig: %w", err)
	}
	cfg.QPS, cfg.Burst = 500, 1000
	c.RESTConfig = cfg
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("create client: %w", err)
	}
	c.Client = cs
	if err := s.waitFor(ctx, "kube-apiserver", api, 90*time.Second, func(ctx context.Context) error {
		body, err := cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		if err != nil {
			return fmt.Errorf("readyz: %v %s", err, body)
		}
		return nil
	}); err != nil {
		return err
	}

	schedArgs := []string{
		"--kubeconfig=" + filepath.Join(s.dir, "scheduler.kubeconfig"),
		"--authentication-kubeconfig=" + filepath.Join(s.dir, "scheduler.kubeconfig"),
		"--authorization-kubeconfig=" + filepath.Join(s.dir, "scheduler.kubeconfig"),
		"--bind-address=127.0.0.1", "--secure-port=" + itoa(s.Ports.Scheduler), "--leader-elect=false",
	}
	cmArgs := []string{
		"--kubeconfig=" + filepath.Join(s.dir, "controller-manager.kubeconfig"),
		"--authentication-kubeconfig=" + filepath.Join(s.dir, "controller-manager.kubeconfig"),
		"--authorization-kubeconfig=" + filepath.Join(s.dir, "controller-manager.kubeconfig"),
		"--bind-address=127.0.0.1", "--secure-port=" + itoa(s.Ports.ControllerManager), "--leader-elect=false",
		"--service-account-private-key-file=" + p.path("sa.key"), "--root-ca-file=" + p.path("ca.crt"),
		"--use-service-account-credentials=true",
		// No nodeipam (no pod CIDRs without a CNI) and no node lifecycle:
		// fake nodes have no kubelet and would be marked unreachable.
		"--controllers=*,-nodeipam,-node-lifecycle-controller",
		"--kube-api-qps=200", "--kube-api-burst=400",
	}
	if gates != "" {
		schedArgs = append(schedArgs, "--feature-gates="+gates)
		cmArgs = append(cmArgs, "--feature-gates="+gates)
	}
	if o.schedQPS > 0 {
		// Client limits are only in the configuration file; with --config
		// the scheduler takes its kubeconfig and leader election from it.
		path := filepath.Join(s.dir, "scheduler-config.yaml")
		conf := fmt.Sprintf("apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"+
			"clientConnection:\n  kubeconfig: %q\n  qps: %g\n  burst: %d\nleaderElection:\n  leaderElect: false\n",
			filepath.Join(s.dir, "scheduler.kubeconfig"), o.schedQPS, o.schedBurst)
		if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
			return fmt.Errorf("write scheduler configuration: %w", err)
		}
		schedArgs = append(schedArgs, "--config="+path)
	}
	sched, err := s.startProc("kube-scheduler", bin("kube-scheduler"), schedArgs, nil)
	if err != nil {
		return err
	}
	cm, err := s.startProc("kube-controller-manager", bin("kube-controller-manager"), cmArgs, nil)
	if err != nil {
		return err
	}
	if err := s.waitFor(ctx, "kube-scheduler", sched, 60*time.Second,
		httpsOK(fmt.Sprintf("https://127.0.0.1:%d/readyz", s.Ports.Scheduler))); err != nil {
		return err
	}
	return s.waitFor(ctx, "default ServiceAccount", cm, 60*time.Second, func(ctx context.Context) error {
		_, err := cs.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
		return err
	})
}

func writeKubeconfig(path, server string, p *pki, cert string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["drakit"] = &clientcmdapi.Cluster{Server: server, CertificateAuthority: p.path("ca.crt")}
	cfg.AuthInfos[cert] = &clientcmdapi.AuthInfo{ClientCertificate: p.path(cert + ".crt"), ClientKey: p.path(cert + ".key")}
	cfg.Contexts["drakit"] = &clientcmdapi.Context{Cluster: "drakit", AuthInfo: cert}
	cfg.CurrentContext = "drakit"
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return fmt.Errorf("write kubeconfig %s: %w", path, err)
	}
	return nil
}

func httpOK(url string) func(context.Context) error {
	return func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s: %s", url, resp.Status)
		}
		return nil
	}
}

// httpsOK checks an endpoint served with a self-signed certificate (the
// scheduler's); only reachability and status are checked.
func httpsOK(url string) func(context.Context) error {
	client := insecureClient()
	return func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s: %s", url, resp.Status)
		}
		return nil
	}
}

// AddFakeNode creates a Node with no kubelet: Ready, schedulable, with the
// given labels and allocatable resources (default: 16 CPUs, 64Gi memory,
// 110 pods). The scheduler binds pods to it and allocates claims against
// ResourceSlices whose nodeName is name; nothing runs the pods.
func (c *Cluster) AddFakeNode(ctx context.Context, name string, labels map[string]string, allocatable corev1.ResourceList) error {
	if allocatable == nil {
		allocatable = defaultAllocatable()
	}
	l := map[string]string{"kubernetes.io/hostname": name, "kubernetes.io/os": "linux"}
	for k, v := range labels {
		l[k] = v
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: l}}
	_, err := c.Client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create fake node %s: %w", name, err)
	}
	// Other writers (admission, the kubelet-less node controllers) may
	// touch the new Node: retry the status write on conflict.
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := c.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		now := metav1.Now()
		n.Status = corev1.NodeStatus{
			Capacity:    allocatable,
			Allocatable: allocatable,
			Phase:       corev1.NodeRunning,
			Conditions: []corev1.NodeCondition{{
				Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "FakeNode",
				Message: "drakit fake node (no kubelet)", LastHeartbeatTime: now, LastTransitionTime: now,
			}},
			Addresses: []corev1.NodeAddress{{Type: corev1.NodeHostName, Address: name}},
		}
		_, err = c.Client.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("set status of fake node %s: %w", name, err)
	}
	// The TaintNodesByCondition admission plugin gave the new node the
	// not-ready taint; with no node lifecycle controller nothing else
	// removes it.
	return untaintNotReady(ctx, c, name)
}

func defaultAllocatable() corev1.ResourceList {
	return corev1.ResourceList{
		corev1.ResourceCPU:    mustQuantity("16"),
		corev1.ResourceMemory: mustQuantity("64Gi"),
		corev1.ResourcePods:   mustQuantity("110"),
	}
}
