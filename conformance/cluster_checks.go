package conformance

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/drakit/drakit/internal/podstatus"
	"github.com/drakit/drakit/internal/slicepool"
)

// clusterEntry is one check of cluster mode.
type clusterEntry struct {
	Check
	run func(c *clusterRun, ctx context.Context) outcome
}

// ck makes a cluster check; needs are the earlier checks whose pods or
// driver restart it uses (run, unreported, when Only leaves them out).
func ck(id string, level Level, desc, rule string, run func(*clusterRun, context.Context) outcome, needs ...string) clusterEntry {
	cat, _, _ := strings.Cut(id, ".")
	return clusterEntry{Check: Check{ID: id, Category: cat, Description: desc, Rule: rule, Level: level, Needs: needs}, run: run}
}

// clusterCatalogue lists cluster mode's checks in run order. Later checks
// use the pods earlier ones started (Check.Needs), and skip when those
// did not start.
var clusterCatalogue = []clusterEntry{
	ck("pod.starts", Must, "a pod with a claim from a ResourceClaimTemplate runs on the node",
		"kubelet (pkg/kubelet/cm/dra/manager.go PrepareResources): a pod's containers start only once the driver prepared every claim of the pod; the container runtime then resolves and applies each CDI ID the driver returned (CDI spec: an ID is vendor/class=name and must be defined by a spec on the node), or the container is not created",
		(*clusterRun).checkStarts),
	ck("pod.cdi-edits", Must, "the container sees its device's CDI edits (environment)",
		"kubelet hands the CDI IDs from NodePrepareResources to the runtime (pkg/kubelet/cm/dra/manager.go GetResources); the runtime applies their edits to the container (CDI spec). Judged by the spec's environment where the node's CDI specs are readable, else by the device's name or attribute values in the environment",
		(*clusterRun).checkCDIEdits, "pod.starts"),
	ck("pod.isolation", Must, "a container sees none of another claim's device edits",
		"kubelet: a container gets the CDI devices of its own claims only (pkg/kubelet/cm/dra/claiminfo.go cdiDevicesAsList); edits of another claim's device hand it a device the scheduler gave someone else",
		(*clusterRun).checkIsolation, "pod.starts"),
	ck("pod.two-devices", Must, "a container with two devices of one claim sees both devices' edits",
		"container runtime (CDI library): a variable set by two devices keeps the later value, so a container with both loses the first device's setting; with a matchAttribute constraint where two devices share an attribute",
		(*clusterRun).checkTwoDevices),
	ck("pod.request-names", Must, "two containers, each naming one request of a claim with two, see each its own request's device",
		"api.proto Device.request_names: \"If empty, the device is associated with all requests\"; the kubelet gives a container that names a request the devices whose request names contain it or are empty (pkg/kubelet/cm/dra/claiminfo.go cdiDevicesAsList), so a wrong name hides the device and a missing one hands it to the other request's container too",
		(*clusterRun).checkRequestNames, "pod.starts"),
	ck("pod.two-claims", Must, "a pod with two claims of the driver runs and its container sees both claims' devices",
		"kubelet (pkg/kubelet/cm/dra/manager.go prepareResources): a pod's claims of one driver go in one NodePrepareResources call; a result for each is required (\"NodePrepareResources skipped %d ResourceClaims\" otherwise) and the pod does not start",
		(*clusterRun).checkTwoClaims),
	ck("pod.two-claims-env", Should, "the devices of a pod's two claims set no environment variable to two values",
		"container runtime (CDI library): a variable set by two CDI devices keeps the later value, so a container with both claims loses the other claim's setting; each claim is prepared on its own (api.proto NodePrepareResources), so only names of its own per device avoid that: advice, where pod.two-devices is a MUST inside one claim",
		(*clusterRun).checkTwoClaimsEnv, "pod.two-claims"),
	ck("pod.shared-claim", Must, "a claim shared by two pods gives both the same device edits",
		"kubelet: a claim reserved for several pods is prepared once and its CDI devices go to every pod that uses it (pkg/kubelet/cm/dra/manager.go)",
		(*clusterRun).checkSharedClaim),
	ck("pod.first-available", Must, "a claim with firstAvailable subrequests runs with the subrequest the scheduler chose",
		"KEP-4816: the kubelet matches the device to containers by the base request name (pkg/kubelet/cm/dra/claiminfo.go)",
		(*clusterRun).checkFirstAvailable),
	ck("pod.unprepare", Must, "deleting the pods unprepares their claims: CDI devices gone, the device allocatable and preparable again",
		"kubelet unprepares a claim when no pod on the node uses it any more (pkg/kubelet/cm/dra/manager.go UnprepareResources), and deletes a pod's object only after that call succeeded (pkg/kubelet/kubelet_pods.go PodCouldHaveRunningContainers); api.proto NodeUnprepareResources: the driver frees what prepare set up, its CDI devices included (a spec left behind hands the device to whatever names its ID); a driver that keeps the device marked in use refuses its next claim",
		(*clusterRun).checkUnprepare, "pod.starts"),
	ck("pod.admin-access", Must, "an admin-access claim on a device in use runs",
		"KEP-5018: admin access grants a device that is in use (namespace labeled resource.kubernetes.io/admin-access=true); the driver must not refuse it as double use",
		(*clusterRun).checkAdminAccess, "pod.unprepare"),
	ck("pod.driver-restart", Must, "pods keep running while the driver is restarted (its pod replaced, or a restart hook), and the new one unprepares their claims",
		"kubeletplugin DRAPlugin contract: prepared claims survive a driver restart (rolling update, crash); the kubelet does not restart running containers for it, and it unprepares claims prepared before the restart with the new driver (pkg/kubelet/cm/dra/manager.go UnprepareResources), which must then remove their CDI devices. The kubelet deletes a pod's object only after the driver answered the unprepare of its claims (pkg/kubelet/kubelet_pods.go PodCouldHaveRunningContainers, manager.go PodMightNeedToUnprepareResources), so the devices must be gone once the pods are",
		(*clusterRun).checkDriverRestart, "pod.unprepare"),
	ck("pod.restart-same-edits", Must, "a pod started after the driver's restart, with a claim prepared before it, sees what the claim's first pod sees; deleting both unprepares the claim",
		"kubelet (pkg/kubelet/cm/dra/manager.go prepareResources): a claim already prepared is not prepared again for a new pod, which gets the CDI IDs the driver returned before its restart; the runtime resolves them against the specs as they are now, so after a restart an ID must inject what it did before. Once no pod uses the claim the kubelet unprepares it with the new driver (manager.go unprepareResources), which must remove its CDI devices",
		(*clusterRun).checkRestartSameEdits, "pod.driver-restart"),
	ck("pod.restart-device-names", Must, "the devices that running pods were allocated are still published under their names after the driver's restart",
		"resource.k8s.io/v1 DeviceRequestAllocationResult names a device by pool and name, and the scheduler counts a device as allocated by that name (k8s.io/dynamic-resource-allocation/structured): a device published under a new name looks free and is handed to a second claim while a pod uses it",
		(*clusterRun).checkRestartDeviceNames, "pod.driver-restart"),
	ck("pod.env-names", Should, "the variables the driver gives containers have names a shell can read",
		"POSIX (XBD 8.1) leaves variable names other than [A-Za-z_][A-Za-z0-9_]* to the implementation: the container runtime applies them (CDI ContainerEdits.Env), and the container's first process gets them (read from /proc/<pid>/environ), but a shell (busybox sh, dash) does not pass them on to the programs it starts, so a container whose entry point is a shell script never sees them: advice. Judged on every pod of the run",
		(*clusterRun).checkEnvNames, "pod.starts"),
	ck("pod.health", Should, "device health reaches the pod status",
		"KEP-4680: with feature gate ResourceHealthStatus (beta, on by default since 1.36) the kubelet puts the health the driver streams into status.containerStatuses[].allocatedResourcesStatus (pkg/kubelet/cm/dra/manager.go UpdateAllocatedResourcesStatus); skipped where the status shows none or only Unknown (the driver streams no health, or the feature is off)",
		(*clusterRun).checkHealth),
}

