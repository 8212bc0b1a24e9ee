package conformance

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	oci "github.com/opencontainers/runtime-spec/specs-go"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/resourceclaim"
	drapbv1 "k8s.io/kubelet/pkg/apis/dra/v1"
	"tags.cncf.io/container-device-interface/pkg/cdi"
	"tags.cncf.io/container-device-interface/pkg/parser"
)

// ownResults returns the allocation results of claim that belong to driver.
func ownResults(driver string, claim *resourceapi.ResourceClaim) []resourceapi.DeviceRequestAllocationResult {
	if claim.Status.Allocation == nil {
		return nil
	}
	var out []resourceapi.DeviceRequestAllocationResult
	for _, r := range claim.Status.Allocation.Devices.Results {
		if r.Driver == driver {
			out = append(out, r)
		}
	}
	return out
}

func shareOf(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func resultKey(pool, device, share string) string {
	k := pool + "/" + device
	if share != "" {
		k += " share " + share
	}
	return k
}

// checkResultKeys checks that a response answers exactly the claims.
func checkResultKeys[T any](f *failures, call string, claims []*resourceapi.ResourceClaim, got map[string]T, isErr func(T) string) {
	want := map[string]string{}
	for _, c := range claims {
		want[string(c.UID)] = c.Name
	}
	for uid, res := range got {
		name, ok := want[uid]
		if !ok {
			f.add("%s answered claim UID %q, which was not asked for; the kubelet rejects the whole response", call, uid)
			continue
		}
		if msg := isErr(res); msg != "" {
			f.add("%s failed for claim %s: %s", call, name, msg)
		}
	}
	for uid, name := range want {
		if _, ok := got[uid]; !ok {
			f.add("%s has no result for claim %s (UID %s); answer every claim in the request", call, name, uid)
		}
	}
}

func prepErr(r *drapbv1.NodePrepareResourceResponse) string {
	if r == nil {
		return "nil result"
	}
	return r.Error
}

func unprepErr(r *drapbv1.NodeUnprepareResourceResponse) string {
	if r == nil {
		return ""
	}
	return r.Error
}

// checkDevicesMatch compares a claim's prepared devices to its allocation.
func checkDevicesMatch(f *failures, driver string, claim *resourceapi.ResourceClaim, res *drapbv1.NodePrepareResourceResponse) {
	want := map[string]bool{}
	for _, r := range ownResults(driver, claim) {
		want[resultKey(r.Pool, r.Device, shareOf((*string)(r.ShareID)))] = true
	}
	got := map[string]bool{}
	for _, d := range res.GetDevices() {
		k := resultKey(d.PoolName, d.DeviceName, shareOf(d.ShareId))
		got[k] = true
		if !want[k] {
			f.add("claim %s: returned device %s, which is not allocated to the claim for this driver (allocated: %s)", claim.Name, k, keys(want))
		}
	}
	for k := range want {
		if !got[k] {
			f.add("claim %s: allocated device %s is missing from the response; its containers would not get it", claim.Name, k)
		}
	}
}

// checkRequestNames checks each device's request names against the
// allocation, the way the kubelet matches them to containers.
func checkRequestNames(f *failures, driver string, claim *resourceapi.ResourceClaim, res *drapbv1.NodePrepareResourceResponse) {
	allowed := map[string]map[string]bool{} // device key -> base request names
	for _, r := range ownResults(driver, claim) {
		k := resultKey(r.Pool, r.Device, shareOf((*string)(r.ShareID)))
		if allowed[k] == nil {
			allowed[k] = map[string]bool{}
		}
		allowed[k][resourceclaim.BaseRequestRef(r.Request)] = true
	}
	nreq := len(claim.Spec.Devices.Requests)
	for _, d := range res.GetDevices() {
		k := resultKey(d.PoolName, d.DeviceName, shareOf(d.ShareId))
		want := allowed[k]
		if want == nil {
			continue // reported by prepare.devices-match
		}
		if len(d.RequestNames) == 0 {
			if nreq > 1 {
				f.add("claim %s: device %s names no request; the kubelet then gives it to the containers of every request of the claim. Return request_names %s", claim.Name, k, keys(want))
			}
			continue
		}
		for _, n := range d.RequestNames {
			if want[n] {
				continue
			}
			if base := resourceclaim.BaseRequestRef(n); base != n && want[base] {
				f.add("claim %s: device %s names request %q; the kubelet compares base request names, return %q", claim.Name, k, n, base)
				continue
			}
			f.add("claim %s: device %s names request %q, but it was allocated for request(s) %s", claim.Name, k, n, keys(want))
		}
	}
}

func keys(m map[string]bool) string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return "[" + strings.Join(out, ", ") + "]"
}

