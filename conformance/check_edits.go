package conformance

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"

	oci "github.com/opencontainers/runtime-spec/specs-go"
	resourceapi "k8s.io/api/resource/v1"
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
// variable that a container with all of them does not see as each
// device set it: two devices that set it to different values (the CDI
// library replaces a variable of the same name, so the container sees
// only the value of the device applied last), and a CDI device that sets
// it twice to different values (the later entry replaces the earlier in
// the same way: a driver that serves two shares of one device with one
// CDI device and writes the variable once per share). Variables set to
// the same value by several devices (claim-wide settings) are fine.
func envCollisions(cache *cdi.Cache, devices []*drapbv1.Device) ([]string, error) {
	type setter struct{ dev, value string }
	byKey := map[string][]setter{}
	var all []string
	// The devices (result entries) each CDI ID is returned for.
	entries := map[string][]string{}
	var ids []string
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
		for _, id := range d.CdiDeviceIds {
			if _, seen := entries[id]; !seen {
				ids = append(ids, id)
			}
			entries[id] = append(entries[id], name)
		}
	}
	var out []string
	for _, id := range ids {
		for _, msg := range repeatedEnv(cache, id) {
			out = append(out, fmt.Sprintf("%s (CDI device %s, returned for %s)", msg, id, strings.Join(entries[id], ", ")))
		}
	}
	// What a container with all of them gets, in the kubelet's order.
	spec, err := injectInto(cache, all)
	if err != nil {
		return nil, err
	}
	final := envMap(spec)
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

// repeatedEnv returns, for the CDI device id, each variable that its
// edits (those of its spec, then its own, as the CDI library applies
// them) set more than once to different values, saying which value a
// container sees.
func repeatedEnv(cache *cdi.Cache, id string) []string {
	dev := cache.GetDevice(id)
	if dev == nil {
		return nil
	}
	var env []string
	if spec := dev.GetSpec(); spec != nil && spec.Spec != nil {
		env = append(env, spec.ContainerEdits.Env...)
	}
	env = append(env, dev.ContainerEdits.Env...)
	values := map[string][]string{}
	var keys []string
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		if _, seen := values[k]; !seen {
			keys = append(keys, k)
		}
		values[k] = append(values[k], v)
	}
	var out []string
	for _, k := range keys {
		vs := values[k]
		distinct := slices.Compact(slices.Sorted(slices.Values(vs)))
		if len(distinct) < 2 {
			continue
		}
		lost := make([]string, 0, len(vs)-1)
		for _, v := range vs[:len(vs)-1] {
			if v != vs[len(vs)-1] {
				lost = append(lost, k+"="+v)
			}
		}
		out = append(out, fmt.Sprintf("%s is set %d times by one CDI device; a container sees %s=%s and loses %s", k, len(vs), k, vs[len(vs)-1], strings.Join(lost, ", ")))
	}
	return out
}

func (r *runner) checkCDIEnv(ctx context.Context) outcome {
	cache, _, _, why := r.mainCDI(ctx)
	if why != "" {
		return skip("%s", why)
	}
	var f failures
	checked := 0
	for _, c := range r.main.claims {
		if r.claimEnv(&f, cache, c, r.main.resp.Claims[string(c.UID)]) {
			checked++
		}
	}
	// Two shares of one device in one claim: a driver may serve them
	// with a CDI device each or with one for both.
	note := ""
	switch name, err := r.twoSharesEnv(ctx, &f); {
	case err != nil:
		note = fmt.Sprintf("; not checked: two shares of one device in one claim (%v)", err)
	case name != "":
		checked++
	}
	if checked == 0 {
		return skip("no prepared claim has a device with resolvable CDI IDs%s", note)
	}
	if len(f) > 0 {
		f.add("give each device (and each share of a device) of a claim its own variable names (e.g. a suffix per device), set a name once per CDI device, or set claim-wide variables once with one value")
	}
	return f.outcome("the devices of %d claims keep their own environment variables together%s", checked, note)
}