// ClusterChecks returns cluster mode's checks ([RunCluster]) in run
// order.
func ClusterChecks() []Check {
	out := make([]Check, 0, len(clusterCatalogue))
	for _, e := range clusterCatalogue {
		out = append(out, e.Check)
	}
	return out
}

// oneDevice is a claim for one device of the class; with pin, the
// device named dev where an attribute value tells it apart (CEL cannot
// name a device), else whichever the scheduler picks first (its
// first-fit order usually picks dev again once it is free).
func (c *clusterRun) oneDevice(dev string) resourceapi.ResourceClaimSpec {
	req := exactRequest("dev", c.class, 1)
	if sel := c.pinSelector(dev); sel != nil {
		req.Exactly.Selectors = sel
	}
	return claimSpec(req)
}

// pinSelector returns a selector that only dev matches among the
// driver's devices on the node, or nil when no attribute tells it apart.
func (c *clusterRun) pinSelector(dev string) []resourceapi.DeviceSelector {
	d := c.devices[dev]
	if d == nil {
		return nil
	}
	names := make([]string, 0, len(d.Attributes))
	for k := range d.Attributes {
		names = append(names, string(k))
	}
	sort.Strings(names)
	for _, k := range names {
		a := d.Attributes[resourceapi.QualifiedName(k)]
		lit, ok := celLiteral(a)
		if !ok {
			continue
		}
		unique := true
		for other, od := range c.devices {
			if other == dev {
				continue
			}
			if ol, ok := celLiteral(od.Attributes[resourceapi.QualifiedName(k)]); ok && ol == lit {
				unique = false
				break
			}
		}
		if !unique {
			continue
		}
		domain, id, found := strings.Cut(k, "/")
		if !found {
			domain, id = c.cfg.DriverName, k
		}
		return []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
			Expression: fmt.Sprintf("device.attributes[%q][%q] == %s", domain, id, lit)}}}
	}
	return nil
}

// celLiteral renders a scalar attribute value as a CEL literal.
func celLiteral(a resourceapi.DeviceAttribute) (string, bool) {
	switch {
	case a.StringValue != nil:
		return fmt.Sprintf("%q", *a.StringValue), true
	case a.IntValue != nil:
		return fmt.Sprint(*a.IntValue), true
	case a.BoolValue != nil:
		return fmt.Sprint(*a.BoolValue), true
	}
	return "", false
}

func (c *clusterRun) checkStarts(ctx context.Context) outcome {
	if len(c.devices) == 0 {
		return fail("the driver publishes no device for node %s within %s (ResourceSlices with spec.driver=%s, spec.nodeName=%s): %s", c.cfg.NodeName, c.cfg.PublishTimeout, c.cfg.DriverName, c.cfg.NodeName, c.published)
	}
	note := ""
	if c.published != "" {
		note = "; judged on the devices there are: " + c.published
	}
	tpl, err := c.template(ctx, "one", c.oneDevice(""))
	if err != nil {
		return fail("%v", err)
	}
	pr, err := c.start(ctx, "one", tpl)
	if err != nil {
		return fail("%v", err)
	}
	return pass("pod one runs with device %s%s", strings.Join(pr.devices, ", "), note)
}

// tokens splits environment values into the words a device identifier
// could be (lists are comma or space separated).
func tokens(env map[string]string) map[string]bool {
	out := map[string]bool{}
	for _, v := range env {
		for _, t := range strings.FieldsFunc(v, func(r rune) bool { return r == ',' || r == ' ' || r == ';' }) {
			out[t] = true
		}
	}
	return out
}

// identifiers returns the words that name dev and no other device of
// the driver on the node: its name and its string attribute values.
func (c *clusterRun) identifiers(dev string) []string {
	count := map[string]int{}
	own := map[string]bool{}
	for name, d := range c.devices {
		vals := []string{name}
		for _, a := range d.Attributes {
			if a.StringValue != nil && len(*a.StringValue) >= 3 {
				vals = append(vals, *a.StringValue)
			}
		}
		for _, v := range vals {
			count[v]++
			if name == dev {
				own[v] = true
			}
		}
	}
	var out []string
	for v := range own {
		if count[v] == 1 {
			out = append(out, v)
		}
	}
	sort.Strings(out)
	return out
}

