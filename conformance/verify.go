package conformance

import (
	"fmt"
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
		return "no result for the claim"
	}
	return r.Error
}

func unprepErr(r *drapbv1.NodeUnprepareResourceResponse) string {
	if r == nil {
		return ""
	}
	return r.Error
}

// pairing matches the devices a driver returned for one claim with the
// claim's allocation results of that driver.
type pairing struct {
	pairs   []pair
	extra   []*drapbv1.Device                           // returned, not allocated
	missing []resourceapi.DeviceRequestAllocationResult // allocated, not returned
}

type pair struct {
	got  *drapbv1.Device
	want resourceapi.DeviceRequestAllocationResult
}

// matchDevices pairs returned devices with allocation results by pool and
// device name, and by share ID where the driver returns the
// allocation's. The share ID is optional in api.proto (the kubelet keeps
// it only for the PodResources API, and gives containers the device
// either way), so a returned device without one, or with one that is no
// allocation's (allocation.share-id reports that), matches any other
// allocation of the same device, preferring one whose request it names.
func matchDevices(driver string, claim *resourceapi.ResourceClaim, res *drapbv1.NodePrepareResourceResponse) pairing {
	results := ownResults(driver, claim)
	used := make([]bool, len(results))
	devices := res.GetDevices()
	paired := make([]int, len(devices))
	// First the devices returned with their allocation's share ID.
	for j, d := range devices {
		paired[j] = -1
		if d.ShareId == nil {
			continue
		}
		for i, r := range results {
			if !used[i] && r.Pool == d.PoolName && r.Device == d.DeviceName && r.ShareID != nil && string(*r.ShareID) == *d.ShareId {
				used[i], paired[j] = true, i
				break
			}
		}
	}
	// Then the others, by pool and device name.
	for j, d := range devices {
		if paired[j] >= 0 {
			continue
		}
		best := -1
		for i, r := range results {
			if used[i] || r.Pool != d.PoolName || r.Device != d.DeviceName {
				continue
			}
			if best < 0 || slices.Contains(d.RequestNames, resourceclaim.BaseRequestRef(r.Request)) {
				best = i
			}
		}
		if best >= 0 {
			used[best], paired[j] = true, best
		}
	}
	var p pairing
	for j, d := range devices {
		if paired[j] < 0 {
			p.extra = append(p.extra, d)
			continue
		}
		p.pairs = append(p.pairs, pair{d, results[paired[j]]})
	}
	for i, r := range results {
		if !used[i] {
			p.missing = append(p.missing, r)
		}
	}
	return p
}

// checkDevicesMatch compares a claim's prepared devices to its
// allocation. A result with no devices at all is allowed (api.proto: "a
// claim may have zero or more requests and each request may have zero or
// more devices"; drivers that configure containers through NRI return
// none): it is no failure, and empty reports it.
func checkDevicesMatch(f *failures, driver string, claim *resourceapi.ResourceClaim, res *drapbv1.NodePrepareResourceResponse) (empty bool) {
	if len(res.GetDevices()) == 0 {
		return len(ownResults(driver, claim)) > 0
	}
	p := matchDevices(driver, claim, res)
	allocated := map[string]bool{}
	for _, r := range ownResults(driver, claim) {
		allocated[resultKey(r.Pool, r.Device, shareOf((*string)(r.ShareID)))] = true
	}
	for _, d := range p.extra {
		f.add("claim %s: returned device %s, which is not allocated to the claim for this driver (allocated: %s)", claim.Name, resultKey(d.PoolName, d.DeviceName, shareOf(d.ShareId)), keys(allocated))
	}
	for _, r := range p.missing {
		f.add("claim %s: allocated device %s is missing from the response; its containers would not get it", claim.Name, resultKey(r.Pool, r.Device, shareOf((*string)(r.ShareID))))
	}
	return false
}

