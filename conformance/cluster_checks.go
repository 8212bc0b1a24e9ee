package conformance

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// clusterEntry is one check of cluster mode.
type clusterEntry struct {
	Check
	run func(c *clusterRun, ctx context.Context) outcome
}

func ck(id string, level Level, desc, rule string, run func(*clusterRun, context.Context) outcome) clusterEntry {
	cat, _, _ := strings.Cut(id, ".")
	return clusterEntry{Check: Check{ID: id, Category: cat, Description: desc, Rule: rule, Level: level}, run: run}
}

// clusterCatalogue lists cluster mode's checks in run order. Later checks
// use the pods earlier ones started, and skip when those did not start.
var clusterCatalogue = []clusterEntry{
	ck("pod.starts", Must, "a pod with a claim from a ResourceClaimTemplate runs on the node",
		"kubelet (pkg/kubelet/cm/dra/manager.go PrepareResources): a pod's containers start only once the driver prepared every claim of the pod",
		(*clusterRun).checkStarts),
	ck("pod.cdi-edits", Must, "the container sees its device's CDI edits (environment)",
		"kubelet hands the CDI IDs from NodePrepareResources to the runtime (pkg/kubelet/cm/dra/manager.go GetResources); the runtime applies their edits to the container (CDI spec). Judged by the spec's environment where the node's CDI specs are readable, else by the device's name or attribute values in the environment",
		(*clusterRun).checkCDIEdits),
	ck("pod.isolation", Must, "a container sees none of another claim's device edits",
		"kubelet: a container gets the CDI devices of its own claims only (pkg/kubelet/cm/dra/claiminfo.go cdiDevicesAsList); edits of another claim's device hand it a device the scheduler gave someone else",
		(*clusterRun).checkIsolation),
	ck("pod.two-devices", Must, "a container with two devices of one claim sees both devices' edits",
		"container runtime (CDI library): a variable set by two devices keeps the later value, so a container with both loses the first device's setting; with a matchAttribute constraint where two devices share an attribute",
		(*clusterRun).checkTwoDevices),
	ck("pod.shared-claim", Must, "a claim shared by two pods gives both the same device edits",
		"kubelet: a claim reserved for several pods is prepared once and its CDI devices go to every pod that uses it (pkg/kubelet/cm/dra/manager.go)",
		(*clusterRun).checkSharedClaim),
	ck("pod.unprepare", Must, "deleting the pods unprepares their claims: CDI devices gone, the device allocatable and preparable again",
		"kubelet unprepares a claim when no pod on the node uses it any more (pkg/kubelet/cm/dra/manager.go UnprepareResources); a driver that keeps the device marked in use refuses its next claim",
		(*clusterRun).checkUnprepare),
	ck("pod.first-available", Must, "a claim with firstAvailable subrequests runs with the subrequest the scheduler chose",
		"KEP-4816: the kubelet matches the device to containers by the base request name (pkg/kubelet/cm/dra/claiminfo.go)",
		(*clusterRun).checkFirstAvailable),
	ck("pod.admin-access", Must, "an admin-access claim on a device in use runs",
		"KEP-5018: admin access grants a device that is in use (namespace labeled resource.kubernetes.io/admin-access=true); the driver must not refuse it as double use",
		(*clusterRun).checkAdminAccess),
	ck("pod.driver-restart", Must, "pods keep running while the driver's pod is replaced, and the new one unprepares their claims",
		"kubeletplugin DRAPlugin contract: prepared claims survive a driver restart (rolling update, crash); the kubelet does not restart running containers for it",
		(*clusterRun).checkDriverRestart),
	ck("pod.health", Should, "device health reaches the pod status",
		"KEP-4680: with feature gate ResourceHealthStatus the kubelet puts the health the driver streams into status.containerStatuses[].allocatedResourcesStatus; skipped where the cluster shows none",
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
		return fail("the driver publishes no device for node %s (ResourceSlices with spec.driver=%s, spec.nodeName=%s)", c.cfg.NodeName, c.cfg.DriverName, c.cfg.NodeName)
	}
	tpl, err := c.template(ctx, "one", c.oneDevice(""))
	if err != nil {
		return fail("%v", err)
	}
	pr, err := c.start(ctx, "one", tpl)
	if err != nil {
		return fail("%v", err)
	}
	return pass("pod one runs with device %s", strings.Join(pr.devices, ", "))
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
	// Two devices may not be free with pods one and two running.
	_ = c.stop(ctx, "two")
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

func (c *clusterRun) checkSharedClaim(ctx context.Context) outcome {
	cl, err := c.claim(ctx, "shared", c.oneDevice(""))
	if err != nil {
		return fail("%v", err)
	}
	_ = c.stop(ctx, "pair")
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
		for _, env := range s1.edits {
			for k, v := range env {
				if s2.env[k] != v {
					f.add("the claim's device edits set %s=%s; the first pod sees it, the second has %s", k, v, shown(s2.env, k))
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
			f.add("CDI devices prepared for the deleted pods are still defined %s after they were deleted: %s; unprepare must remove them", c.cfg.PodTimeout, strings.Join(limit(left, 10), ", "))
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

// cdiLeft waits until none of the CDI devices made is defined on the
// node (the kubelet unprepares once it cleaned the pods up), up to
// PodTimeout, and returns those still defined.
func (c *clusterRun) cdiLeft(ctx context.Context, made []string) []string {
	deadline := time.Now().Add(c.cfg.PodTimeout)
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
	if c.cfg.DriverPodSelector == "" {
		return skip("needs the driver's pod (ClusterConfig.DriverNamespace and DriverPodSelector, --driver-namespace, --driver-pod-selector)")
	}
	var running []*podRun
	for _, pr := range c.pods {
		running = append(running, pr)
	}
	if len(running) == 0 {
		return skip("no pod of the suite runs")
	}
	pods := c.cfg.Client.CoreV1().Pods(c.cfg.DriverNamespace)
	list, err := pods.List(ctx, metav1.ListOptions{LabelSelector: c.cfg.DriverPodSelector, FieldSelector: "spec.nodeName=" + c.cfg.NodeName})
	if err != nil || len(list.Items) == 0 {
		return skip("no driver pod on the node matches %s in namespace %s (%v)", c.cfg.DriverPodSelector, c.cfg.DriverNamespace, err)
	}
	for _, p := range list.Items {
		if err := pods.Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil && !apierrors.IsNotFound(err) {
			return fail("delete driver pod %s: %v", p.Name, err)
		}
	}
	old := map[string]bool{}
	for _, p := range list.Items {
		old[string(p.UID)] = true
	}
	// The next pod must be ready.
	deadline := time.Now().Add(c.cfg.PodTimeout)
	var next string
	for next == "" {
		l, err := pods.List(ctx, metav1.ListOptions{LabelSelector: c.cfg.DriverPodSelector, FieldSelector: "spec.nodeName=" + c.cfg.NodeName})
		if err == nil {
			for _, p := range l.Items {
				if old[string(p.UID)] || p.DeletionTimestamp != nil {
					continue
				}
				for _, cond := range p.Status.Conditions {
					if cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue {
						next = p.Name
					}
				}
			}
		}
		if next == "" && time.Now().After(deadline) {
			return fail("no new ready driver pod on the node %s after deleting %s", c.cfg.PodTimeout, list.Items[0].Name)
		}
		if next == "" {
			time.Sleep(250 * time.Millisecond)
		}
	}
	var f failures
	for _, pr := range running {
		p, err := c.cfg.Client.CoreV1().Pods(c.ns).Get(ctx, pr.name, metav1.GetOptions{})
		if err != nil {
			f.add("pod %s: %v", pr.name, err)
			continue
		}
		if p.Status.Phase != corev1.PodRunning {
			f.add("pod %s is %s after the driver's pod was replaced: %s", pr.name, p.Status.Phase, podWhy(p))
		}
		for _, s := range p.Status.ContainerStatuses {
			if s.RestartCount > 0 {
				f.add("pod %s's container restarted %d times", pr.name, s.RestartCount)
			}
		}
	}
	// The new driver must unprepare what the old one prepared, and
	// prepare the device again.
	if again := c.pods["again"]; c.freed != "" && again != nil {
		made := again.made.devices
		if admin := c.pods["admin"]; admin != nil {
			made = append(made, admin.made.devices...)
		}
		_ = c.stop(ctx, "admin")
		if err := c.stop(ctx, "again"); err != nil {
			f.add("%v", err)
		}
		if len(made) > 0 {
			if left := c.cdiLeft(ctx, made); len(left) > 0 {
				f.add("CDI devices prepared before the restart are still defined after their pods were deleted: %s; the new driver must unprepare claims the old one prepared (persist them)", strings.Join(limit(left, 10), ", "))
			}
		}
		tpl, err := c.template(ctx, "after-restart", c.oneDevice(c.freed))
		if err == nil {
			if _, err := c.start(ctx, "after-restart", tpl); err != nil {
				f.add("after the restart, a new pod for device %s (its pod deleted after the restart) does not run: %v; the new driver must unprepare claims the old one prepared", c.freed, err)
			}
		}
	}
	return f.outcome("driver pod %s replaced by %s; %d pods kept running; device %s unprepared and prepared again by the new driver", list.Items[0].Name, next, len(running), c.freed)
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
		for _, s := range p.Status.ContainerStatuses {
			for _, rs := range s.AllocatedResourcesStatus {
				for _, r := range rs.Resources {
					seen = append(seen, fmt.Sprintf("%s %s", r.ResourceID, r.Health))
				}
			}
		}
		if len(seen) > 0 {
			return pass("pod %s's status shows device health: %s", pr.name, strings.Join(seen, ", "))
		}
		if time.Now().After(deadline) {
			return skip("pod %s's status shows no device health within 10 s: the cluster has feature gate ResourceHealthStatus off, or the driver streams no health", pr.name)
		}
		time.Sleep(500 * time.Millisecond)
	}
}
