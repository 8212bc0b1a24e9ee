package cdi

import (
	"errors"

	cdispec "tags.cncf.io/container-device-interface/specs-go"
)

// EditsFromSpec returns Edits holding a deep copy of c: how container
// edits that another CDI generator made (nvidia-container-toolkit's nvcdi,
// a vendor's own tooling) go into a claim's spec unchanged, hooks' env and
// timeouts and mounts' types included. c's network devices and Intel RDT
// settings have no place in Edits: they are an error.
func EditsFromSpec(c cdispec.ContainerEdits) (*Edits, error) {
	if len(c.NetDevices) > 0 || c.IntelRdt != nil {
		return nil, errors.New("container edits from a spec: network devices and Intel RDT are not supported")
	}
	c.NetDevices, c.IntelRdt = nil, nil
	return &Edits{e: (&Edits{e: c}).spec()}, nil
}
