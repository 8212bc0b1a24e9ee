// Package cdi writes per-claim Container Device Interface specs: unique
// device names, container-edit builders, atomic writes, removal, garbage
// collection of orphans, and validation by injection into an OCI spec.
package cdi
