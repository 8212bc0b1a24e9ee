package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
)

// TestTwoNodesAtOnce starts two real nodes at the same time and runs a pod
// on each: they take different slots and cgroup roots. Stopping one, and
// cleaning its slot as after a crash, leaves the other node and its pod
// running; the host state is shared until the last node stops.
func TestTwoNodesAtOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two real nodes")
	}
	if nodeSlots() < 2 {
		t.Skipf("DRAKIT_NODE_SLOTS=%d: one node at a time", nodeSlots())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	var cs [2]*Cluster
	var errs [2]error
	var wg sync.WaitGroup
	for i := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cs[i], errs[i] = Start(ctx, WithNode(), WithDieWithParent(),
				WithNodeName(fmt.Sprintf("node-%d", i)))
		}()
	}
	wg.Wait()
	for i, c := range cs {
		if c != nil {
			t.Cleanup(func() { _ = c.Stop() })
		}
		if errs[i] != nil {
			t.Fatalf("start node %d: %v", i, errs[i])
		}
	}
	a, b := cs[0], cs[1]
	if a.c.NodeSlot == b.c.NodeSlot {
		t.Fatalf("both nodes run in slot %d", a.c.NodeSlot)
	}
	for _, c := range cs {
		runSleeper(ctx, t, c)
	}
	for _, c := range cs {
		if n := countCgroupProcs(slotCgroupDirs(c.c.NodeSlot)); n == 0 {
			t.Errorf("no process in the cgroup root of slot %d (node %s)", c.c.NodeSlot, c.NodeName)
		}
	}
	// Other processes' nodes may run beside these two (the host has
	// DRAKIT_NODE_SLOTS slots): the host state names at least both.
	if h, err := readHostFile(); err != nil || h == nil ||
		!slices.Contains(h.Users, a.c.NodeSlot) || !slices.Contains(h.Users, b.c.NodeSlot) {
		t.Errorf("host state while two nodes run: %+v, %v; want users %d and %d",
			h, err, a.c.NodeSlot, b.c.NodeSlot)
	}

	aProcs := countCgroupProcs(slotCgroupDirs(a.c.NodeSlot))
	slotB, dirB := b.c.NodeSlot, b.Dir
	if err := b.Stop(); err != nil {
		t.Fatalf("stop node %s: %v", b.NodeName, err)
	}
	// What a node that takes B's slot next does first.
	lock, err := lockSlot(ctx, slotB)
	if err != nil {
		t.Fatal(err)
	}
	(&state{log: testLog{t}}).cleanStaleNode(BinDir(), slotB, slotOwner{Dir: dirB})
	lock.Close()

	for _, p := range a.c.Procs {
		if !p.alive() {
			t.Errorf("%s of node %s (pid %d) died when the other node stopped",
				p.Name, a.NodeName, p.PID)
		}
	}
	if n := countCgroupProcs(slotCgroupDirs(a.c.NodeSlot)); n != aProcs {
		t.Errorf("node %s's pods have %d processes after the other node stopped, had %d",
			a.NodeName, n, aProcs)
	}
	pod, err := a.Client.CoreV1().Pods("default").Get(ctx, "sleeper", metav1.GetOptions{})
	if err != nil || pod.Status.Phase != corev1.PodRunning {
		t.Errorf("pod of node %s after the other node stopped: %v, %v",
			a.NodeName, podPhase(pod), err)
	}
	h, err := readHostFile()
	if err != nil || h == nil || !slices.Contains(h.Users, a.c.NodeSlot) ||
		slices.Contains(h.Users, slotB) {
		t.Errorf("host state with one node left: %+v, %v; want user %d, not %d",
			h, err, a.c.NodeSlot, slotB)
	}
	if err := a.Stop(); err != nil {
		t.Fatalf("stop node %s: %v", a.NodeName, err)
	}
	if len(slotCgroupDirs(a.c.NodeSlot)) != 0 {
		t.Errorf("cgroups of slot %d left after stop: %v",
			a.c.NodeSlot, slotCgroupDirs(a.c.NodeSlot))
	}
}

// runSleeper runs a hostNetwork busybox pod on c's node and waits until it
// runs.
func runSleeper(ctx context.Context, t *testing.T, c *Cluster) {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "sleeper", Namespace: "default"},
		Spec: corev1.PodSpec{
			HostNetwork:                   true,
			RestartPolicy:                 corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: ptr.To[int64](0),
			Containers: []corev1.Container{{
				Name: "c", Image: c.Images.Busybox, ImagePullPolicy: corev1.PullNever,
				Command: []string{"sleep", "3600"},
			}},
		},
	}
	_, err := c.Client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var last *corev1.Pod
	err = wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		p, err := c.Client.CoreV1().Pods("default").Get(ctx, "sleeper", metav1.GetOptions{})
		last = p
		return err == nil && p.Status.Phase == corev1.PodRunning, nil
	})
	if err != nil {
		t.Fatalf("pod on node %s not running: %v (%s)", c.NodeName, err, podPhase(last))
	}
}

func podPhase(p *corev1.Pod) string {
	if p == nil {
		return "no pod"
	}
	return fmt.Sprintf("phase %s, %+v", p.Status.Phase, p.Status.ContainerStatuses)
}

// countCgroupProcs counts the processes in the cgroups at or below roots.
func countCgroupProcs(roots []string) int {
	seen := map[string]bool{}
	for _, root := range roots {
		_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
				return nil
			}
			data, _ := os.ReadFile(p)
			for _, f := range strings.Fields(string(data)) {
				seen[f] = true
			}
			return nil
		})
	}
	return len(seen)
}

type testLog struct{ t *testing.T }

func (w testLog) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
