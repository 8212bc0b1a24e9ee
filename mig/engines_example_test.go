package mig_test

import (
	"fmt"

	"github.com/drakit/drakit/mig"
)

// A MIG device's engines, as a driver publishes them: the profile's
// Engines as capacities, e.g. for a video claim that selects on decoders.
func ExampleEngines_Capacities() {
	h100, err := mig.Lookup("NVIDIA H100 80GB HBM3")
	if err != nil {
		fmt.Println(err)
		return
	}
	pr, err := h100.Profile("3g.40gb")
	if err != nil {
		fmt.Println(err)
		return
	}
	caps := pr.Engines.Capacities()
	for _, name := range []string{mig.CapMultiprocessors, mig.CapCopyEngines, mig.CapDecoders, mig.CapEncoders, mig.CapJpegEngines, mig.CapOfaEngines} {
		q := caps[name]
		fmt.Printf("%s: %s\n", name, q.String())
	}
	// Output:
	// multiprocessors: 60
	// copyEngines: 3
	// decoders: 3
	// encoders: 0
	// jpegEngines: 3
	// ofaEngines: 0
}
