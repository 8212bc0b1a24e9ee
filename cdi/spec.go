package cdi

import (
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"unicode/utf8"

	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"
	cdispec "tags.cncf.io/container-device-interface/specs-go"
)

// Spec builds the CDI spec of a claim without writing it, and the
// qualified device IDs. It reports every problem, each naming its field.
// It also reads the spec back with the CDI library, as a runtime would;
// [Writer.Write] applies the same rules without that second reading.
func (w *Writer) Spec(claim Claim) (*cdispec.Spec, []string, error) {
	spec, ids, data, err := w.build(claim)
	if err != nil {
		return nil, nil, err
	}
	if _, err := cdiapi.ParseSpec(data); err != nil {
		return nil, nil, fmt.Errorf("build CDI spec of claim %q: the CDI library cannot read it: %w", claim.UID, err)
	}
	return spec, ids, nil
}

// build builds and encodes the CDI spec of a claim, checking it with
// drakit's rules and the CDI library's edit validation (the rules a
// runtime applies when it reads the spec; FuzzSpec checks that a spec
// build accepts is one the library reads).
func (w *Writer) build(claim Claim) (*cdispec.Spec, []string, []byte, error) {
	var errs []error
	if err := ValidateUID(claim.UID); err != nil {
		errs = append(errs, fmt.Errorf("uid: %w", err))
	}
	if len(claim.Devices) == 0 {
		errs = append(errs, errors.New("devices: at least one device is required"))
	}
	spec := &cdispec.Spec{
		Kind:           w.Kind(),
		ContainerEdits: claim.Common.spec(),
		Devices:        make([]cdispec.Device, 0, len(claim.Devices)),
	}
	// The claim's name is for people only: leave it out rather than fail
	// when it holds characters a spec cannot carry.
	if (claim.Namespace != "" || claim.Name != "") && badText(claim.Namespace+claim.Name) == "" {
		spec.Annotations = map[string]string{claimAnnotation: claim.Namespace + "/" + claim.Name}
	}
	errs = append(errs, validateEdits("common", &spec.ContainerEdits)...)
	ids := make([]string, 0, len(claim.Devices))
	seen := make(map[string]int, len(claim.Devices))
	for i, d := range claim.Devices {
		fld := fmt.Sprintf("devices[%d]", i)
		if j, dup := seen[d.Name]; dup {
			errs = append(errs, fmt.Errorf("%s.name %q: duplicate of devices[%d]", fld, d.Name, j))
			continue
		}
		seen[d.Name] = i
		if err := validateLocalName(d.Name); err != nil {
			errs = append(errs, fmt.Errorf("%s.name: %w", fld, err))
			continue
		}
		edits := d.Edits.spec()
		if (&Edits{e: edits}).IsEmpty() {
			// The CDI library rejects a whole spec in which one device
			// has no edits; give such a device a marker.
			edits.Env = []string{EmptyDeviceEnv + "=" + d.Name}
		}
		errs = append(errs, validateEdits(fld+".edits", &edits)...)
		name := EncodeName(d.Name)
		if claim.UID != "" {
			name = string(claim.UID) + "_" + name
		}
		spec.Devices = append(spec.Devices, cdispec.Device{Name: name, ContainerEdits: edits})
		ids = append(ids, w.Kind()+"="+name)
	}
	if len(errs) > 0 {
		return nil, nil, nil, fmt.Errorf("build CDI spec of claim %q: %w", claim.UID, errors.Join(errs...))
	}
	v, err := cdispec.MinimumRequiredVersion(spec)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("build CDI spec of claim %q: version: %w", claim.UID, err)
	}
	spec.Version = v
	data, err := json.Marshal(spec)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("build CDI spec of claim %q: encode: %w", claim.UID, err)
	}
	return spec, ids, data, nil
}

// badText reports a problem with a string that goes into a spec: NUL,
// which no runtime can pass on, invalid UTF-8, and characters that the
// CDI library's YAML reader rejects (DEL, C1 controls, U+FFFE, U+FFFF).
func badText(s string) string {
	if !utf8.ValidString(s) {
		return "is not valid UTF-8"
	}
	for _, r := range s {
		switch {
		case r == 0:
			return "contains NUL"
		case r == 0x7f || (r >= 0x80 && r <= 0x9f && r != 0x85) || r == 0xfffe || r == 0xffff:
			return fmt.Sprintf("contains the control character %U", r)
		}
	}
	return ""
}

