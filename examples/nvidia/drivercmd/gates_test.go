package drivercmd_test

import (
	"bytes"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"k8s.io/component-base/featuregate"

	"github.com/drakit/drakit/driver/driverflag"
	"github.com/drakit/drakit/examples/nvidia/drivercmd"
)

// check runs -check on the README's simulated DGX H200 (GPUs 0-1 full,
// 2 static MIG, 3-7 MIG mode without MIG devices) with args added.

// dynamic names GPUs 3-7 dynamic, as an administrator does; it needs
// the DynamicMIG gate (dynamicGates).
const dynamic = "-dynamic-mig-gpus=3,4,5,6,7"

// dynamicGates turns on the alpha gates of dynamic MIG.
const dynamicGates = "--feature-gates=DynamicMIG=true,DynamicMIGWholeGPU=true"

func check(t *testing.T, args ...string) (string, error) {
	t.Helper()
	dir := t.TempDir()
	var out bytes.Buffer
	err := drivercmd.Run(
		append([]string{"-check", "-node-name=node-1", "-state-dir=" + filepath.Join(dir, "state"),
			"-nvml-sim=dgx-h200", "-nvml-sim-state=" + filepath.Join(dir, "gpus.json"),
			"-nvml-sim-mig-gpus=2-7", "-nvml-sim-instances=2:4g.71gb@0,2:3g.71gb@4"}, args...),
		drivercmd.WithOutput(&out),
	)
	return out.String(), err
}

var gpuLine = regexp.MustCompile(`(?m)^# GPU (\d): .*: (full|static|dynamic)[^,]*, (\d+) devices`)

// modes is "GPU: mode devices" per GPU of a -check output.
func modes(out string) []string {
	var m []string
	for _, g := range gpuLine.FindAllStringSubmatch(out, -1) {
		m = append(m, g[1]+": "+g[2]+" "+g[3])
	}
	return m
}

// TestGates: each experimental part of the driver is behind a feature
// gate with a stage, and the gates say what has run: the dynamic MIG
// gates are alpha and off (no code path of theirs has run on a GPU), so
// by default no GPU is dynamic and -dynamic-mig-gpus is refused with the
// gate's name; DynamicMIG on makes the named GPUs dynamic, offered as MIG
// devices only until DynamicMIGWholeGPU is on too; no defragmenter
// without MIGDefragmenter.
func TestGates(t *testing.T) {
	for gate, spec := range drivercmd.FeatureGates() {
		if spec.Default || spec.PreRelease != featuregate.Alpha {
			t.Errorf("gate %s: %s, on %v; want alpha and off until the GPU check has passed on "+
				"a Hopper node", gate, spec.PreRelease, spec.Default)
		}
	}
	out, err := check(t)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(
		modes(out), ", ",
	), "0: full 1, 1: full 1, 2: static 2, 3: static 0, 4: static 0, 5: static 0, 6: static 0, "+
		"7: static 0"; got != want {
		t.Errorf("default gates: %s\nwant %s", got, want)
	}
	if strings.Contains(out, "-counters") {
		t.Error("default gates: a dynamic GPU's counter set is published")
	}
	if _, err := check(t, dynamic); err == nil || !strings.Contains(err.Error(), "DynamicMIG") {
		t.Errorf("%s with the default gates: %v, want an error naming the gate", dynamic, err)
	}

	out, err = check(t, "--feature-gates=DynamicMIG=true", dynamic)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(
		modes(out), ", ",
	), "0: full 1, 1: full 1, 2: static 2, 3: dynamic 14, 4: dynamic 14, 5: dynamic 14, 6: "+
		"dynamic 14, 7: dynamic 14"; got != want {
		t.Errorf("DynamicMIG=true: %s\nwant %s", got, want)
	}
	if strings.Contains(out, "name: gpu-7\n") {
		t.Error("DynamicMIG=true, DynamicMIGWholeGPU off: dynamic GPU 7 is offered whole")
	}

	out, err = check(t, "--feature-gates=DynamicMIG=true,DynamicMIGWholeGPU=true", dynamic)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(
		modes(out), ", ",
	), "0: full 1, 1: full 1, 2: static 2, 3: dynamic 15, 4: dynamic 15, 5: dynamic 15, 6: "+
		"dynamic 15, 7: dynamic 15"; got != want {
		t.Errorf("both gates on: %s\nwant %s", got, want)
	}
}

func TestDefragGate(t *testing.T) {
	t.Setenv("KUBECONFIG", "")
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	err := drivercmd.Run([]string{drivercmd.DefragCommand})
	if err == nil || !strings.Contains(err.Error(), "MIGDefragmenter") {
		t.Errorf(
			"defragmenter with its gate off (the default): %v, want a refusal naming the gate",
			err,
		)
	}
	// On, it goes on to reach the cluster (none here).
	err = drivercmd.Run([]string{drivercmd.DefragCommand, "--feature-gates=MIGDefragmenter=true"})
	if err == nil || strings.Contains(err.Error(), "MIGDefragmenter") ||
		!strings.Contains(err.Error(), driverflag.ErrNoConfig.Error()) {
		t.Errorf(
			"defragmenter with its gate on, no cluster: %v, want the client configuration error",
			err,
		)
	}
}

// TestMIGPublicationFlag: -mig-publication=layout publishes an idle
// dynamic GPU as its whole device alone, with no counters, in the node's
// one pool; another value is refused with the choices.
func TestMIGPublicationFlag(t *testing.T) {
	out, err := check(t, dynamicGates, dynamic, "-mig-publication=layout")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(
		modes(out), ", ",
	), "0: full 1, 1: full 1, 2: static 2, 3: dynamic 1, 4: dynamic 1, 5: dynamic 1, 6: dynamic "+
		"1, 7: dynamic 1"; got != want {
		t.Errorf("layout: %s\nwant %s", got, want)
	}
	if strings.Contains(out, "-counters") || strings.Contains(out, "consumesCounters") {
		t.Error("layout: counters are published")
	}
	if _, err := check(t, dynamicGates, dynamic, "-mig-publication=some"); err == nil ||
		!strings.Contains(err.Error(), `"layout"`) {
		t.Errorf("-mig-publication=some: %v, want an error naming the choices", err)
	}
}
