package driver_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2/ktesting"

	"github.com/drakit/drakit/device"
	"github.com/drakit/drakit/driver/internal/fakehw"
	"github.com/drakit/drakit/internal/cluster"
)

// One control-plane cluster is shared by all tests of the package; it is
// started by the first test that needs it and stopped by TestMain.
var (
	clusterOnce sync.Once
	shared      *cluster.Cluster
	sharedErr   error
)

const testNode = "node-a"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(childMain())
	}
	code := m.Run()
	if shared != nil {
		if err := shared.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "stop cluster: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

func sharedCluster(t *testing.T) *cluster.Cluster {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a real cluster; skipped with -short")
	}
	clusterOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		shared, sharedErr = cluster.Start(ctx, cluster.WithDieWithParent())
		if sharedErr == nil {
			sharedErr = shared.AddFakeNode(ctx, testNode, nil, nil)
		}
	})
	if sharedErr != nil {
		t.Fatalf("start local cluster: %v", sharedErr)
	}
	return shared
}

// testInventory is n devices dev-0..dev-<n-1> in the node's pool.
// setupE2E returns what an end-to-end test needs: the shared cluster, a
// context that ends with the test (or after 3 minutes), a new namespace,
// new folders and fake hardware in them.
func setupE2E(t *testing.T) (*cluster.Cluster, context.Context, string, dirs, *fakehw.HW) {
	t.Helper()
	c := sharedCluster(t)
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	t.Cleanup(cancel)
	d := newDirs(t)
	return c, ctx, newNamespace(ctx, t, c), d, newHW(t, d)
}

func testInventory(n int) *device.Inventory {
	inv := &device.Inventory{Driver: testDriver, Pools: []device.Pool{{Name: testNode}}}
	for i := range n {
		inv.Pools[0].Devices = append(inv.Pools[0].Devices, device.New(fmt.Sprintf("dev-%d", i)).StringAttribute("model", "fake"))
	}
	return inv
}

// eventDiscoverer is a fixed inventory plus events the test sends.
type eventDiscoverer struct {
	inv    *device.Inventory
	events chan device.Event
}

func (d *eventDiscoverer) Inventory(context.Context) (*device.Inventory, error) {
	return d.inv.Clone(), nil
}

func (d *eventDiscoverer) Watch(ctx context.Context, out chan<- device.Event) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev := <-d.events:
			select {
			case out <- ev:
			case <-ctx.Done():
				return nil
			}
		}
	}
}

// dirs are the folders one driver instance uses; a restarted instance
// gets the same.
type dirs struct {
	Root, Registrar, PluginData, CDI, HW string
}

func newDirs(t *testing.T) dirs {
	// Unix socket paths are limited to 108 bytes: keep the root short.
	root, err := os.MkdirTemp("", "drk")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(root) })
	return dirs{Root: root, Registrar: filepath.Join(root, "reg"), PluginData: filepath.Join(root, "p"), CDI: filepath.Join(root, "cdi"), HW: filepath.Join(root, "hw")}
}

func (d dirs) draSocket() string { return filepath.Join(d.PluginData, "dra.sock") }

func (d dirs) specCount(t *testing.T) int {
	entries, err := os.ReadDir(d.CDI)
	if os.IsNotExist(err) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return len(entries)
}

func waitFor(ctx context.Context, t *testing.T, what string, cond func(ctx context.Context) (bool, error)) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 60*time.Second, true, cond); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

func newNamespace(ctx context.Context, t *testing.T, c *cluster.Cluster) string {
	t.Helper()
	name := fmt.Sprintf("t-%d", time.Now().UnixNano())
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name,
		// Test claims may ask for admin access.
		Labels: map[string]string{"resource.kubernetes.io/admin-access": "true"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return name
}
