// Package topologytest builds fake sysfs trees for tests and simulators of
// drivers that read device topology with the topology package: PCI devices
// behind root complexes and bridges, with NUMA nodes and SLIT distances, laid
// out as the Linux kernel lays them out under /sys.
package topologytest
