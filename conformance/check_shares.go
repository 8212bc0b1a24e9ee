package conformance

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	drapbv1 "k8s.io/kubelet/pkg/apis/dra/v1"
	"tags.cncf.io/container-device-interface/pkg/cdi"
)

// maxShares is how many claims the suite puts on one device that allows
// multiple allocations at once: more than two, so that a driver with a
// fixed number of slots per device shows, and few enough to fit next to
// the other checks' claims.
const maxShares = 3

// sharedClaims is what the shared fixture saw: claims on one device that
// allows multiple allocations (KEP-5075), each for an unequal share of
// its capacity, prepared the way the kubelet prepares the claims of
// separate pods (the first alone, the others in one call, as for a pod
// with several claims), then the first unprepared alone while the others
// stay prepared, the second prepared again, and the rest unprepared. The
// checks judge what was seen; nothing stays prepared after the setup.
type sharedClaims struct {
	dev      devRef
	capacity []map[resourceapi.QualifiedName]resource.Quantity
	// equal: the request policy allows only equal shares.
	equal  bool
	claims []*resourceapi.ResourceClaim
	// resp is each claim's answer to its first prepare.
	resp  map[*resourceapi.ResourceClaim]*drapbv1.NodePrepareResourceResponse
	empty []string
	// cdi: the node's CDI specs were readable throughout.
	cdi bool
	// envCollisions are what a container with the first two claims
	// loses (allocation.share-env); nil when not judged (whyEnv).
	envCollisions []string
	whyEnv        string
	// unprepare collects what allocation.share-unprepare fails for.
	unprepare failures
	// ids counts the CDI IDs of the other claims that were checked to
	// keep their edits while the first was unprepared.
	ids int
}

// setupShared allocates up to maxShares claims on the first device that
// allows multiple allocations, each asking for another share (see
// shares), prepares them and records what allocation.shared,
// allocation.share-id, allocation.share-env and allocation.share-unprepare
// judge. Preparing is the setup's judge (allocation.shared): a claim the
// driver does not prepare, or answers wrongly, fails it.
func (r *runner) setupShared(ctx context.Context) error {
	sh := &r.shared
	var why []string
	for _, dev := range r.devices {
		d := r.deviceObj[dev]
		if d.AllowMultipleAllocations == nil || !*d.AllowMultipleAllocations {
			continue
		}
		capacity, equal, whyNot := shares(d, maxShares)
		if whyNot != "" {
			why = append(why, fmt.Sprintf("device %s allows multiple allocations, but %s", dev, whyNot))
			continue
		}
		sh.dev, sh.capacity, sh.equal = dev, capacity, equal
		break
	}
	if sh.capacity == nil {
		if len(why) == 0 {
			return unable("no device allows multiple allocations")
		}
		return unable("%s", strings.Join(why, "; "))
	}
	defer func() {
		for _, c := range sh.claims {
			r.sched.release(ctx, c)
		}
	}()
	for i, capacity := range sh.capacity {
		c, err := r.sched.allocated(ctx, "shared", claimSpec(withCapacity(exactRequest("dev", r.class, 1), capacity)), &sh.dev)
		if err != nil && i < 2 {
			return unable("the structured allocator does not place allocation %d of shared device %s (capacity %s), so the scheduler would not either: %v", i+1, sh.dev, quantities(capacity), err)
		}
		if err != nil {
			break
		}
		sh.claims = append(sh.claims, c)
	}
	sh.capacity = sh.capacity[:len(sh.claims)]
	sh.resp = map[*resourceapi.ResourceClaim]*drapbv1.NodePrepareResourceResponse{}
	var f failures
	first, rest := sh.claims[:1], sh.claims[1:]
	before := r.snapshotCDI(ctx)
	madeFirst, ok := r.prepareShares(ctx, &f, first)
	if !ok {
		r.unprepareAll(ctx, first)
		return broken("%s", f.outcome("").msg)
	}
	madeRest, ok := r.prepareShares(ctx, &f, rest)
	if !ok || len(f) > 0 {
		r.unprepareAll(ctx, sh.claims)
		return broken("%s", f.outcome("").msg)
	}
	sh.cdi = before != nil
	cache, _, cacheErr := r.cdiCache(ctx)
	var edits map[string]string
	switch {
	case !r.canReadCDI():
		sh.whyEnv = "no CDI folders configured (Config.CDIDirs or Config.ReadCDI)"
	case cacheErr != nil:
		sh.whyEnv = cacheErr.Error()
	default:
		edits = editsByID(cache, responseOf(sh.resp))
		sh.envCollisions, sh.whyEnv = r.sharesEnv(cache)
	}

	// The first claim unprepared alone: its share goes, the others stay.
	r.unprepareShare(ctx, sh, first[0], madeFirst, madeRest, edits)
	// The second prepared again, alone: the same answer.
	if again, err := r.prepare(ctx, sh.claims[1]); err != nil {
		sh.unprepare.add("preparing claim %s again after claim %s was unprepared failed: %v", sh.claims[1].Name, first[0].Name, err)
	} else if diff := cmp.Diff(normalize(singleResponse(sh.claims[1], sh.resp[sh.claims[1]])), normalize(again)); diff != "" {
		sh.unprepare.add("preparing claim %s again after claim %s (the same device) was unprepared answered differently (-first +again):\n%s", sh.claims[1].Name, first[0].Name, diff)
	}
	// The rest unprepared: their shares go too.
	if resp, err := r.unprepare(ctx, rest...); err != nil {
		sh.unprepare.add("NodeUnprepareResources for claims %s: %v", claimNames(rest), err)
	} else {
		checkResultKeys(&sh.unprepare, "NodeUnprepareResources", rest, resp.Claims, unprepErr)
	}
	if left, _ := r.leftover(ctx, madeRest); len(left) > 0 {
		sh.unprepare.add("after every claim on device %s was unprepared, CDI devices their prepare defined are still defined: %s", sh.dev, strings.Join(left, ", "))
	}
	return nil
}