// seen reports whether env names dev by one of its identifiers.
func (c *clusterRun) seen(env map[string]string, dev string) bool {
	t := tokens(env)
	for _, id := range c.identifiers(dev) {
		if t[id] {
			return true
		}
	}
	return false
}

// missingEdits returns the K=V the pod's claims' CDI devices set that
// its container does not see, per device.
func missingEdits(pr *podRun, perDevice map[string]map[string]string) []string {
	var out []string
	for id, env := range perDevice {
		for k, v := range env {
			if got, ok := pr.env[k]; !ok || got != v {
				out = append(out, fmt.Sprintf("%s sets %s=%s, the container has %s", id, k, v, shown(pr.env, k)))
			}
		}
	}
	sort.Strings(out)
	return out
}

func shown(env map[string]string, k string) string {
	if v, ok := env[k]; ok {
		return k + "=" + v
	}
	return "no " + k
}

func (c *clusterRun) checkCDIEdits(ctx context.Context) outcome {
	pr := c.pods["one"]
	if pr == nil {
		return skip("pod one did not start (see pod.starts)")
	}
	if pr.edits != nil {
		if miss := missingEdits(pr, pr.edits); len(miss) > 0 {
			return fail("the container of pod one lacks its device's CDI edits: %s", strings.Join(miss, "; "))
		}
		return pass("the container sees the environment of the %d CDI devices the driver defined for its claim", len(pr.edits))
	}
	for _, d := range pr.devices {
		if !c.seen(pr.env, d) {
			return skip("without the node's CDI specs (CDIDirs, ReadCDI) the suite cannot tell what the container should see, and its environment names device %s by none of %q", d, c.identifiers(d))
		}
	}
	return pass("the container's environment names its device %s (CDI specs not readable: judged by the device's name and attributes)", strings.Join(pr.devices, ", "))
}

func (c *clusterRun) checkIsolation(ctx context.Context) outcome {
	one := c.pods["one"]
	if one == nil {
		return skip("pod one did not start (see pod.starts)")
	}
	if len(c.devices) < 2 {
		return skip("the driver publishes one device on the node: no second claim")
	}
	tpl, err := c.template(ctx, "two", c.oneDevice(""))
	if err != nil {
		return fail("%v", err)
	}
	two, err := c.start(ctx, "two", tpl)
	if err != nil {
		return fail("a second pod with its own claim: %v", err)
	}
	var f failures
	if one.edits != nil && two.edits != nil {
		leak := func(from, to *podRun) {
			for _, env := range from.edits {
				for k, v := range env {
					if to.env[k] == v && !setsTo(to.edits, k, v) {
						f.add("pod %s's container has %s=%s, which only pod %s's device edits set", to.name, k, v, from.name)
					}
				}
			}
		}
		leak(one, two)
		leak(two, one)
		return f.outcome("pods one (%s) and two (%s) each see only their own device's edits", strings.Join(one.devices, ","), strings.Join(two.devices, ","))
	}
	for _, d := range two.devices {
		if c.seen(one.env, d) {
			f.add("pod one's container names device %s, which is pod two's", d)
		}
	}
	for _, d := range one.devices {
		if c.seen(two.env, d) {
			f.add("pod two's container names device %s, which is pod one's", d)
		}
	}
	return f.outcome("pods one (%s) and two (%s) name only their own devices (CDI specs not readable: judged by names and attributes)", strings.Join(one.devices, ","), strings.Join(two.devices, ","))
}

func setsTo(edits map[string]map[string]string, k, v string) bool {
	for _, env := range edits {
		if env[k] == v {
			return true
		}
	}
	return false
}

// sharedAttribute returns an attribute that two devices of the driver on
// the node share (for a matchAttribute constraint), or "".
func (c *clusterRun) sharedAttribute() resourceapi.FullyQualifiedName {
	seen := map[string]int{}
	var names []string
	for _, d := range c.devices {
		for k, a := range d.Attributes {
			var v string
			switch {
			case a.StringValue != nil:
				v = "s" + *a.StringValue
			case a.IntValue != nil:
				v = fmt.Sprint("i", *a.IntValue)
			case a.BoolValue != nil:
				v = fmt.Sprint("b", *a.BoolValue)
			default:
				continue
			}
			key := string(k) + "\x00" + v
			if seen[key]++; seen[key] == 2 {
				names = append(names, string(k))
			}
		}
	}
	if len(names) == 0 {
		return ""
	}
	sort.Strings(names)
	n := names[0]
	if !strings.Contains(n, "/") {
		n = c.cfg.DriverName + "/" + n
	}
	return resourceapi.FullyQualifiedName(n)
}

func (c *clusterRun) checkTwoDevices(ctx context.Context) outcome {
	if len(c.devices) < 2 {
		return skip("the driver publishes one device on the node")
	}
	spec := claimSpec(exactRequest("pair", c.class, 2))
	constraint := c.sharedAttribute()
	if constraint != "" {
		spec.Devices.Constraints = []resourceapi.DeviceConstraint{{Requests: []string{"pair"}, MatchAttribute: &constraint}}
	}
	tpl, err := c.template(ctx, "pair", spec)
	if err != nil {
		return fail("%v", err)
	}
	// Two devices may not be free with other pods running.
	c.stopAll(ctx)
	pr, err := c.start(ctx, "pair", tpl)
	if err != nil {
		if constraint != "" {
			return skip("a pod with a claim for two devices (matchAttribute %s) did not run: %v", constraint, err)
		}
		return fail("a pod with a claim for two devices: %v", err)
	}
	with := ""
	if constraint != "" {
		with = fmt.Sprintf(" (matchAttribute %s)", constraint)
	}
	if pr.edits != nil {
		if miss := missingEdits(pr, pr.edits); len(miss) > 0 {
			return fail("the container with devices %s%s lacks some of their CDI edits (the devices overwrite each other's variables? give each device its own names): %s", strings.Join(pr.devices, ", "), with, strings.Join(miss, "; "))
		}
		return pass("the container with devices %s%s sees the environment of all %d CDI devices", strings.Join(pr.devices, ", "), with, len(pr.edits))
	}
	var unseen []string
	for _, d := range pr.devices {
		if !c.seen(pr.env, d) {
			unseen = append(unseen, d)
		}
	}
	switch {
	case len(unseen) == len(pr.devices):
		return skip("without the node's CDI specs the suite cannot tell what the container should see, and its environment names neither device")
	case len(unseen) > 0:
		return fail("the container with devices %s%s names only some of them: not %s (the devices overwrite each other's variables? give each device its own names)", strings.Join(pr.devices, ", "), with, strings.Join(unseen, ", "))
	}
	return pass("the container names both devices %s%s (CDI specs not readable: judged by names and attributes)", strings.Join(pr.devices, ", "), with)
}

