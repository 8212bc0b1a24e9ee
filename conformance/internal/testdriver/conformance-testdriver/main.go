// Command conformance-testdriver runs the conformance suite's test driver:
// a DRA driver built directly on kubeletplugin, correct unless started with
// -defect NAME. See package testdriver.
package main

import (
	"fmt"
	"os"

	"github.com/drakit/drakit/conformance/internal/testdriver"
)

func main() {
	if err := testdriver.Main(os.Args[1:]); err != nil {
		fmt.Fprintf(os.Stderr, "conformance-testdriver: %v\n", err)
		os.Exit(1)
	}
}