// prepareShares prepares claims in one call, checks the answer into f
// and records it; it returns what the call added to the CDI folders, and
// false when the call itself failed.
func (r *runner) prepareShares(ctx context.Context, f *failures, claims []*resourceapi.ResourceClaim) (cdiMade, bool) {
	sh := &r.shared
	if len(claims) == 0 {
		return cdiMade{}, true
	}
	snap := r.snapshotCDI(ctx)
	resp, err := r.prepare(ctx, claims...)
	if err != nil {
		f.add("NodePrepareResources for claims %s on shared device %s (%d already prepared on it): %v", claimNames(claims), sh.dev, len(sh.resp), err)
		return cdiMade{}, false
	}
	checkResultKeys(f, "NodePrepareResources", claims, resp.Claims, prepErr)
	for _, c := range claims {
		res := resp.Claims[string(c.UID)]
		if res == nil || res.Error != "" {
			continue
		}
		sh.resp[c] = res
		if checkDevicesMatch(f, r.cfg.DriverName, c, res) {
			sh.empty = append(sh.empty, c.Name)
		}
	}
	if len(*f) > 0 && len(sh.resp) > 0 {
		f.add("claims on device %s prepared before: %d; the scheduler places an allocation wherever the device's capacity has room (KEP-5075), and the kubelet prepares each claim it placed", sh.dev, len(sh.resp))
	}
	return created(snap, r.snapshotCDI(ctx)), true
}