// stopAll deletes the suite's running pods (so that their devices are
// free for the next check's pod) and waits until they are gone.
func (c *clusterRun) stopAll(ctx context.Context) {
	names := make([]string, 0, len(c.pods))
	for n := range c.pods {
		names = append(names, n)
	}
	sort.Strings(names)
	_ = c.stop(ctx, names...)
}

func (c *clusterRun) checkRequestNames(ctx context.Context) outcome {
	if len(c.devices) < 2 {
		return skip("the driver publishes one device on the node: no claim with two requests")
	}
	tpl, err := c.template(ctx, "names", claimSpec(exactRequest("a", c.class, 1), exactRequest("b", c.class, 1)))
	if err != nil {
		return fail("%v", err)
	}
	c.stopAll(ctx)
	pr, err := c.startWith(ctx, "names", []corev1.PodResourceClaim{tpl}, []container{
		{name: "a", claims: []corev1.ResourceClaim{{Name: tpl.Name, Request: "a"}}},
		{name: "b", claims: []corev1.ResourceClaim{{Name: tpl.Name, Request: "b"}}},
	})
	if err != nil {
		return fail("a pod whose containers a and b each name one request (a, b) of a claim: %v", err)
	}
	byReq := map[string][]string{}
	for _, cl := range pr.claims {
		for _, a := range ownResults(c.cfg.DriverName, cl) {
			byReq[a.Request] = append(byReq[a.Request], a.Device)
		}
	}
	alloc := fmt.Sprintf("request a: %s, request b: %s", strings.Join(byReq["a"], ","), strings.Join(byReq["b"], ","))
	var f failures
	if ids := distinctEdits(pr.edits); len(ids) > 0 {
		for _, id := range ids {
			var seenBy []string
			for _, ct := range []string{"a", "b"} {
				if contains(pr.envs[ct], pr.edits[id]) {
					seenBy = append(seenBy, ct)
				}
			}
			switch len(seenBy) {
			case 0:
				f.add("neither container sees CDI device %s (%s): the kubelet gives a container the devices whose request names contain the request it names; were they returned with another request's name?", id, envList(pr.edits[id]))
			case 2:
				f.add("both containers see CDI device %s (%s), though each names another request and each request has its own device: it was returned with no request names (the kubelet reads none as all requests) or with both", id, envList(pr.edits[id]))
			}
		}
		return f.outcome("containers a and b each see only the CDI device of their own request (%s)", alloc)
	}
	if len(byReq["a"]) != 1 || len(byReq["b"]) != 1 || byReq["a"][0] == byReq["b"][0] {
		return skip("without the node's CDI specs the suite tells devices apart by name only, and the requests did not get one distinct device each (%s)", alloc)
	}
	named := 0
	for _, ct := range []string{"a", "b"} {
		other := "b"
		if ct == "b" {
			other = "a"
		}
		if c.seen(pr.envs[ct], byReq[ct][0]) {
			named++
		} else {
			f.add("container %s does not name its request's device %s", ct, byReq[ct][0])
		}
		if c.seen(pr.envs[ct], byReq[other][0]) {
			named++
			f.add("container %s names device %s of request %s, which it does not name (request names missing?)", ct, byReq[other][0], other)
		}
	}
	if named == 0 && !c.namesDevices {
		return skip("without the node's CDI specs the suite cannot tell what the containers should see, and neither names a device of the claim (%s)", alloc)
	}
	return f.outcome("containers a and b each name only their own request's device (%s; CDI specs not readable: judged by names and attributes)", alloc)
}

// distinctEdits returns the CDI devices of edits, sorted, whose
// environment another one's does not contain (those can be told apart in
// a container).
func distinctEdits(edits map[string]map[string]string) []string {
	var out []string
	for id, env := range edits {
		if len(env) == 0 {
			continue
		}
		distinct := true
		for other, oenv := range edits {
			if other != id && contains(oenv, env) {
				distinct = false
				break
			}
		}
		if distinct {
			out = append(out, id)
		}
	}
	sort.Strings(out)
	return out
}

