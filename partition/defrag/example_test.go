package defrag_test

import (
	"fmt"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/drakit/drakit/partition"
	"github.com/drakit/drakit/partition/defrag"
)

// A vendor's controller: its domain names the opt-in annotation
// ("tiles.example.com/defrag": "allow") and the taint key, its catalog
// turns a device's model attribute into a scheme. Options are checked
// when the controller is made.
func ExampleNew() {
	catalog := map[string]*partition.Scheme{} // the vendor's card models by name
	vendor := defrag.Vendor{
		Domain: "tiles.example.com",
		Scheme: func(model string) (*partition.Scheme, error) {
			if s, ok := catalog[model]; ok {
				return s, nil
			}
			return nil, fmt.Errorf("unknown card model %q", model)
		},
		Card: "tile card",
	}
	client := kubernetes.NewForConfigOrDie(&rest.Config{Host: "https://127.0.0.1:6443"})
	_, err := defrag.New(client, "tiles.example.com", vendor, defrag.WithMaxMoves(9))
	fmt.Println(err)
	vendor.Domain = ""
	_, err = defrag.New(client, "tiles.example.com", vendor)
	fmt.Println(err != nil)
	// Output:
	// new defrag controller: max moves 9: must be between 1 and 8
	// true
}