// unprepareShare unprepares claim alone and records into
// sh.unprepare what it took with it: its own CDI devices (made) must be
// gone, the other claims' (others) still defined, and their CDI IDs
// must inject what they did before (edits).
func (r *runner) unprepareShare(ctx context.Context, sh *sharedClaims, claim *resourceapi.ResourceClaim, made, others cdiMade, edits map[string]string) {
	resp, err := r.unprepare(ctx, claim)
	if err != nil {
		sh.unprepare.add("NodeUnprepareResources for claim %s alone: %v", claim.Name, err)
		return
	}
	checkResultKeys(&sh.unprepare, "NodeUnprepareResources", []*resourceapi.ResourceClaim{claim}, resp.Claims, unprepErr)
	if left, _ := r.leftover(ctx, made); len(left) > 0 {
		sh.unprepare.add("claim %s was unprepared, but CDI devices its prepare defined are still defined: %s", claim.Name, strings.Join(left, ", "))
	}
	if now := r.snapshotCDI(ctx); now != nil {
		var lost []string
		for _, d := range others.devices {
			if _, ok := now.devices[d]; !ok {
				lost = append(lost, d)
			}
		}
		if len(lost) > 0 {
			sh.unprepare.add("unpreparing claim %s took CDI devices of the other claims on device %s with it: %s are no longer defined, though those claims are still prepared and their containers may still start", claim.Name, sh.dev, strings.Join(lost, ", "))
		}
	}
	if edits == nil {
		return
	}
	cache, _, err := r.cdiCache(ctx)
	if err != nil {
		return
	}
	var ids []string
	for _, c := range sh.claims {
		if c == claim {
			continue
		}
		ids = append(ids, cdiIDsOf(sh.resp[c])...)
	}
	sort.Strings(ids)
	for _, id := range ids {
		want, ok := edits[id]
		if !ok {
			continue
		}
		sh.ids++
		if cache.GetDevice(id) == nil {
			sh.unprepare.add("CDI ID %s of a claim still prepared on device %s no longer resolves after claim %s was unprepared", id, sh.dev, claim.Name)
			continue
		}
		if got, err := editsOf(cache, []string{id}); err == nil && got != want {
			sh.unprepare.add("CDI ID %s of a claim still prepared on device %s injects other edits after claim %s was unprepared (-before +after):\n%s", id, sh.dev, claim.Name, cmp.Diff(want, got))
		}
	}
}

// sharesEnv returns what a container with the first two shared claims
// (a pod with two claims on one device) loses of their environment, or
// why that cannot be judged.
func (r *runner) sharesEnv(cache *cdi.Cache) ([]string, string) {
	sh := &r.shared
	var devs []*drapbv1.Device
	for _, c := range sh.claims[:2] {
		for _, d := range sh.resp[c].GetDevices() {
			if len(d.CdiDeviceIds) > 0 && slices.IndexFunc(d.CdiDeviceIds, func(id string) bool { return cache.GetDevice(id) == nil }) < 0 {
				devs = append(devs, d)
			}
		}
	}
	if len(devs) == 0 {
		return nil, "no CDI ID returned for the shared allocations resolves (see allocation.shared, prepare.cdi-resolve)"
	}
	coll, err := envCollisions(cache, devs)
	if err != nil {
		return nil, err.Error()
	}
	if coll == nil {
		coll = []string{}
	}
	return coll, ""
}

// unprepareAll unprepares claims, best effort (after a failed setup, at
// the end of the run), when the driver is connected and serving.
func (r *runner) unprepareAll(ctx context.Context, claims []*resourceapi.ResourceClaim) {
	if len(claims) == 0 || r.node == nil || r.gone != nil {
		return
	}
	if exited, _ := r.driverExited(); exited {
		return
	}
	_, _ = r.unprepare(ctx, claims...)
}

func (r *runner) checkShared(ctx context.Context) outcome {
	if o := r.judge(ctx, fxShared); o != nil {
		return *o
	}
	sh := &r.shared
	amounts := make([]string, 0, len(sh.capacity))
	for _, c := range sh.capacity {
		amounts = append(amounts, quantities(c))
	}
	note := ""
	if sh.equal {
		note = "; the request policy allows only equal shares"
	}
	if len(sh.claims) < maxShares {
		note += fmt.Sprintf("; only %d fit", len(sh.claims))
	}
	return pass("device %s prepared for %d claims at once (capacity %s; the first alone, the others in one call)%s%s", sh.dev, len(sh.claims), strings.Join(amounts, " / "), note, noDevicesNote(sh.empty))
}