// validateEdits checks edits with the CDI library's rules plus the ones a
// runtime would only find at injection time; fld names the edits.
func validateEdits(fld string, e *cdispec.ContainerEdits) []error {
	var errs []error
	text := func(fld, s string) {
		if msg := badText(s); msg != "" {
			errs = append(errs, fmt.Errorf("%s %q: %s", fld, s, msg))
		}
	}
	for i, env := range e.Env {
		text(fmt.Sprintf("%s.env[%d]", fld, i), env)
	}
	for i, n := range e.DeviceNodes {
		text(fmt.Sprintf("%s.deviceNodes[%d].path", fld, i), n.Path)
		text(fmt.Sprintf("%s.deviceNodes[%d].hostPath", fld, i), n.HostPath)
	}
	for i, m := range e.Mounts {
		text(fmt.Sprintf("%s.mounts[%d].hostPath", fld, i), m.HostPath)
		text(fmt.Sprintf("%s.mounts[%d].containerPath", fld, i), m.ContainerPath)
		for j, o := range m.Options {
			text(fmt.Sprintf("%s.mounts[%d].options[%d]", fld, i, j), o)
		}
	}
	for i, h := range e.Hooks {
		text(fmt.Sprintf("%s.hooks[%d].path", fld, i), h.Path)
		for j, a := range h.Args {
			text(fmt.Sprintf("%s.hooks[%d].args[%d]", fld, i, j), a)
		}
	}
	for i, env := range e.Env {
		key, _, _ := strings.Cut(env, "=")
		if key == "" || strings.ContainsRune(key, 0) || strings.ContainsRune(env, 0) {
			errs = append(errs, fmt.Errorf("%s.env[%d] %q: key must be non-empty and free of '=' and NUL", fld, i, env))
		}
	}
	for i, n := range e.DeviceNodes {
		p := fmt.Sprintf("%s.deviceNodes[%d]", fld, i)
		if !filepath.IsAbs(n.Path) {
			errs = append(errs, fmt.Errorf("%s.path %q: must be an absolute path", p, n.Path))
		}
		if n.HostPath != "" && !filepath.IsAbs(n.HostPath) {
			errs = append(errs, fmt.Errorf("%s.hostPath %q: must be an absolute path", p, n.HostPath))
		}
		switch n.Type {
		case "", "b", "c", "u", "p":
		default:
			errs = append(errs, fmt.Errorf("%s.type %q: must be one of b, c, u, p", p, n.Type))
		}
		if strings.Trim(n.Permissions, "rwm") != "" {
			errs = append(errs, fmt.Errorf("%s.permissions %q: must be a subset of rwm", p, n.Permissions))
		}
		if n.Major < 0 || n.Minor < 0 {
			errs = append(errs, fmt.Errorf("%s: major and minor must not be negative", p))
		}
	}
	for i, m := range e.Mounts {
		p := fmt.Sprintf("%s.mounts[%d]", fld, i)
		if !filepath.IsAbs(m.HostPath) {
			errs = append(errs, fmt.Errorf("%s.hostPath %q: must be an absolute path", p, m.HostPath))
		}
		if !filepath.IsAbs(m.ContainerPath) {
			errs = append(errs, fmt.Errorf("%s.containerPath %q: must be an absolute path", p, m.ContainerPath))
		}
	}
	for i, h := range e.Hooks {
		p := fmt.Sprintf("%s.hooks[%d]", fld, i)
		switch HookName(h.HookName) {
		case Prestart, CreateRuntime, CreateContainer, StartContainer, Poststart, Poststop:
		default:
			errs = append(errs, fmt.Errorf("%s.hookName %q: not an OCI hook stage", p, h.HookName))
		}
		if !filepath.IsAbs(h.Path) {
			errs = append(errs, fmt.Errorf("%s.path %q: must be an absolute path", p, h.Path))
		}
	}
	if len(errs) > 0 {
		return errs
	}
	// The CDI library's own validation (the same code a runtime runs).
	if err := (&cdiapi.ContainerEdits{ContainerEdits: e}).Validate(); err != nil {
		errs = append(errs, fmt.Errorf("%s: %w", fld, err))
	}
	return errs
}
