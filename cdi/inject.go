package cdi

import (
	"fmt"
	"sort"
	"strings"

	oci "github.com/opencontainers/runtime-spec/specs-go"
	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"
	"tags.cncf.io/container-device-interface/pkg/parser"
)

// Inject does what a container runtime does with the CDI device IDs a
// driver returned: it reads the specs in dirs with the CDI library
// (tags.cncf.io/container-device-interface), resolves ids, and applies
// their edits to ociSpec. It fails, naming the IDs, when any ID is not
// found, and, naming the file, when a spec in dirs that defines a
// requested device is invalid. Use it in tests and conformance checks to
// prove that what a driver writes works.
func Inject(ociSpec *oci.Spec, dirs []string, ids ...string) error {
	return inject(ociSpec, dirs, ids)
}

func inject(ociSpec *oci.Spec, dirs []string, ids []string) error {
	if ociSpec == nil {
		return fmt.Errorf("inject CDI devices: nil OCI spec")
	}
	if len(dirs) == 0 {
		return fmt.Errorf("inject CDI devices: no spec folders")
	}
	for _, id := range ids {
		if !parser.IsQualifiedName(id) {
			return fmt.Errorf("inject CDI devices: %q is not a qualified CDI device ID (vendor/class=name)", id)
		}
	}
	cache, err := cdiapi.NewCache(cdiapi.WithSpecDirs(dirs...), cdiapi.WithAutoRefresh(false))
	if err != nil {
		return fmt.Errorf("inject CDI devices: read spec folders: %w", err)
	}
	unresolved, err := cache.InjectDevices(ociSpec, ids...)
	if err == nil {
		return nil
	}
	// Say why: a spec file that failed to load or conflicts is the
	// usual reason a device cannot be resolved.
	var details []string
	specErrs := cache.GetErrors()
	paths := make([]string, 0, len(specErrs))
	for p := range specErrs {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		for _, e := range specErrs[p] {
			details = append(details, fmt.Sprintf("%s: %v", p, e))
		}
	}
	if len(unresolved) > 0 {
		err = fmt.Errorf("%w (unresolved: %s)", err, strings.Join(unresolved, ", "))
	}
	if len(details) > 0 {
		return fmt.Errorf("inject CDI devices: %w; spec errors: %s", err, strings.Join(details, "; "))
	}
	return fmt.Errorf("inject CDI devices: %w", err)
}
