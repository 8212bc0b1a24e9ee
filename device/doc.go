// Package device is drakit's vendor-neutral device model: builders for
// attributes, capacities, counters and taints, an Inventory of pools, its
// conversion into API-valid ResourceSlices, validation, and the Discoverer
// interface a vendor implements.
package device
