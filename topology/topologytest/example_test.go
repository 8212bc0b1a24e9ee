package topologytest_test

import (
	"fmt"
	"os"

	"github.com/drakit/drakit/topology"
	"github.com/drakit/drakit/topology/topologytest"
)

func Example() {
	dir, _ := os.MkdirTemp("", "sysfs")
	defer os.RemoveAll(dir)
	s, _ := topologytest.New(dir)
	_ = s.AddPCIDevice(topologytest.PCIDevice{
		BusID: "0000:3b:00.0", Root: "pci0000:3a",
		Bridges: []string{"0000:3a:00.0"}, NUMANode: 1,
	})
	dev, err := topology.ReadPCIDevice("00000000:3B:00.0", topology.WithSysfsRoot(s.Root))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(dev.BusID, dev.PCIeRoot, dev.NUMANode)
	// Output: 0000:3b:00.0 pci0000:3a 1
}
