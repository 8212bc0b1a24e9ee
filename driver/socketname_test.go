package driver_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	k8stypes "k8s.io/apimachinery/pkg/types"

	"github.com/drakit/drakit/device"
	"github.com/drakit/drakit/driver"
)

// TestRollingUpdateSocketFits: with a rolling update the DRA socket is
// named per pod, and a pod UID (36 bytes) in a plugin folder that is
// long, as a kubelet's --root-dir may be, must still give a path a unix
// socket can bind (108 bytes with its NUL on Linux): the instance serves,
// and the two instances' sockets differ.
func TestRollingUpdateSocketFits(t *testing.T) {
	ctx := testCtx(t)
	root, err := os.MkdirTemp("", "drk")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(root) })
	long := filepath.Join(root, strings.Repeat("k", 40), "plugins", testDriver)
	d := dirs{Root: root, Registrar: filepath.Join(root, "reg"), PluginData: long, CDI: filepath.Join(root, "cdi"), HW: filepath.Join(root, "hw")}
	disc := device.StaticDiscoverer{Inv: testInventory(1)}
	hw := newHW(t, d)
	var sockets []string
	for _, uid := range []string{"5ecb463f-d6d3-425d-83e8-66fb057fb4af", "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"} {
		r := startWith(ctx, t, deadAPI(t), d, disc, hw, driver.WithRollingUpdate(k8stypes.UID(uid)))
		s := r.d.DRASocket()
		if len(s) > 107 {
			t.Errorf("socket %s: %d bytes, more than a unix socket takes", s, len(s))
		}
		sockets = append(sockets, s)
	}
	if sockets[0] == sockets[1] {
		t.Errorf("both instances use %s", sockets[0])
	}
}
