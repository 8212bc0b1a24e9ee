package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/drakit/drakit/explain"
	"github.com/drakit/drakit/internal/cluster/clustertest"
)

// TestExplainWhatIf runs "drakit explain --snapshot FLEET -f OBJECTS": the
// table by default, JSON with -o json, exit 1 (errNothingFits) when no
// node fits, usage errors for bad arguments.
func TestExplainWhatIf(t *testing.T) {
	fleet := filepath.Join("..", "..", "explain", "testdata", "fleet.yaml")
	td := func(f string) string { return filepath.Join("..", "..", "explain", "testdata", f) }
	run := func(args ...string) (string, error) {
		var out, errOut bytes.Buffer
		err := runExplain(context.Background(), args, &out, &errOut)
		return out.String(), err
	}

	out, err := run("--snapshot", fleet, "-f", td("train-claim.yaml"))
	if err != nil {
		t.Fatalf("fitting claim: %v", err)
	}
	for _, want := range []string{"claim default/train: 1 of 8 nodes can allocate its claims", "node-h  yes", "counter-exhausted:"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}

	out, err = run("--snapshot", fleet, "--node", "node-b", "--node", "node-c", "-f", td("train-claim.yaml"))
	if !errors.Is(err, errNothingFits) || !strings.Contains(out, "no node can allocate its claims (2 nodes)") || strings.Contains(out, "node-h") {
		t.Errorf("--node node-b --node node-c: err %v, want errNothingFits and only those nodes:\n%s", err, out)
	}

	out, err = run("--snapshot", fleet, "-o", "json", "-f", td("train-claim.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var rep explain.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil || rep.NodesFit != 1 {
		t.Errorf("JSON: err %v, nodesFit %d, want a report with one fitting node:\n%s", err, rep.NodesFit, out)
	}

	// Without node-h nothing fits: the report is written, the exit is 1.
	small := filepath.Join(t.TempDir(), "fleet.yaml")
	data, err := os.ReadFile(fleet)
	if err != nil {
		t.Fatal(err)
	}
	cut := strings.Index(string(data), "# node-h")
	if err := os.WriteFile(small, data[:cut], 0o644); err != nil {
		t.Fatal(err)
	}
	out, err = run("--snapshot", small, "-f", td("train-claim.yaml"))
	if !errors.Is(err, errNothingFits) || !strings.Contains(out, "no node can allocate its claims (7 nodes)") {
		t.Errorf("nothing fits: err %v, want errNothingFits; output:\n%s", err, out)
	}

	for _, args := range [][]string{
		{"--snapshot", fleet},
		{"--snapshot", fleet, "pod", "x"},
		{"-o", "yaml", "-f", td("train-claim.yaml")},
		{"pod"},
	} {
		if _, err := run(args...); !errors.Is(err, errUsage) {
			t.Errorf("%v: err %v, want errUsage", args, err)
		}
	}
}

// TestExplainOnCluster runs "drakit explain pod NAME" against a live
// cluster where the scheduler leaves a pod pending, then saves the
// cluster with "drakit explain snapshot" and explains the same claim as a
// what-if against the saved file: both name the same reason.
func TestExplainOnCluster(t *testing.T) {
	c := clustertest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := addFakeNode(ctx, c, "gpu-node", nil, nil); err != nil {
		t.Fatal(err)
	}
	const driver = "gpu.cli.drakit.dev"
	slice := &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: "gpu-node"}, Spec: resourceapi.ResourceSliceSpec{
		Driver: driver, NodeName: ptr.To("gpu-node"), Pool: resourceapi.ResourcePool{Name: "gpu-node", Generation: 1, ResourceSliceCount: 1},
		Devices: []resourceapi.Device{{Name: "gpu-0"}},
	}}
	class := &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: driver}, Spec: resourceapi.DeviceClassSpec{
		Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: fmt.Sprintf("device.driver == %q", driver)}}}}}
	claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "two", Namespace: "default"}, Spec: resourceapi.ResourceClaimSpec{
		Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{Name: "gpus", Exactly: &resourceapi.ExactDeviceRequest{
			DeviceClassName: driver, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 2}}}}}}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "two", Namespace: "default"}, Spec: corev1.PodSpec{
		Containers:     []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10", Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "gpus"}}}}},
		ResourceClaims: []corev1.PodResourceClaim{{Name: "gpus", ResourceClaimName: ptr.To("two")}},
	}}
	if _, err := c.Client.ResourceV1().ResourceSlices().Create(ctx, slice, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Client.ResourceV1().DeviceClasses().Create(ctx, class, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Client.ResourceV1().ResourceClaims("default").Create(ctx, claim, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		p, err := c.Client.CoreV1().Pods("default").Get(ctx, "two", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.PodScheduled && cond.Reason == corev1.PodReasonUnschedulable {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("the scheduler never reported the pod unschedulable: %v", err)
	}
	run := func(args ...string) (string, error) {
		var out, errOut bytes.Buffer
		err := runExplain(ctx, args, &out, &errOut)
		return out.String(), err
	}
	const reason = "too-many: asks for 2 devices; the node has only 1"
	out, err := run("--kubeconfig", c.Kubeconfig, "pod", "two")
	if !errors.Is(err, errNothingFits) || !strings.Contains(out, reason) {
		t.Fatalf("live: err %v, want errNothingFits and %q in:\n%s", err, reason, out)
	}
	saved, err := run("--kubeconfig", c.Kubeconfig, "snapshot")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	fleet, objects := filepath.Join(dir, "fleet.yaml"), filepath.Join(dir, "claim.yaml")
	claimYAML := "apiVersion: resource.k8s.io/v1\nkind: ResourceClaim\nmetadata: {name: what-if}\nspec:\n  devices:\n    requests:\n    - name: gpus\n      exactly: {deviceClassName: " + driver + ", count: 2}\n"
	if err := os.WriteFile(fleet, []byte(saved), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(objects, []byte(claimYAML), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err = run("--snapshot", fleet, "-f", objects)
	if !errors.Is(err, errNothingFits) || !strings.Contains(out, reason) {
		t.Errorf("what-if on the saved snapshot: err %v, want errNothingFits and %q in:\n%s", err, reason, out)
	}
}

// TestExplainREADME: the explanation docs/explain.md shows is what the
// command prints.
func TestExplainREADME(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "docs", "explain.md"))
	if err != nil {
		t.Fatal(err)
	}
	const cmdLine = "$ go run ./cmd/drakit explain --snapshot explain/testdata/fleet.yaml -f explain/testdata/train-claim.yaml\n"
	_, block, ok := strings.Cut(string(data), cmdLine)
	if !ok {
		t.Fatalf("docs/explain.md has no line %q", cmdLine)
	}
	block, _, _ = strings.Cut(block, "```")
	var out, errOut bytes.Buffer
	root := filepath.Join("..", "..")
	if err := runExplain(context.Background(), []string{"--snapshot", filepath.Join(root, "explain/testdata/fleet.yaml"), "-f", filepath.Join(root, "explain/testdata/train-claim.yaml")}, &out, &errOut); err != nil {
		t.Fatal(err)
	}
	if out.String() != block {
		t.Errorf("docs/explain.md's explanation differs from the command's output; the command prints:\n%s", out.String())
	}
}