// normalize turns a prepare response into a comparable form, ignoring
// order and error texts.
func normalize(resp *drapbv1.NodePrepareResourcesResponse) map[string][]string {
	out := map[string][]string{}
	for uid, res := range resp.GetClaims() {
		if res.GetError() != "" {
			out[uid] = []string{"<error>"}
			continue
		}
		var devs []string
		for _, d := range res.GetDevices() {
			req := slices.Clone(d.RequestNames)
			sort.Strings(req)
			cdiIDs := slices.Clone(d.CdiDeviceIds)
			sort.Strings(cdiIDs)
			devs = append(devs, fmt.Sprintf("%s requests=%q cdi=%q", resultKey(d.PoolName, d.DeviceName, shareOf(d.ShareId)), req, cdiIDs))
		}
		sort.Strings(devs)
		out[uid] = devs
	}
	return out
}

// cdiIDs returns all CDI IDs in a response.
func cdiIDs(resp *drapbv1.NodePrepareResourcesResponse) []string {
	var out []string
	for _, res := range resp.GetClaims() {
		for _, d := range res.GetDevices() {
			out = append(out, d.CdiDeviceIds...)
		}
	}
	sort.Strings(out)
	return slices.Compact(out)
}

// cdiCache loads the CDI specs in dirs.
func cdiCache(dirs []string) (*cdi.Cache, string, error) {
	cache, err := cdi.NewCache(cdi.WithSpecDirs(dirs...), cdi.WithAutoRefresh(false))
	if err != nil {
		return nil, "", fmt.Errorf("load CDI specs: %w", err)
	}
	_ = cache.Refresh() // errors are per spec; reported below
	var errs []string
	for path, es := range cache.GetErrors() {
		for _, e := range es {
			errs = append(errs, fmt.Sprintf("%s: %v", path, e))
		}
	}
	sort.Strings(errs)
	return cache, strings.Join(errs, "; "), nil
}

// checkCDIFormat checks every ID is a qualified CDI name.
func checkCDIFormat(f *failures, ids []string) {
	for _, id := range ids {
		if _, _, _, err := parser.ParseQualifiedName(id); err != nil {
			f.add("CDI ID %q is not vendor/class=name: %v", id, err)
		}
	}
}

// checkCDIResolve checks every ID is defined by a spec in the folders.
func checkCDIResolve(f *failures, cache *cdi.Cache, specErrs string, dirs, ids []string) {
	for _, id := range ids {
		if cache.GetDevice(id) == nil {
			msg := fmt.Sprintf("CDI device %q is not defined by any spec in %q; write the spec before answering prepare", id, dirs)
			if specErrs != "" {
				msg += " (CDI spec errors: " + specErrs + ")"
			}
			f.add("%s", msg)
		}
	}
}

// checkCDIInject injects ids into an empty OCI spec.
func checkCDIInject(f *failures, cache *cdi.Cache, ids []string) {
	if len(ids) == 0 {
		return
	}
	spec := &oci.Spec{Process: &oci.Process{}, Linux: &oci.Linux{}, Root: &oci.Root{Path: "/"}}
	unresolved, err := cache.InjectDevices(spec, ids...)
	if err != nil {
		f.add("injecting CDI devices %q into an OCI spec failed (unresolved: %q): %v", ids, unresolved, err)
	}
}

// snapshot lists the files in the CDI folders.
func snapshot(dirs []string) map[string]bool {
	out := map[string]bool{}
	for _, d := range dirs {
		entries, err := os.ReadDir(d)
		if err != nil {
			continue
		}
		for _, e := range entries {
			if !e.IsDir() {
				out[filepath.Join(d, e.Name())] = true
			}
		}
	}
	return out
}

// created returns files in after that are not in before.
func created(before, after map[string]bool) []string {
	var out []string
	for f := range after {
		if !before[f] {
			out = append(out, f)
		}
	}
	sort.Strings(out)
	return out
}

// leftover returns those of files that still exist.
func leftover(files []string) []string {
	var out []string
	for _, f := range files {
		if _, err := os.Stat(f); err == nil {
			out = append(out, f)
		}
	}
	return out
}
