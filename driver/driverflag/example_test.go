package driverflag_test

import (
	"flag"
	"fmt"

	"github.com/drakit/drakit/driver/driverflag"
)

// A driver's main registers the standard flags next to its own, parses
// them and hands the resulting options to driver.New.
func ExampleRegister() {
	fs := flag.NewFlagSet("my-driver", flag.ContinueOnError)
	std := driverflag.Register(fs)
	devices := fs.Int("devices", 4, "the driver's own flag")
	_ = fs.Parse([]string{"--node-name", "worker-1", "--cdi-dir", "/run/cdi", "--devices", "8"})
	fmt.Println(std.NodeName, std.CDIDir, *devices)
	// Then: opts, err := std.Options(); driver.New(name, append(opts, ...)...)
	// Output: worker-1 /run/cdi 8
}
