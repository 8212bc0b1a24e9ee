// Package topology provides standard, portable topology keys: device
// attributes (PCIe root, PCI bus ID, NUMA node), constraint builders for
// aligned allocation, and node labels for gang-scheduled workloads.
package topology