// checkShareIDs reports returned devices of shared allocations that carry
// no share ID, and share IDs that are not the allocation's.
func checkShareIDs(f *failures, driver string, claim *resourceapi.ResourceClaim, res *drapbv1.NodePrepareResourceResponse) {
	for _, p := range matchDevices(driver, claim, res).pairs {
		got, want := p.got.ShareId, p.want.ShareID
		switch {
		case want != nil && got == nil:
			f.add("claim %s: device %s/%s has no share ID; return %q so that the PodResources API tells the allocations apart", claim.Name, p.got.PoolName, p.got.DeviceName, *want)
		case want != nil && *got != string(*want):
			f.add("claim %s: device %s/%s is returned with share ID %q, but its allocation's is %q; the PodResources API reports the share ID returned", claim.Name, p.got.PoolName, p.got.DeviceName, *got, *want)
		case want == nil && got != nil:
			f.add("claim %s: device %s/%s is returned with share ID %q, but it is not allocated as a share; return none", claim.Name, p.got.PoolName, p.got.DeviceName, *got)
		}
	}
}

// checkRequestNames checks each device's request names against the
// allocation, the way the kubelet matches them to containers
// (pkg/kubelet/cm/dra/claiminfo.go cdiDevicesAsList: a device with no
// request names goes to the containers of every request).
func checkRequestNames(f *failures, driver string, claim *resourceapi.ResourceClaim, res *drapbv1.NodePrepareResourceResponse) {
	nreq := len(claim.Spec.Devices.Requests)
	for _, p := range matchDevices(driver, claim, res).pairs {
		d := p.got
		k := resultKey(d.PoolName, d.DeviceName, shareOf(d.ShareId))
		// Without a share ID the entry stands for any allocation of the
		// device: each of their requests is a fair name.
		want := map[string]bool{resourceclaim.BaseRequestRef(p.want.Request): true}
		if d.ShareId == nil {
			for _, r := range ownResults(driver, claim) {
				if r.Pool == d.PoolName && r.Device == d.DeviceName {
					want[resourceclaim.BaseRequestRef(r.Request)] = true
				}
			}
		}
		if len(d.RequestNames) == 0 {
			if nreq > 1 {
				f.add("claim %s: device %s names no request; the kubelet then gives it to the containers of every request of the claim (%d requests). Return request_names %s", claim.Name, k, nreq, keys(want))
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
// For an ID that is not, it looks into the container runtimes' default
// folders (/etc/cdi, /var/run/cdi) that were not given, and says so when
// the spec is there: the driver writes to a folder the suite was not told
// about (kubeletplugin's device metadata specs go to /var/run/cdi by
// default).
func checkCDIResolve(f *failures, cache *cdi.Cache, specErrs string, dirs, ids []string) {
	checkCDIResolveHint(f, cache, specErrs, dirs, ids, cdi.DefaultSpecDirs)
}

// checkCDIResolveHint is checkCDIResolve looking for misplaced specs in
// the given default folders.
func checkCDIResolveHint(f *failures, cache *cdi.Cache, specErrs string, dirs, ids, defaults []string) {
	var elsewhere *cdi.Cache
	var others []string
	for _, d := range defaults {
		if !slices.Contains(dirs, d) {
			others = append(others, d)
		}
	}
	for _, id := range ids {
		if cache.GetDevice(id) != nil {
			continue
		}
		msg := fmt.Sprintf("CDI device %q is not defined by any spec in %q; write the spec before answering prepare", id, dirs)
		if specErrs != "" {
			msg += " (CDI spec errors: " + specErrs + ")"
		}
		if elsewhere == nil && len(others) > 0 {
			elsewhere, _, _ = cdiCache(others)
		}
		if elsewhere != nil {
			if d := elsewhere.GetDevice(id); d != nil {
				msg += fmt.Sprintf(". Hint: %s defines it, outside the CDI folders given: give the suite the folder the driver writes to (the container runtime must read it too), or have the driver write to %q", d.GetSpec().GetPath(), dirs)
			}
		}
		f.add("%s", msg)
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
