package driver

import (
	"os"
	"path/filepath"
	"testing"

	kit "github.com/drakit/drakit/driver"
	"github.com/drakit/drakit/examples/nvidia/nvml/nvmlsim"
	"github.com/drakit/drakit/partition/lifecycle"
	"github.com/drakit/drakit/partition/lifecycle/lifecycletest"
)

// TestMain lets the partition lifecycle's fault kit run this package's
// test binary as its driver processes.
func TestMain(m *testing.M) {
	lifecycletest.Child(migKit())
	os.Exit(m.Run())
}

// kitDynamicGPUs are the GPUs of the kit's node (an H200 server) that
// the driver makes MIG devices on at prepare.
var kitDynamicGPUs = []string{"4", "5", "6"}

// migKit is the dynamic-MIG driver as the fault kit runs it: GPUs 4, 5
// and 6 of a simulated H200 server dynamic, and a script with MIG devices
// of every size side by side, a GPU whole (MIG mode off) and then
// partitioned again.
func migKit() lifecycletest.Config {
	return lifecycletest.Config{
		Driver: DriverName,
		Machine: func(dir string) (lifecycletest.Machine, error) {
			sim, err := nvmlsim.Open(
				filepath.Join(dir, "gpus.json"),
				nvmlsim.WithServer("dgx-h200"),
				nvmlsim.WithSetup(nvmlsim.Setup{MIGGPUs: []int{4, 5, 6}}),
			)
			if err != nil {
				return lifecycletest.Machine{}, err
			}
			// A view of the GPUs: a driver with no dynamic GPU touches
			// none, and its tool lists and its names read them.
			view, err := New(sim, "view", WithStateDir(filepath.Join(dir, "view")))
			if err != nil {
				return lifecycletest.Machine{}, err
			}
			m := lifecycletest.Machine{Tool: view.tool,
				Key: func(name string) (lifecycle.Key, bool) {
					return view.keyOf(kit.AllocatedDevice{Device: name}, nil)
				}}
			for _, g := range kitDynamicGPUs {
				k, _ := m.Key("gpu-" + g)
				m.Cards = append(m.Cards, k.Card)
			}
			return m, nil
		},
		Open: func(n lifecycletest.Node) (lifecycletest.Driver, error) {
			sim, err := nvmlsim.Open(filepath.Join(n.Machine, "gpus.json"))
			if err != nil {
				return nil, err
			}
			opts := []Option{WithStateDir(n.State), WithDynamicGPUs(kitDynamicGPUs...)}
			if n.Owner != "" {
				opts = append(opts, WithRollingUpdate(n.Owner))
			}
			return New(sim, n.Name, opts...)
		},
		Script: []lifecycletest.Step{
			lifecycletest.Prepare("a", "gpu-4-1g-18gb-0", "gpu-5-2g-35gb-0"),
			lifecycletest.Prepare("b", "gpu-4-3g-71gb-4"),
			lifecycletest.Prepare("e", "gpu-5-1g-18gb-6"),
			lifecycletest.Prepare("w", "gpu-6"),
			lifecycletest.Unprepare("a"),
			lifecycletest.Prepare("c", "gpu-4-2g-35gb-0"),
			lifecycletest.Unprepare("w"),
			lifecycletest.Prepare("d", "gpu-6-7g-141gb-0", "gpu-5-3g-71gb-0"),
			lifecycletest.Unprepare("e"),
			lifecycletest.Unprepare("c"),
			lifecycletest.Unprepare("b"),
			lifecycletest.Unprepare("d"),
		},
	}
}

// TestMIGFaults runs the dynamic-MIG driver through the fault kit: a
// kill at every step, lost state, a second process, a rolling update, a
// lost GPU and concurrent calls (see lifecycletest.Run).
func TestMIGFaults(t *testing.T) { lifecycletest.Run(t, migKit()) }