// contains reports whether env has every variable of sub, with its value.
func contains(env, sub map[string]string) bool {
	for k, v := range sub {
		if got, ok := env[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// envList shows an environment as sorted K=V.
func envList(env map[string]string) string {
	out := make([]string, 0, len(env))
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return strings.Join(out, " ")
}

func (c *clusterRun) checkTwoClaims(ctx context.Context) outcome {
	if len(c.devices) < 2 {
		return skip("the driver publishes one device on the node: no second claim")
	}
	first, err := c.template(ctx, "claims-a", c.oneDevice(""))
	if err != nil {
		return fail("%v", err)
	}
	second, err := c.template(ctx, "claims-b", c.oneDevice(""))
	if err != nil {
		return fail("%v", err)
	}
	first.Name, second.Name = "a", "b"
	c.stopAll(ctx)
	pr, err := c.start(ctx, "claims", first, second)
	if err != nil {
		return fail("a pod with two claims of the driver: %v", err)
	}
	if len(pr.claims) != 2 {
		return fail("pod claims runs with %d claims, want 2", len(pr.claims))
	}
	if pr.edits != nil {
		// A variable that both claims' devices set, to different
		// values, is pod.two-claims-env's matter: the container sees
		// one of them either way.
		collide := collisions(pr.edits)
		c.claimCollisions = []string{}
		for _, k := range collide {
			c.claimCollisions = append(c.claimCollisions, fmt.Sprintf("%s (the container has %s)", k, shown(pr.env, k)))
		}
		perDevice := map[string]map[string]string{}
		for id, env := range pr.edits {
			perDevice[id] = map[string]string{}
			for k, v := range env {
				if !slices.Contains(collide, k) {
					perDevice[id][k] = v
				}
			}
		}
		if miss := missingEdits(pr, perDevice); len(miss) > 0 {
			return fail("the container with two claims (devices %s) lacks some of their CDI edits: %s", strings.Join(pr.devices, ", "), strings.Join(miss, "; "))
		}
		return pass("the container with two claims (devices %s) sees the environment of all %d CDI devices (variables both set aside: see pod.two-claims-env)", strings.Join(pr.devices, ", "), len(pr.edits))
	}
	var unseen []string
	for _, d := range pr.devices {
		if !c.seen(pr.env, d) {
			unseen = append(unseen, d)
		}
	}
	if len(unseen) > 0 && (len(unseen) < len(pr.devices) || c.namesDevices) {
		return fail("the container with two claims (devices %s) does not name %s (CDI specs not readable: judged by names and attributes)", strings.Join(pr.devices, ", "), strings.Join(unseen, ", "))
	}
	return pass("a pod with two claims (devices %s) runs (CDI specs not readable: judged by names and attributes where the environment shows them)", strings.Join(pr.devices, ", "))
}

// collisions returns the variables that two CDI devices of edits set to
// different values, sorted.
func collisions(edits map[string]map[string]string) []string {
	values := map[string]map[string]bool{}
	for _, env := range edits {
		for k, v := range env {
			if values[k] == nil {
				values[k] = map[string]bool{}
			}
			values[k][v] = true
		}
	}
	var out []string
	for k, vs := range values {
		if len(vs) > 1 {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

func (c *clusterRun) checkTwoClaimsEnv(ctx context.Context) outcome {
	switch {
	case c.claimCollisions == nil:
		return skip("needs pod claims with the node's CDI specs readable (see pod.two-claims)")
	case len(c.claimCollisions) > 0:
		return fail("the devices of the two claims of pod claims set the same variables to different values, so its container sees only one claim's: %s; give each device its own variable names (a claim-wide variable is right for a container with one claim only)", strings.Join(c.claimCollisions, "; "))
	}
	return pass("the devices of the two claims of pod claims set no variable to two values")
}

func (c *clusterRun) checkSharedClaim(ctx context.Context) outcome {
	cl, err := c.claim(ctx, "shared", c.oneDevice(""))
	if err != nil {
		return fail("%v", err)
	}
	c.stopAll(ctx)
	s1, err := c.start(ctx, "shared-1", cl)
	if err != nil {
		return fail("the first pod of a shared claim: %v", err)
	}
	s2, err := c.start(ctx, "shared-2", cl)
	if err != nil {
		return fail("the second pod of a shared claim: %v", err)
	}
	var f failures
	if s1.edits != nil {
		ids := make([]string, 0, len(s1.edits))
		for id := range s1.edits {
			ids = append(ids, id)
		}
		sort.Strings(ids)
		for _, id := range ids {
			keys := make([]string, 0, len(s1.edits[id]))
			for k := range s1.edits[id] {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, k := range keys {
				v := s1.edits[id][k]
				first, second := s1.env[k] == v, s2.env[k] == v
				if !first || !second {
					f.add("CDI device %s of the claim sets %s=%s; the first pod has %s, the second %s", id, k, v, shown(s1.env, k), shown(s2.env, k))
				}
			}
		}
		return f.outcome("both pods see the %d CDI devices of the shared claim (device %s)", len(s1.edits), strings.Join(s1.devices, ","))
	}
	for _, d := range s1.devices {
		if c.seen(s1.env, d) != c.seen(s2.env, d) {
			f.add("only one of the pods names the shared device %s", d)
		}
	}
	return f.outcome("both pods of the shared claim run with device %s", strings.Join(s1.devices, ","))
}

func (c *clusterRun) checkUnprepare(ctx context.Context) outcome {
	var names []string
	var made []string
	var devs []string
	for n, pr := range c.pods {
		names = append(names, n)
		made = append(made, pr.made.devices...)
		devs = append(devs, pr.devices...)
	}
	if len(names) == 0 {
		return skip("no pod of the suite runs")
	}
	sort.Strings(names)
	if err := c.stop(ctx, names...); err != nil {
		return fail("%v", err)
	}
	made = append(made, c.stoppedMade...) // and those of pods deleted before
	var f failures
	if len(made) > 0 {
		if left := c.cdiLeft(ctx, made); len(left) > 0 {
			f.add("CDI devices prepared for the deleted pods are still defined after the driver answered their unprepare (the pods are gone): %s; unprepare must remove them", strings.Join(limit(left, 10), ", "))
		}
	}
	// The device of pod one, asked for by name, must run again.
	dev := ""
	if len(devs) > 0 {
		sort.Strings(devs)
		dev = devs[0]
	}
	if dev == "" {
		return f.outcome("pods %s deleted", strings.Join(names, ", "))
	}
	tpl, err := c.template(ctx, "again", c.oneDevice(dev))
	if err != nil {
		return fail("%v", err)
	}
	again, err := c.start(ctx, "again", tpl)
	if err != nil {
		f.add("a new pod for device %s, freed by deleting the pods, does not run: %v", dev, err)
		return f.outcome("")
	}
	if len(again.devices) > 0 {
		c.freed = again.devices[0]
	}
	pinned := ""
	if c.pinSelector(dev) == nil {
		pinned = " (no attribute tells the device apart: the scheduler picked it)"
	}
	return f.outcome("pods %s deleted, their CDI devices (%d) gone; a new pod runs on device %s%s", strings.Join(names, ", "), len(made), c.freed, pinned)
}

// unprepareGrace is how long after the driver answered an unprepare
// (its pods' objects are gone) the suite lets it take for the CDI
// devices to disappear before it names those left: a driver that removes
// them just after answering is not blamed for a file system's delay.
const unprepareGrace = 2 * time.Second

// cdiLeft returns those of the CDI devices made that are still defined
// on the node. Call it once the pods that used them are gone: the
// kubelet keeps a deleted pod's object until the driver answered the
// unprepare of its claims (pkg/kubelet/kubelet_pods.go
// PodCouldHaveRunningContainers, pkg/kubelet/cm/dra/manager.go
// PodMightNeedToUnprepareResources), so there is nothing to wait for
// but unprepareGrace.
func (c *clusterRun) cdiLeft(ctx context.Context, made []string) []string {
	if len(made) == 0 {
		return nil
	}
	deadline := time.Now().Add(unprepareGrace)
	for {
		left, _ := c.socket.leftover(ctx, cdiMade{devices: made})
		if len(left) == 0 || time.Now().After(deadline) || ctx.Err() != nil {
			return left
		}
		time.Sleep(250 * time.Millisecond)
	}
}

func (c *clusterRun) checkFirstAvailable(ctx context.Context) outcome {
	spec := resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
		Name: "fa",
		FirstAvailable: []resourceapi.DeviceSubRequest{
			// No device matches: the scheduler must fall back to "one".
			{Name: "none", DeviceClassName: c.class, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1,
				Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: `device.driver == "no-such-driver.conformance.drakit.invalid"`}}}},
			{Name: "one", DeviceClassName: c.class, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1},
		},
	}}}}
	tpl, err := c.template(ctx, "first", spec)
	if err != nil {
		return fail("%v", err)
	}
	c.stopAll(ctx)
	pr, err := c.start(ctx, "first", tpl)
	if err != nil {
		return fail("a pod with a firstAvailable claim: %v", err)
	}
	var reqs []string
	for _, cl := range pr.claims {
		for _, a := range ownResults(c.cfg.DriverName, cl) {
			reqs = append(reqs, a.Request)
		}
	}
	if pr.edits != nil {
		if miss := missingEdits(pr, pr.edits); len(miss) > 0 {
			return fail("the container lacks its device's CDI edits (request %s): %s", strings.Join(reqs, ","), strings.Join(miss, "; "))
		}
	}
	return pass("runs with %s from request %s", strings.Join(pr.devices, ","), strings.Join(reqs, ","))
}

