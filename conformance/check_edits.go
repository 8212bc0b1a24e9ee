package conformance

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"

	oci "github.com/opencontainers/runtime-spec/specs-go"
	drapbv1 "k8s.io/kubelet/pkg/apis/dra/v1"
	"tags.cncf.io/container-device-interface/pkg/cdi"
)

// injectInto applies the CDI devices ids to an empty OCI spec, as the
// container runtime does for a container that gets them.
func injectInto(cache *cdi.Cache, ids []string) (*oci.Spec, error) {
	spec := &oci.Spec{Process: &oci.Process{}, Linux: &oci.Linux{}, Root: &oci.Root{Path: "/"}}
	if unresolved, err := cache.InjectDevices(spec, ids...); err != nil {
		return nil, fmt.Errorf("inject CDI devices %q (unresolved: %q): %w", ids, unresolved, err)
	}
	return spec, nil
}

// envMap returns a spec's environment by name.
func envMap(spec *oci.Spec) map[string]string {
	out := map[string]string{}
	if spec.Process == nil {
		return out
	}
	for _, kv := range spec.Process.Env {
		k, v, _ := strings.Cut(kv, "=")
		out[k] = v
	}
	return out
}

// editsOf renders what the CDI devices ids do to a container (its
// environment, device nodes, mounts, hooks, annotations) in a form that
// compares equal exactly when a container would get the same.
func editsOf(cache *cdi.Cache, ids []string) (string, error) {
	spec, err := injectInto(cache, ids)
	if err != nil {
		return "", err
	}
	// Order within environment, device nodes and mounts is the specs'
	// order, which a driver may change when it rewrites them; hooks run
	// in order, so theirs counts.
	env := slices.Clone(spec.Process.Env)
	sort.Strings(env)
	sort.SliceStable(spec.Linux.Devices, func(i, j int) bool { return spec.Linux.Devices[i].Path < spec.Linux.Devices[j].Path })
	sort.SliceStable(spec.Mounts, func(i, j int) bool { return spec.Mounts[i].Destination < spec.Mounts[j].Destination })
	if res := spec.Linux.Resources; res != nil {
		sort.SliceStable(res.Devices, func(i, j int) bool { return fmt.Sprint(res.Devices[i]) < fmt.Sprint(res.Devices[j]) })
	}
	view := struct {
		Env         []string                      `json:"env,omitempty"`
		Devices     []oci.LinuxDevice             `json:"devices,omitempty"`
		Resources   *oci.LinuxResources           `json:"resources,omitempty"`
		Mounts      []oci.Mount                   `json:"mounts,omitempty"`
		Hooks       *oci.Hooks                    `json:"hooks,omitempty"`
		Annotations map[string]string             `json:"annotations,omitempty"`
		IntelRdt    *oci.LinuxIntelRdt            `json:"intelRdt,omitempty"`
		Groups      []uint32                      `json:"additionalGids,omitempty"`
		NetDevices  map[string]oci.LinuxNetDevice `json:"netDevices,omitempty"`
	}{Env: env, Devices: spec.Linux.Devices, Resources: spec.Linux.Resources, Mounts: spec.Mounts,
		Hooks: spec.Hooks, Annotations: spec.Annotations, IntelRdt: spec.Linux.IntelRdt,
		Groups: spec.Process.User.AdditionalGids, NetDevices: spec.Linux.NetDevices}
	data, err := json.MarshalIndent(view, "", "  ")
	if err != nil {
		return "", fmt.Errorf("render container edits: %w", err)
	}
	return string(data), nil
}

// editsByID renders the edits of each CDI ID of resp on its own (see
// editsOf); IDs that do not resolve are left out (prepare.cdi-resolve
// reports them).
func editsByID(cache *cdi.Cache, resp *drapbv1.NodePrepareResourcesResponse) map[string]string {
	out := map[string]string{}
	for _, id := range cdiIDs(resp) {
		if cache.GetDevice(id) == nil {
			continue
		}
		if e, err := editsOf(cache, []string{id}); err == nil {
			out[id] = e
		}
	}
	return out
}

// envCollisions returns, for the devices of one claim, every environment
// variable that two of them set to different values: a container that
// gets both sees only the value of the device applied last (the CDI
// library replaces a variable of the same name). Variables set to the
// same value by several devices (claim-wide settings) are fine.
func envCollisions(cache *cdi.Cache, devices []*drapbv1.Device) ([]string, error) {
	type setter struct{ dev, value string }
	byKey := map[string][]setter{}
	var all []string
	for _, d := range devices {
		if len(d.CdiDeviceIds) == 0 {
			continue
		}
		all = append(all, d.CdiDeviceIds...)
		spec, err := injectInto(cache, d.CdiDeviceIds)
		if err != nil {
			return nil, err
		}
		name := resultKey(d.PoolName, d.DeviceName, shareOf(d.ShareId))
		for k, v := range envMap(spec) {
			byKey[k] = append(byKey[k], setter{name, v})
		}
	}
	// What a container with all of them gets, in the kubelet's order.
	spec, err := injectInto(cache, all)
	if err != nil {
		return nil, err
	}
	final := envMap(spec)
	var out []string
	for k, ss := range byKey {
		var lost []string
		for _, s := range ss {
			if final[k] != s.value {
				lost = append(lost, fmt.Sprintf("%s's %s=%s", s.dev, k, s.value))
			}
		}
		if len(lost) > 0 {
			out = append(out, fmt.Sprintf("%s is set by %d devices; a container with all of them sees %s=%s and loses %s", k, len(ss), k, final[k], strings.Join(lost, ", ")))
		}
	}
	sort.Strings(out)
	return out, nil
}

func (r *runner) checkCDIEnv(ctx context.Context) outcome {
	cache, _, _, why := r.mainCDI(ctx)
	if why != "" {
		return skip("%s", why)
	}
	var f failures
	checked := 0
	for _, c := range r.main.claims {
		res := r.main.resp.Claims[string(c.UID)]
		var withIDs []*drapbv1.Device
		for _, d := range res.GetDevices() {
			if len(d.CdiDeviceIds) > 0 && slices.IndexFunc(d.CdiDeviceIds, func(id string) bool { return cache.GetDevice(id) == nil }) < 0 {
				withIDs = append(withIDs, d)
			}
		}
		if len(withIDs) < 2 {
			continue
		}
		checked++
		coll, err := envCollisions(cache, withIDs)
		if err != nil {
			f.add("claim %s: %v", c.Name, err)
			continue
		}
		for _, msg := range coll {
			f.add("claim %s: %s", c.Name, msg)
		}
	}
	if checked == 0 {
		return skip("no prepared claim has two devices with resolvable CDI IDs")
	}
	if len(f) > 0 {
		f.add("give each device of a claim its own variable names (e.g. a suffix per device), or set claim-wide variables once with one value")
	}
	return f.outcome("the devices of %d claims keep their own environment variables together", checked)
}