// claimEnv checks the environment the devices of one prepared claim set
// (res) and reports whether there was anything to check: a device whose
// CDI IDs all resolve.
func (r *runner) claimEnv(f *failures, cache *cdi.Cache, c *resourceapi.ResourceClaim, res *drapbv1.NodePrepareResourceResponse) bool {
	var withIDs []*drapbv1.Device
	for _, d := range res.GetDevices() {
		if len(d.CdiDeviceIds) > 0 && slices.IndexFunc(d.CdiDeviceIds, func(id string) bool { return cache.GetDevice(id) == nil }) < 0 {
			withIDs = append(withIDs, d)
		}
	}
	if len(withIDs) == 0 {
		return false
	}
	coll, err := envCollisions(cache, withIDs)
	if err != nil {
		f.add("claim %s: %v", c.Name, err)
		return true
	}
	for _, msg := range coll {
		f.add("claim %s: %s", c.Name, msg)
	}
	return true
}

// twoSharesEnv allocates a claim with two requests for shares of one
// device that allows multiple allocations, prepares it, checks its
// environment into f and unprepares it. It returns the claim's name, ""
// when no device allows two shares now, and an error when preparing it
// failed (not this check's concern: the other prepare checks judge
// prepare).
func (r *runner) twoSharesEnv(ctx context.Context, f *failures) (string, error) {
	for _, dev := range r.devices {
		d := r.deviceObj[dev]
		if d.AllowMultipleAllocations == nil || !*d.AllowMultipleAllocations {
			continue
		}
		capacity, _, why := shares(d, 2)
		if why != "" {
			continue
		}
		// Unequal shares: a setting derived from a share's amount
		// differs between them, so one the driver writes twice under one
		// name shows.
		claim, err := r.sched.allocated(ctx, "shares", claimSpec(withCapacity(exactRequest("first", r.class, 1), capacity[0]), withCapacity(exactRequest("second", r.class, 1), capacity[1])), &dev)
		if err != nil {
			continue
		}
		defer r.sched.release(ctx, claim)
		resp, err := r.prepare(ctx, claim)
		if err != nil {
			return "", fmt.Errorf("NodePrepareResources for claim %s with two shares of device %s failed: %v", claim.Name, dev, err)
		}
		defer func() { _, _ = r.unprepare(ctx, claim) }()
		res := resp.Claims[string(claim.UID)]
		if res == nil || res.Error != "" {
			return "", fmt.Errorf("NodePrepareResources for claim %s with two shares of device %s failed: %s", claim.Name, dev, prepErr(res))
		}
		cache, _, err := r.cdiCache(ctx)
		if err != nil {
			return "", err
		}
		if !r.claimEnv(f, cache, claim, res) {
			return "", nil
		}
		return claim.Name, nil
	}
	return "", nil
}

// shellName matches the variable names a POSIX shell reads from its
// environment and passes on.
var shellName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

func (r *runner) checkCDIEnvNames(ctx context.Context) outcome {
	cache, _, ids, why := r.mainCDI(ctx)
	if why != "" {
		return skip("%s", why)
	}
	var f failures
	n := 0
	for _, id := range ids {
		if cache.GetDevice(id) == nil {
			continue
		}
		spec, err := injectInto(cache, []string{id})
		if err != nil {
			continue
		}
		var bad []string
		for k := range envMap(spec) {
			n++
			if !shellName.MatchString(k) {
				bad = append(bad, k)
			}
		}
		if len(bad) > 0 {
			sort.Strings(bad)
			f.add("CDI device %s sets %s", id, strings.Join(bad, ", "))
		}
	}
	if n == 0 {
		return skip("the CDI devices of the main claims set no environment variable")
	}
	if len(f) > 0 {
		f.add("the container runtime applies such a variable, but a shell (busybox sh, dash) does not pass a name that is not [A-Za-z_][A-Za-z0-9_]* on to the programs it starts: a container whose entry point is a shell script never sees it (use letters, digits and '_', e.g. '_' for the '-' of a UID)")
	}
	return f.outcome("the %d variables of the main claims' CDI devices have names a shell can read", n)
}