func (r *runner) checkShareID(context.Context) outcome {
	var f failures
	n := 0
	for _, c := range r.shared.claims {
		res := r.shared.resp[c]
		n += len(res.GetDevices())
		checkShareIDs(&f, r.cfg.DriverName, c, res)
	}
	if n == 0 {
		return skip("the driver returned no devices for the shared allocations")
	}
	return f.outcome("the %d allocations of shared device %s returned with their share IDs", len(r.shared.claims), r.shared.dev)
}

func (r *runner) checkShareUnprepare(context.Context) outcome {
	sh := &r.shared
	if len(cdiIDs(responseOf(sh.resp))) == 0 {
		return skip("the driver returned no CDI devices for the shared allocations: nothing shows whether a share stays prepared")
	}
	if !sh.cdi {
		if len(sh.unprepare) == 0 {
			return pass("claim %s unprepared alone, claim %s prepared again to the same answer (CDI specs not readable: what they define not compared)", sh.claims[0].Name, sh.claims[1].Name)
		}
		return sh.unprepare.outcome("")
	}
	return sh.unprepare.outcome("claim %s on device %s unprepared alone: its CDI devices gone, the other %d claims' still defined (%d CDI IDs inject what they did); claim %s prepared again to the same answer; the rest unprepared and cleaned up", sh.claims[0].Name, sh.dev, len(sh.claims)-1, sh.ids, sh.claims[1].Name)
}

func (r *runner) checkShareEnv(context.Context) outcome {
	sh := &r.shared
	switch {
	case sh.envCollisions == nil:
		return skip("%s", sh.whyEnv)
	case len(sh.envCollisions) > 0:
		var f failures
		for _, c := range sh.envCollisions {
			f.add("%s", c)
		}
		f.add("a pod with two claims on one shared device gives its container both shares' CDI devices; each claim is prepared on its own, so only a variable name of its own per share (e.g. a suffix of the share ID) keeps both shares' settings")
		return f.outcome("")
	}
	return pass("a container with claims %s and %s (shares %s and %s of device %s) keeps both shares' environment", sh.claims[0].Name, sh.claims[1].Name, quantities(sh.capacity[0]), quantities(sh.capacity[1]), sh.dev)
}

// responseOf puts the answers of several calls into one response.
func responseOf(res map[*resourceapi.ResourceClaim]*drapbv1.NodePrepareResourceResponse) *drapbv1.NodePrepareResourcesResponse {
	out := &drapbv1.NodePrepareResourcesResponse{Claims: map[string]*drapbv1.NodePrepareResourceResponse{}}
	for c, r := range res {
		out.Claims[string(c.UID)] = r
	}
	return out
}

// singleResponse is the response of a call that prepared claim alone.
func singleResponse(claim *resourceapi.ResourceClaim, res *drapbv1.NodePrepareResourceResponse) *drapbv1.NodePrepareResourcesResponse {
	return &drapbv1.NodePrepareResourcesResponse{Claims: map[string]*drapbv1.NodePrepareResourceResponse{string(claim.UID): res}}
}

// cdiIDsOf returns the CDI IDs of one claim's answer.
func cdiIDsOf(res *drapbv1.NodePrepareResourceResponse) []string {
	var out []string
	for _, d := range res.GetDevices() {
		out = append(out, d.CdiDeviceIds...)
	}
	return out
}

// claimNames lists claims by name.
func claimNames(claims []*resourceapi.ResourceClaim) string {
	names := make([]string, 0, len(claims))
	for _, c := range claims {
		names = append(names, c.Name)
	}
	return strings.Join(names, ", ")
}
