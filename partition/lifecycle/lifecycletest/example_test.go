package lifecycletest_test

import (
	"fmt"

	"github.com/drakit/drakit/partition/lifecycle"
	"github.com/drakit/drakit/partition/lifecycle/lifecycletest"
)

// binding is the vendor's lifecycle.Binding on the fake hardware in dir
// (see examples/tiles for a complete one).
func binding(node, dir string) (lifecycle.Binding, error) {
	return lifecycle.Binding{}, fmt.Errorf("node %s: no cards under %s in this example", node, dir)
}

// A vendor's fault tests: the kit's Config for a driver built on
// lifecycle.NewNode. The test file then has
//
//	func TestMain(m *testing.M) { lifecycletest.Child(kit); os.Exit(m.Run()) }
//	func TestFaults(t *testing.T) { lifecycletest.Run(t, kit) }
func Example() {
	kit := lifecycletest.Config{
		Driver: "tiles.example.com",
		Machine: func(dir string) (lifecycletest.Machine, error) {
			// Write the fake hardware of a node into dir here.
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
			lifecycletest.Prepare("a", "npu-0-2t-0"),
			lifecycletest.PrepareWith("b", `{"apiVersion":"tiles.example.com/v1","kind":"TileConfig"}`,
				"npu-1-4t-4"),
			lifecycletest.Prepare("w", "npu-2"),
			lifecycletest.Unprepare("a"),
			lifecycletest.Unprepare("b"),
			lifecycletest.Unprepare("w"),
		},
	}
	fmt.Println(len(kit.Script), "steps; the scenarios of lifecycletest.Run:")
	for _, s := range lifecycletest.Scenarios {
		fmt.Println(" ", s)
	}
	// Output:
	// 6 steps; the scenarios of lifecycletest.Run:
	//   script
	//   kill
	//   lost-state/journal-deleted
	//   lost-state/checkpoint-wiped
	//   lost-state/state-folder-deleted
	//   lost-state/state-and-checkpoint-deleted
	//   second-process
	//   rolling-update
	//   rolling-update/second-release
	//   lost-card
	//   concurrent
}
