package main

import (
	"testing"

	"github.com/drakit/drakit/partition/lifecycle"
	"github.com/drakit/drakit/partition/lifecycle/lifecycletest"
)

// scratch is a claim's configuration that makes its partitions' SRAM a
// scratchpad.
const scratch = `{"apiVersion":"tiles.drakit.dev/v1","kind":"TileConfig","sram":"scratch"}`

// kit is the driver as the fault kit runs it: three cards, and a script
// with partitions of every size side by side, a setting at create, a
// card whole, and a card partitioned once its whole claim is gone.
func kit() lifecycletest.Config {
	return lifecycletest.Config{
		Driver: DriverName,
		Machine: func(dir string) (lifecycletest.Machine, error) {
			if _, err := writeMachine(dir, 3); err != nil {
				return lifecycletest.Machine{}, err
			}
			b, err := binding("node", dir)
			return lifecycletest.MachineOf(b), err
		},
		Open: func(n lifecycletest.Node) (lifecycletest.Driver, error) {
			b, err := binding(n.Name, n.Machine)
			if err != nil {
				return nil, err
			}
			return lifecycle.NewNode(b, n.State, n.Options...)
		},
		Script: []lifecycletest.Step{
			lifecycletest.PrepareWith("a", scratch, "npu-0-2t-0", "npu-1-4t-4"),
			lifecycletest.Prepare("b", "npu-0-1t-2"),
			lifecycletest.Prepare("e", "npu-1-1t-0"),
			lifecycletest.Prepare("w", "npu-2"),
			lifecycletest.Unprepare("a"),
			lifecycletest.PrepareWith("c", scratch, "npu-0-4t-4"),
			lifecycletest.Unprepare("w"),
			lifecycletest.Prepare("d", "npu-2-8t-0", "npu-1-2t-4"),
			lifecycletest.Unprepare("e"),
			lifecycletest.Unprepare("c"),
			lifecycletest.Unprepare("b"),
			lifecycletest.Unprepare("d"),
		},
	}
}

// TestFaults runs the driver through the kit's faults: a kill at every
// step, lost state, a second process, a rolling update, a lost card and
// concurrent calls (see lifecycletest.Run).
func TestFaults(t *testing.T) { lifecycletest.Run(t, kit()) }
