package main

import (
	"testing"

	"github.com/drakit/drakit/partition/lifecycle"
	"github.com/drakit/drakit/partition/lifecycle/lifecycletest"
)

// kit is the driver as the fault kit runs it: three cards in SPX/NPS1,
// and a script that changes every card's modes: card 0 from SPX to
// CPX/NPS4, card 1 from QPX/NPS1 to DPX/NPS1 once its partitions are
// gone, card 2 whole and then partitioned.
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
			lifecycletest.Prepare("a", "gpu-0-cpx-nps4-3", "gpu-1-qpx-nps1-1"),
			lifecycletest.Prepare("b", "gpu-0-cpx-nps4-5"),
			lifecycletest.Prepare("e", "gpu-1-qpx-nps1-3"),
			lifecycletest.Prepare("w", "gpu-2"),
			lifecycletest.Unprepare("a"),
			lifecycletest.Unprepare("e"),
			lifecycletest.Prepare("c", "gpu-1-dpx-nps1-0"),
			lifecycletest.Unprepare("w"),
			lifecycletest.Prepare("d", "gpu-0-cpx-nps4-3", "gpu-2-cpx-nps1-0"),
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