func (c *clusterRun) checkAdminAccess(ctx context.Context) outcome {
	if c.freed == "" || c.pods["again"] == nil {
		return skip("needs pod again on a known device (see pod.unprepare)")
	}
	req := exactRequest("admin", c.class, 1)
	req.Exactly.AdminAccess = ptr.To(true)
	req.Exactly.Selectors = c.pinSelector(c.freed)
	tpl, err := c.template(ctx, "admin", claimSpec(req))
	if err != nil {
		return fail("%v", err)
	}
	pr, err := c.start(ctx, "admin", tpl)
	if err != nil {
		pod, gerr := c.cfg.Client.CoreV1().Pods(c.ns).Get(ctx, "admin", metav1.GetOptions{})
		if gerr == nil && pod.Spec.NodeName == "" {
			_ = c.stop(ctx, "admin")
			return skip("the scheduler did not allocate an admin-access claim on device %s in use (DRAAdminAccess off?): %v", c.freed, err)
		}
		_ = c.stop(ctx, "admin")
		return fail("an admin-access claim on device %s, in use by pod again, was allocated but the pod does not run: %v", c.freed, err)
	}
	inUse := "in use by pod again"
	if len(pr.devices) != 1 || pr.devices[0] != c.freed {
		inUse = fmt.Sprintf("pod again has %s (no attribute tells it apart, so the claim could not pin it)", c.freed)
	}
	return pass("pod admin runs with admin access to %s; %s", strings.Join(pr.devices, ","), inUse)
}

