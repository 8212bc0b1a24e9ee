package cluster

import (
	"context"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// hostSnapshot is what a kubelet changes on the host.
func hostSnapshot(t *testing.T) map[string]string {
	t.Helper()
	snap := map[string]string{}
	for _, k := range []string{"kernel/panic", "kernel/panic_on_oops", "vm/overcommit_memory"} {
		v, err := os.ReadFile("/proc/sys/" + k)
		if err != nil {
			t.Fatal(err)
		}
		snap["sysctl "+k] = strings.TrimSpace(string(v))
	}
	for _, table := range []string{"filter", "nat", "mangle"} {
		out, err := exec.Command("iptables", "-w", "-t", table, "-S").Output()
		if err != nil {
			t.Fatalf("iptables -t %s -S: %v", table, err)
		}
		snap["iptables "+table] = string(out)
	}
	for _, d := range []string{"/var/lib/kubelet", "/var/log/pods"} {
		_, err := os.Stat(d)
		snap["exists "+d] = strconv.FormatBool(err == nil)
	}
	return snap
}

// TestNodeUndoesHostChanges starts and stops a real node and checks that
// the host is as before: sysctls, iptables chains, host folders, and no
// process left running.
func TestNodeUndoesHostChanges(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real node")
	}
	// Test packages run in parallel: without every node slot, another
	// package's node may start (or still be stopping) while the host is
	// compared. (The package's first test: hack/test.sh starts the package
	// first, when the slots are free.)
	HoldNodeLock(t)
	before := hostSnapshot(t)
	c, err := Start(context.Background(), WithNode(), WithDieWithParent())
	if err != nil {
		t.Fatal(err)
	}
	st, err := ReadStatus(c.Dir)
	if err != nil {
		t.Fatal(err)
	}
	during := hostSnapshot(t)
	if err := c.Stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if diff := cmp.Diff(before, hostSnapshot(t)); diff != "" {
		t.Errorf("host changed by the node (-before +after):\n%s", diff)
	}
	if cmp.Equal(before, during) {
		t.Log("note: the kubelet changed nothing visible on this host")
	}
	for _, comp := range st.Components {
		if _, err := os.Stat("/proc/" + itoa(comp.PID)); err == nil {
			if cmdline, _ := os.ReadFile("/proc/" + itoa(comp.PID) + "/cmdline"); strings.Contains(string(cmdline), c.Dir) {
				t.Errorf("%s (pid %d) still running after Stop", comp.Name, comp.PID)
			}
		}
	}
	if _, err := os.Stat(c.Dir); !os.IsNotExist(err) {
		t.Errorf("cluster folder %s not removed: %v", c.Dir, err)
	}
}
