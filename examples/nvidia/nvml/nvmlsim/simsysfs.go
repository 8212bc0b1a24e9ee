package nvmlsim

import (
	"fmt"
	"strconv"

	"github.com/drakit/drakit/topology/topologytest"
)

// WriteSysfs writes a fake sysfs tree for the server's eight GPUs into dir
// (created if missing), for topology.ReadPCIDevice with
// topology.WithSysfsRoot: each GPU behind one PCIe switch on a root
// complex of its own (root bus = GPU bus - 6, the switch at root bus + 1,
// the shape of a DGX's PCIe tree), GPUs 0-3 on NUMA node 0 and 4-7 on
// node 1, as on DGX A100, H100, H200 and B200. The numbers are
// illustrative, not a copy of a particular machine's.
func (s Server) WriteSysfs(dir string) error {
	fs, err := topologytest.New(dir)
	if err != nil {
		return fmt.Errorf("write simulated sysfs: %w", err)
	}
	for i, id := range s.PCIBusIDs {
		bus, err := strconv.ParseUint(id[5:7], 16, 8)
		if err != nil || bus < 6 {
			return fmt.Errorf(
				"write simulated sysfs: bus ID %s has no room for a root and a switch",
				id,
			)
		}
		d := topologytest.PCIDevice{
			BusID:    id,
			Root:     fmt.Sprintf("pci%s:%02x", id[:4], bus-6),
			Bridges:  []string{fmt.Sprintf("%s:%02x:00.0", id[:4], bus-5)},
			NUMANode: i / 4,
		}
		if err := fs.AddPCIDevice(d); err != nil {
			return fmt.Errorf("write simulated sysfs: %w", err)
		}
	}
	return nil
}