func (c *clusterRun) checkDriverRestart(ctx context.Context) outcome {
	hook := c.cfg.RestartDriver != nil || len(c.cfg.RestartCommand) > 0
	if c.cfg.DriverPodSelector == "" && !hook {
		return skip("needs a way to restart the driver: its pod (ClusterConfig.DriverNamespace and DriverPodSelector, --driver-namespace, --driver-pod-selector), or, for a driver that does not run as a pod, ClusterConfig.RestartDriver or RestartCommand (--restart-command)")
	}
	if len(c.pods) == 0 {
		return skip("no pod of the suite runs")
	}
	pods := c.cfg.Client.CoreV1().Pods(c.cfg.DriverNamespace)
	var old []corev1.Pod
	if !hook {
		list, err := pods.List(ctx, metav1.ListOptions{LabelSelector: c.cfg.DriverPodSelector, FieldSelector: "spec.nodeName=" + c.cfg.NodeName})
		if err != nil || len(list.Items) == 0 {
			return skip("no driver pod on the node matches %s in namespace %s (%v)", c.cfg.DriverPodSelector, c.cfg.DriverNamespace, err)
		}
		old = list.Items
	}
	seen := &restartSeen{}
	c.restart = seen
	// A pod with a claim of its own (not from a template), so that a
	// second pod can use the claim after the restart
	// (pod.restart-same-edits).
	if keep, err := c.claim(ctx, "keep", c.oneDevice("")); err != nil {
		seen.keepErr = err
	} else if seen.keep, err = c.start(ctx, "keep", keep); err != nil {
		seen.keepErr = err
		_ = c.stop(ctx, "keep")
	}
	var running []*podRun
	for _, pr := range c.pods {
		running = append(running, pr)
		for _, cl := range pr.claims {
			for _, a := range ownResults(c.cfg.DriverName, cl) {
				seen.allocated = append(seen.allocated, a.Pool+"/"+a.Device)
			}
		}
	}
	sort.Slice(running, func(i, j int) bool { return running[i].name < running[j].name })
	sort.Strings(seen.allocated)
	seen.allocated = slices.Compact(seen.allocated)
	if slices, err := c.nodeSlices(ctx); err == nil {
		seen.marks = marksOf(slices)
	}
	replaced := ""
	if hook {
		if err := c.restartDriver(ctx); err != nil {
			c.restart = nil
			if isHookError(err) {
				return skip("restarts not judged: %v", err)
			}
			return fail("%v", err)
		}
		seen.next, seen.started = "the restart hook's process", time.Now()
		replaced = "driver restarted (kill -9 and start) with " + c.restartHow()
	} else {
		next, err := c.replaceDriverPod(ctx, old, seen)
		if err != nil {
			return fail("%v", err)
		}
		replaced = fmt.Sprintf("driver pod %s replaced by %s", old[0].Name, next)
	}
	var f failures
	for _, pr := range running {
		p, err := c.cfg.Client.CoreV1().Pods(c.ns).Get(ctx, pr.name, metav1.GetOptions{})
		if err != nil {
			f.add("pod %s: %v", pr.name, err)
			continue
		}
		if p.Status.Phase != corev1.PodRunning {
			f.add("pod %s is %s after the driver was restarted: %s", pr.name, p.Status.Phase, podstatus.Why(p))
		}
		for _, s := range p.Status.ContainerStatuses {
			if s.RestartCount > 0 {
				f.add("pod %s's container restarted %d times", pr.name, s.RestartCount)
			}
		}
	}
	// The new driver must unprepare what the old one prepared: every pod
	// that ran through the restart is deleted (the kubelet removes a
	// pod's object once the driver answered the unprepare of its claims:
	// pkg/kubelet/kubelet_pods.go PodCouldHaveRunningContainers), and
	// the CDI devices their claims made must be gone. Pod keep stays
	// for pod.restart-same-edits, which judges its claim.
	later := c.planned["pod.restart-same-edits"] && seen.keep != nil
	var names, made []string
	for _, pr := range running {
		if later && pr == seen.keep {
			continue
		}
		names = append(names, pr.name)
		made = append(made, pr.made.devices...)
	}
	if err := c.stop(ctx, names...); err != nil {
		f.add("%v", err)
	}
	if left := c.cdiLeft(ctx, made); len(left) > 0 {
		f.add("CDI devices prepared before the restart are still defined after their pods (%s) were deleted, and so unprepared by the new driver: %s; the new driver must unprepare claims the old one prepared (persist them)", strings.Join(names, ", "), strings.Join(limit(left, 10), ", "))
	}
	again := ""
	if c.freed != "" {
		tpl, err := c.template(ctx, "after-restart", c.oneDevice(c.freed))
		if err == nil {
			_, err = c.start(ctx, "after-restart", tpl)
		}
		if err != nil {
			f.add("after the restart, a new pod for device %s (its pod deleted after the restart) does not run: %v; the new driver must unprepare claims the old one prepared", c.freed, err)
		}
		again = fmt.Sprintf("; device %s prepared again by the new driver", c.freed)
	}
	return f.outcome("%s; %d pods kept running; their claims unprepared by the new driver (%d CDI devices gone)%s", replaced, len(running), len(made), again)
}

// restartDriver runs ClusterConfig.RestartDriver or RestartCommand,
// bounded by PodTimeout (a hook that fails or does not return is a
// *hookError).
func (c *clusterRun) restartDriver(ctx context.Context) error {
	if c.cfg.RestartDriver != nil {
		return runHookFunc(ctx, "the restart hook (ClusterConfig.RestartDriver)", c.cfg.RestartDriver, c.cfg.PodTimeout)
	}
	return runHook(ctx, "the restart command", c.cfg.RestartCommand, c.cfg.PodTimeout)
}

// restartHow names the restart hook, for messages.
func (c *clusterRun) restartHow() string {
	if c.cfg.RestartDriver != nil {
		return "ClusterConfig.RestartDriver"
	}
	return fmt.Sprintf("%q", c.cfg.RestartCommand)
}

