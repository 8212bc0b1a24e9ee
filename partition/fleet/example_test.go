package fleet_test

import (
	"fmt"

	"k8s.io/client-go/kubernetes/fake"

	"github.com/drakit/drakit/mig"
	"github.com/drakit/drakit/partition"
	"github.com/drakit/drakit/partition/fleet"
	"github.com/drakit/drakit/partition/ledger"
)

// A vendor's planner Deployment: the ledgers' store, which DeviceClass is
// which partition profile, the cards' schemes, and a Lease so that one
// replica plans at a time. Run (not called here) then plans on every
// change until its context ends.
func ExampleNew() {
	client := fake.NewClientset() // a real client in a Deployment
	store, err := ledger.NewStore(client, "gpu-driver", "gpu.example.com")
	if err != nil {
		fmt.Println(err)
		return
	}
	_, err = fleet.New(client, store, "gpu.example.com")
	fmt.Println(err)

	h100, _ := mig.Lookup("H100-80GB")
	p, err := fleet.New(client, store, "gpu.example.com",
		fleet.WithClassProfile(func(class string) (string, bool) {
			switch class {
			case "gpu.example.com":
				return partition.WholeCard, true
			case "mig-1g.example.com":
				return "1g.10gb", true
			}
			return "", false // not the layout's: not planned for
		}),
		fleet.WithSchemes(func(string) (*partition.Scheme, error) { return h100.Scheme(), nil }),
		fleet.WithLeaderElection("gpu-driver", "gpu-planner"),
	)
	fmt.Println(p != nil, err)
	// Output:
	// new fleet planner: WithClassProfile and WithSchemes are needed
	// true <nil>
}
