package defrag_test

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/drakit/drakit/internal/cluster"
	"github.com/drakit/drakit/mig/defrag"
	pdefrag "github.com/drakit/drakit/partition/defrag"
)

// shared is the one control plane (API server, scheduler, controller
// manager; no real node) that the tests of this package share, started
// by the first test that asks for it and stopped by TestMain.
var shared struct {
	once sync.Once
	c    *cluster.Cluster
	err  error
	n    int
}

func TestMain(m *testing.M) {
	code := m.Run()
	if shared.c != nil {
		if err := shared.c.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stop the shared cluster:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// env is one test's part of the shared cluster: a fake node, a
// namespace, a DRA driver (its slices and DeviceClasses) and a controller
// Domain of its own, so that no test sees another's devices, pods,
// Events (the eviction budget and the backoff are read from them) or
// DeviceTaintRules. The PriorityClasses are shared.
type env struct {
	Client     kubernetes.Interface
	RESTConfig *rest.Config
	NodeName   string
	Namespace  string
	Driver     string
	Domain     string
}

// sharedEnv gives t its part of the shared cluster.
func sharedEnv(t *testing.T) *env {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a Kubernetes cluster; skipped with -short")
	}
	shared.once.Do(func() {
		shared.c, shared.err = cluster.Start(context.Background(), cluster.WithDieWithParent())
	})
	if shared.err != nil {
		t.Fatalf("start the shared cluster: %v", shared.err)
	}
	shared.n++
	id := fmt.Sprintf("t%d", shared.n)
	e := &env{Client: shared.c.Client, RESTConfig: shared.c.RESTConfig, NodeName: "node-" + id,
		Namespace: "ns-" + id, Driver: id + ".mig.example.com", Domain: id + ".mig.drakit.dev"}
	ctx := context.Background()
	if err := shared.c.AddFakeNode(ctx, e.NodeName, nil, nil); err != nil {
		t.Fatal(err)
	}
	nsObj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: e.Namespace}}
	_, err := e.Client.CoreV1().Namespaces().Create(ctx, nsObj, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// New is mig/defrag's controller for the test's driver with its Domain.
func (e *env) New(opts ...pdefrag.Option) (*pdefrag.Controller, error) {
	return e.NewFor(e.Client, opts...)
}

// NewFor is New reaching the API server through client.
func (e *env) NewFor(
	client kubernetes.Interface,
	opts ...pdefrag.Option,
) (*pdefrag.Controller, error) {
	v := defrag.Vendor()
	v.Domain = e.Domain
	return pdefrag.New(client, e.Driver, v, opts...)
}