// replaceDriverPod deletes the driver's pods old with grace period 0 and
// waits until a new one on the node is ready; it returns its name.
func (c *clusterRun) replaceDriverPod(ctx context.Context, old []corev1.Pod, seen *restartSeen) (string, error) {
	pods := c.cfg.Client.CoreV1().Pods(c.cfg.DriverNamespace)
	gone := map[string]bool{}
	for _, p := range old {
		if err := pods.Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil && !apierrors.IsNotFound(err) {
			return "", fmt.Errorf("delete driver pod %s: %w", p.Name, err)
		}
		gone[string(p.UID)] = true
	}
	deadline := time.Now().Add(c.cfg.PodTimeout)
	for {
		l, err := pods.List(ctx, metav1.ListOptions{LabelSelector: c.cfg.DriverPodSelector, FieldSelector: "spec.nodeName=" + c.cfg.NodeName})
		if err == nil {
			for _, p := range l.Items {
				if gone[string(p.UID)] || p.DeletionTimestamp != nil {
					continue
				}
				for _, cond := range p.Status.Conditions {
					if cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue {
						seen.next, seen.started = p.Name, cond.LastTransitionTime.Time
						return p.Name, nil
					}
				}
			}
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("no new ready driver pod on the node %s after deleting %s", c.cfg.PodTimeout, old[0].Name)
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func (c *clusterRun) checkRestartSameEdits(ctx context.Context) outcome {
	seen := c.restart
	if seen == nil {
		return skip("the driver's pod was not replaced (see pod.driver-restart)")
	}
	if seen.keep == nil {
		return skip("pod keep, with a claim of its own, did not start before the restart: %v", seen.keepErr)
	}
	name := *seen.keep.pod.Spec.ResourceClaims[0].ResourceClaimName
	pr, err := c.start(ctx, "keep-2", corev1.PodResourceClaim{Name: "claim", ResourceClaimName: &name})
	if err != nil {
		return fail("a second pod for claim %s, prepared before the driver's restart, does not run: %v", name, err)
	}
	var f failures
	keys := map[string]bool{}
	for k := range seen.keep.env {
		keys[k] = true
	}
	for k := range pr.env {
		keys[k] = true
	}
	var sorted []string
	for k := range keys {
		if k != "HOSTNAME" {
			sorted = append(sorted, k)
		}
	}
	sort.Strings(sorted)
	for _, k := range sorted {
		if before, after := shown(seen.keep.env, k), shown(pr.env, k); before != after {
			f.add("%s in pod keep (started before the restart), %s in pod keep-2 (after)", before, after)
		}
	}
	var problems failures
	if len(f) > 0 {
		problems.add("pods keep and keep-2 use one claim (device %s) but their containers differ: %s; the kubelet did not prepare the claim again, so the driver's CDI specs now inject something else for the same CDI IDs (keep what an ID injects across restarts)", strings.Join(seen.keep.devices, ","), strings.Join(f, "; "))
	}
	// The claim was prepared before the restart: once both pods are
	// gone the new driver must have unprepared it (pod.driver-restart
	// left pod keep running for this check).
	if err := c.stop(ctx, "keep", "keep-2"); err != nil {
		problems.add("%v", err)
	} else if left := c.cdiLeft(ctx, seen.keep.made.devices); len(left) > 0 {
		problems.add("CDI devices of claim %s, prepared before the restart, are still defined after pods keep and keep-2 were deleted, and so the claim unprepared by the new driver: %s; the new driver must unprepare claims the old one prepared (persist them)", name, strings.Join(limit(left, 10), ", "))
	}
	return problems.outcome("pod keep-2, started after the restart with claim %s (device %s), sees what pod keep saw before it; deleting both unprepared the claim", name, strings.Join(seen.keep.devices, ","))
}

func (c *clusterRun) checkRestartDeviceNames(ctx context.Context) outcome {
	seen := c.restart
	if seen == nil || seen.next == "" {
		return skip("the driver's pod was not replaced (see pod.driver-restart)")
	}
	if len(seen.allocated) == 0 {
		return skip("no pod that ran through the restart has a device of the driver")
	}
	// Judge the new process's slices once the API server shows them: a
	// write to the driver's slices for the node since the restart, with
	// every pool complete. A driver that publishes the same slices may
	// write nothing; after PublishTimeout it is judged on the slices as
	// they are.
	deadline := seen.started.Add(c.cfg.PublishTimeout)
	var devices map[string]bool
	note := ""
	for {
		slices, err := c.nodeSlices(ctx)
		if err == nil {
			ps := slicepool.Group(slices)
			complete := len(slices) > 0 && len(slicepool.Incomplete(ps)) == 0
			wrote := writtenSince(seen.marks, slices)
			if complete && wrote || time.Now().After(deadline) {
				devices = map[string]bool{}
				for _, p := range ps {
					for _, sl := range p.Slices {
						for _, d := range sl.Spec.Devices {
							devices[sl.Spec.Pool.Name+"/"+d.Name] = true
						}
					}
				}
				if wrote {
					note = fmt.Sprintf(" (the new process's slices: its write seen %.1f s after it started)", time.Since(seen.started).Seconds())
				} else {
					note = fmt.Sprintf("; not republished within %s: the new process wrote no ResourceSlice for the node in that time after it started, so this is judged on the slices from before the restart (a driver that publishes the same devices may leave them as they are)", c.cfg.PublishTimeout)
				}
				if !complete {
					note += "; pools incomplete: " + strings.Join(slicepool.Incomplete(ps), "; ")
				}
				break
			}
		}
		select {
		case <-ctx.Done():
			return skip("run canceled")
		case <-time.After(250 * time.Millisecond):
		}
	}
	var missing []string
	for _, d := range seen.allocated {
		if !devices[d] {
			missing = append(missing, d)
		}
	}
	if len(missing) > 0 {
		return fail("after the driver was restarted (%s), its slices no longer publish %s, allocated to pods that ran through the restart: the scheduler now sees those devices under other names as free and can give them to another claim while a pod uses them (publish stable device names)%s", seen.next, strings.Join(limit(missing, 10), ", "), note)
	}
	return pass("the %d devices allocated to pods that ran through the restart are still published under their names%s", len(seen.allocated), note)
}

func (c *clusterRun) checkHealth(ctx context.Context) outcome {
	var pr *podRun
	for _, p := range c.pods {
		pr = p
		break
	}
	if pr == nil {
		return skip("no pod of the suite runs")
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		p, err := c.cfg.Client.CoreV1().Pods(c.ns).Get(ctx, pr.name, metav1.GetOptions{})
		if err != nil {
			return skip("%v", err)
		}
		var seen []string
		known := false
		for _, s := range p.Status.ContainerStatuses {
			for _, rs := range s.AllocatedResourcesStatus {
				for _, r := range rs.Resources {
					seen = append(seen, fmt.Sprintf("%s %s", r.ResourceID, r.Health))
					known = known || r.Health != corev1.ResourceHealthStatusUnknown
				}
			}
		}
		if known {
			return pass("pod %s's status shows device health: %s", pr.name, strings.Join(seen, ", "))
		}
		if time.Now().After(deadline) {
			if len(seen) > 0 {
				return skip("pod %s's status shows only Unknown device health within 10 s (%s): the driver streams no health for its devices (no health service, or it stopped reporting; a pod cannot tell which)", pr.name, strings.Join(seen, ", "))
			}
			return skip("pod %s's status shows no device health within 10 s: the cluster has feature gate ResourceHealthStatus off", pr.name)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

func (c *clusterRun) checkEnvNames(ctx context.Context) outcome {
	if len(c.oddNames) == 0 {
		if c.shellEnvOnly {
			return skip("the containers' environment was read from their shell (the image has no od to print /proc/<pid>/environ), which passes on only names it can read")
		}
		return pass("every variable the run's containers got has a name a shell can read")
	}
	names := make([]string, 0, len(c.oddNames))
	for k := range c.oddNames {
		names = append(names, k)
	}
	sort.Strings(names)
	var f failures
	for _, k := range names {
		dropped := ""
		if c.shellDropped[k] {
			dropped = "; the container's shell did not pass it on"
		}
		f.add("pods %s got %s%s", strings.Join(limit(c.oddNames[k], 3), ", "), k, dropped)
	}
	f.add("the container runtime applies a variable of any name, but a shell (busybox sh, dash) passes on only [A-Za-z_][A-Za-z0-9_]*: a container whose entry point is a shell script never sees the others (use letters, digits and '_', e.g. '_' for the '-' of a UID)")
	return f.outcome("")
}
