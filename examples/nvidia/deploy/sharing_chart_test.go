package deploy_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/drakit/drakit/examples/nvidia/deploy"
)

// TestChartSharing: sharing.gpus gives the driver the shared GPUs and
// the shares' request policies the operator sets; on real GPUs the pod
// then runs on the host's IPC namespace (the MPS daemons' clients share
// /dev/shm with them), not with the simulator, and without shared GPUs
// neither flags nor hostIPC appear.
func TestChartSharing(t *testing.T) {
	args := func(set ...string) ([]string, bool) {
		cmd := []string{"template", deploy.Release, "chart", "--namespace", deploy.Namespace}
		for _, s := range set {
			cmd = append(cmd, "--set", s)
		}
		r := render(t, cmd...)
		if len(r.ds) != 1 {
			t.Fatalf("%d DaemonSets", len(r.ds))
		}
		spec := r.ds[0].Spec.Template.Spec
		for _, c := range spec.Containers {
			if c.Name == "driver" || len(spec.Containers) == 1 {
				return c.Args, spec.HostIPC
			}
		}
		t.Fatal("no driver container")
		return nil, false
	}
	got, ipc := args("sharing.gpus=0\\,1", "sharing.memory.step=2Gi", "sharing.memory.default=8Gi",
		"sharing.compute.default=25")
	for _, want := range []string{"--shared-gpus=0,1", "--share-memory-step=2Gi",
		"--share-memory-default=8Gi", "--share-compute-step=1", "--share-compute-default=25"} {
		if !slices.Contains(got, want) {
			t.Errorf("driver args %v lack %s", got, want)
		}
	}
	if !ipc {
		t.Error("shared real GPUs without hostIPC")
	}
	if _, ipc := args("sharing.gpus=all", "nvml.sim=dgx-h200"); ipc {
		t.Error("hostIPC with the simulator")
	}
	got, ipc = args()
	if ipc || slices.ContainsFunc(got, func(a string) bool {
		return strings.Contains(a,
			"share")
	}) {
		t.Errorf("without shared GPUs: hostIPC %v, args %v", ipc, got)
	}
}
