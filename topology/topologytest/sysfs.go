package topologytest

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// Sysfs is a fake /sys rooted at Root. Use Root with topology.WithSysfsRoot.
type Sysfs struct {
	// Root is the folder that stands for /sys.
	Root string
}

// PCIDevice describes one fake PCI function.
type PCIDevice struct {
	// BusID is the function's address in extended BDF notation, lower
	// case, e.g. "0000:3b:00.0".
	BusID string
	// Root is the root complex, "pci<domain>:<bus>", e.g. "pci0000:3a". Its
	// domain must be the device's domain.
	Root string
	// Bridges are the BDFs of the PCI bridges between the root complex and
	// the device, outermost first (often empty or one or two switches).
	Bridges []string
	// NUMANode is written to numa_node; -1 means no NUMA affinity.
	NUMANode int
}

var (
	bdfRE  = regexp.MustCompile(`^([0-9a-f]{4}):([0-9a-f]{2}):[0-9a-f]{2}\.[0-7]$`)
	rootRE = regexp.MustCompile(`^pci([0-9a-f]{4}):([0-9a-f]{2})$`)
)

// New returns a fake sysfs in dir (created if missing).
func New(dir string) (*Sysfs, error) {
	if err := os.MkdirAll(filepath.Join(dir, "bus", "pci", "devices"), 0o755); err != nil {
		return nil, fmt.Errorf("create fake sysfs: %w", err)
	}
	return &Sysfs{Root: dir}, nil
}

// AddPCIDevice adds d the way the kernel shows it: a folder
// devices/<root>/<bridges...>/<busID> with numa_node, and the symlink
// bus/pci/devices/<busID> pointing to it with a relative path. It enforces
// the kernel's shape: valid addresses, the device's domain equal to the
// root's, bus numbers that do not go below the root's, no duplicates.
func (s *Sysfs) AddPCIDevice(d PCIDevice) error {
	m := bdfRE.FindStringSubmatch(d.BusID)
	if m == nil {
		return fmt.Errorf("add fake PCI device: bus ID %q is not <domain>:<bus>:<dev>.<fn> in lower-case hex", d.BusID)
	}
	r := rootRE.FindStringSubmatch(d.Root)
	if r == nil {
		return fmt.Errorf("add fake PCI device %s: root %q is not pci<domain>:<bus>", d.BusID, d.Root)
	}
	if r[1] != m[1] {
		return fmt.Errorf("add fake PCI device %s: domain %s differs from root %s", d.BusID, m[1], d.Root)
	}
	rootBus, _ := strconv.ParseUint(r[2], 16, 8)
	parts := []string{"devices", d.Root}
	for _, b := range append(append([]string{}, d.Bridges...), d.BusID) {
		bm := bdfRE.FindStringSubmatch(b)
		if bm == nil {
			return fmt.Errorf("add fake PCI device %s: bridge %q is not a bus ID", d.BusID, b)
		}
		if bm[1] != r[1] {
			return fmt.Errorf("add fake PCI device %s: bridge %s is in another domain than %s", d.BusID, b, d.Root)
		}
		if bus, _ := strconv.ParseUint(bm[2], 16, 8); bus < rootBus {
			return fmt.Errorf("add fake PCI device %s: %s has a bus number below root %s", d.BusID, b, d.Root)
		}
		parts = append(parts, b)
	}
	if d.NUMANode < -1 {
		return fmt.Errorf("add fake PCI device %s: NUMA node %d below -1", d.BusID, d.NUMANode)
	}
	rel := filepath.Join(parts...)
	link := filepath.Join(s.Root, "bus", "pci", "devices", d.BusID)
	if _, err := os.Lstat(link); err == nil {
		return fmt.Errorf("add fake PCI device %s: already present", d.BusID)
	}
	dir := filepath.Join(s.Root, rel)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("add fake PCI device %s: %w", d.BusID, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "numa_node"), []byte(strconv.Itoa(d.NUMANode)+"\n"), 0o644); err != nil {
		return fmt.Errorf("add fake PCI device %s: %w", d.BusID, err)
	}
	if err := os.Symlink(filepath.Join("..", "..", "..", rel), link); err != nil {
		return fmt.Errorf("add fake PCI device %s: %w", d.BusID, err)
	}
	return nil
}

// AddNUMANode adds devices/system/node/node<id> with its cpulist and SLIT
// distance row, and for each CPU in cpus (a list like "0-3,8") its
// topology/physical_package_id = socket. distances must have the node's own
// distance (10) at index id.
func (s *Sysfs) AddNUMANode(id int, cpus string, socket int, distances []int) error {
	if id < 0 || id >= len(distances) {
		return fmt.Errorf("add fake NUMA node %d: distance row of %d entries has no own entry", id, len(distances))
	}
	if distances[id] != 10 {
		return fmt.Errorf("add fake NUMA node %d: own distance is %d, the kernel reports 10", id, distances[id])
	}
	dir := filepath.Join(s.Root, "devices", "system", "node", fmt.Sprintf("node%d", id))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("add fake NUMA node %d: %w", id, err)
	}
	row := make([]string, len(distances))
	for i, d := range distances {
		row[i] = strconv.Itoa(d)
	}
	if err := os.WriteFile(filepath.Join(dir, "distance"), []byte(strings.Join(row, " ")+"\n"), 0o644); err != nil {
		return fmt.Errorf("add fake NUMA node %d: %w", id, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "cpulist"), []byte(cpus+"\n"), 0o644); err != nil {
		return fmt.Errorf("add fake NUMA node %d: %w", id, err)
	}
	list, err := parseCPUList(cpus)
	if err != nil {
		return fmt.Errorf("add fake NUMA node %d: %w", id, err)
	}
	for _, c := range list {
		cdir := filepath.Join(s.Root, "devices", "system", "cpu", fmt.Sprintf("cpu%d", c), "topology")
		if err := os.MkdirAll(cdir, 0o755); err != nil {
			return fmt.Errorf("add fake NUMA node %d: %w", id, err)
		}
		if err := os.WriteFile(filepath.Join(cdir, "physical_package_id"), []byte(strconv.Itoa(socket)+"\n"), 0o644); err != nil {
			return fmt.Errorf("add fake NUMA node %d: %w", id, err)
		}
	}
	return nil
}

func parseCPUList(s string) ([]int, error) {
	var out []int
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil {
			return nil, fmt.Errorf("bad cpulist %q", s)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil || b < a {
				return nil, fmt.Errorf("bad cpulist %q", s)
			}
		}
		for c := a; c <= b; c++ {
			out = append(out, c)
		}
	}
	return out, nil
}
