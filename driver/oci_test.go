package driver_test

import oci "github.com/opencontainers/runtime-spec/specs-go"

func newOCISpec() *oci.Spec {
	return &oci.Spec{Process: &oci.Process{}, Linux: &oci.Linux{}}
}
