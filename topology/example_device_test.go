package topology_test

import (
	"fmt"
	"os"

	"github.com/drakit/drakit/device"
	"github.com/drakit/drakit/topology"
	"github.com/drakit/drakit/topology/topologytest"
)

// A driver reads a card's PCI topology from sysfs and puts the standard
// attributes on the card's device in one call.
func ExamplePCIDevice_SetAttributes() {
	dir, _ := os.MkdirTemp("", "sysfs") // a fake sysfs; a driver reads /sys
	defer os.RemoveAll(dir)
	sysfs, _ := topologytest.New(dir)
	_ = sysfs.AddPCIDevice(topologytest.PCIDevice{BusID: "0000:3b:00.0", Root: "pci0000:3a", NUMANode: 1})

	pci, err := topology.ReadPCIDevice("0000:3b:00.0", topology.WithSysfsRoot(sysfs.Root))
	if err != nil {
		fmt.Println(err)
		return
	}
	card := pci.SetAttributes(device.New("card-0").StringAttribute("model", "fpga-x"))
	inv := &device.Inventory{Driver: "fpga.example.com", Pools: []device.Pool{{Name: "node-1", Devices: []*device.Device{card}}}}
	res, _ := inv.DriverResources()
	attrs := res.Pools["node-1"].Slices[0].Devices[0].Attributes
	fmt.Println(*attrs[topology.PCIeRootAttribute].StringValue, *attrs[topology.NUMANodeAttribute].IntValue)
	// Output: pci0000:3a 1
}
