package explain_test

import (
	"context"
	"fmt"
	"os"

	"github.com/drakit/drakit/explain"
)

// A what-if: would a claim for two H100s on one NUMA node fit a fleet
// saved as YAML? The fleet has one node per reason it can fail.
func Example() {
	fleet, err := explain.Load("testdata/fleet.yaml")
	if err != nil {
		fmt.Println(err)
		return
	}
	objects, err := explain.Load("testdata/train-claim.yaml")
	if err != nil {
		fmt.Println(err)
		return
	}
	rep, err := explain.Claim(context.Background(), fleet, objects.Claims[0])
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := rep.WriteText(os.Stdout, explain.WithMaxNodes(4), explain.WithDetails(3)); err != nil {
		fmt.Println(err)
	}
	// Output:
	// claim default/train: 1 of 8 nodes can allocate its claims
	// claims to allocate: default/train
	//
	// NODE    FITS  REQUEST     WHY
	// node-h  yes   train/gpus  would get node-h/gpu-0, node-h/gpu-1
	// node-b  no    train/gpus  allocated: both matching devices are allocated, to default/busy (pod default/busy-pod); 0 free, 2 needed
	// node-g  no    train/gpus  counter-exhausted: 2 matching devices are free, but the shared counters they consume are used up (counter sets gpu-0-counters, gpu-1-counters; held by default/mig-user (pod default/inference))
	// node-f  no    train       constraint: requests gpus (2) need devices with the same value of gpu.example.com/numa; free matching devices by value: 0: gpus 1; 1: gpus 1
	//               train/gpus  fits on its own
	// ... and 4 more nodes (device-taint: 1, no-class-device: 1, selector: 1, too-many: 1)
	//
	// node-b:
	//   train/gpus, allocated:
	//     claim default/busy (pod default/busy-pod) holds node-b/gpu-0, node-b/gpu-1
	//
	// node-g:
	//   train/gpus, counter-exhausted:
	//     counter set node-g/gpu-0-counters:
	//         memory-slices: 4 of 8 left, needs 8
	//         claim default/mig-user (pod default/inference) holds node-g/gpu-0-half-0
	//     counter set node-g/gpu-1-counters:
	//         memory-slices: 4 of 8 left, needs 8
	//         claim default/mig-user (pod default/inference) holds node-g/gpu-1-half-0
}
