package conformance

import (
	"context"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/dynamic-resource-allocation/structured"

	"github.com/drakit/drakit/internal/slicepool"
)

// sliceFilter reports whether a slice is relevant for the node.
func (r *runner) sliceRelevant(sl *resourceapi.ResourceSlice) bool {
	if sl.Spec.NodeName != nil {
		return *sl.Spec.NodeName == r.cfg.NodeName
	}
	if sl.Spec.PerDeviceNodeSelection != nil && *sl.Spec.PerDeviceNodeSelection {
		return true
	}
	allNodes := sl.Spec.AllNodes != nil && *sl.Spec.AllNodes
	ok, err := structured.NodeMatches(allocFeatures, r.sched.node, "", allNodes, sl.Spec.NodeSelector)
	return err == nil && ok
}

// deviceRelevant reports whether a device of a relevant slice can be
// used on the node (devices of slices with per-device node selection).
func (r *runner) deviceRelevant(sl *resourceapi.ResourceSlice, d *resourceapi.Device) bool {
	if sl.Spec.PerDeviceNodeSelection == nil || !*sl.Spec.PerDeviceNodeSelection {
		return true
	}
	if d.NodeName != nil {
		return *d.NodeName == r.cfg.NodeName
	}
	allNodes := d.AllNodes != nil && *d.AllNodes
	ok, err := structured.NodeMatches(allocFeatures, r.sched.node, "", allNodes, d.NodeSelector)
	return err == nil && ok
}

func (r *runner) listSlices(ctx context.Context) ([]*resourceapi.ResourceSlice, error) {
	list, err := r.cfg.Client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.driver", r.cfg.DriverName).String(),
	})
	if err != nil {
		return nil, fmt.Errorf("list ResourceSlices: %w", err)
	}
	var out []*resourceapi.ResourceSlice
	for i := range list.Items {
		if r.sliceRelevant(&list.Items[i]) {
			out = append(out, &list.Items[i])
		}
	}
	return out, nil
}

var (
	pcieRootRE = regexp.MustCompile(`^pci[0-9a-f]{4}:[0-9a-f]{2}$`)
	pciBusIDRE = regexp.MustCompile(`^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$`)
)

const stdPrefix = "resource.kubernetes.io/"

// checkStandardAttribute returns a problem with a standard attribute, or
// "". lists says whether the cluster allows list-valued attributes
// (feature gate DRAListTypeAttributes).
func checkStandardAttribute(name resourceapi.QualifiedName, a resourceapi.DeviceAttribute, lists bool) string {
	switch string(name) {
	case stdPrefix + "pcieRoot":
		if len(a.StringValues) > 0 {
			if !lists {
				return fmt.Sprintf("%s is a list, which needs the %s feature gate: publish one root as a string, or say the cluster has the gate on (--feature-gates %s=true, Config.FeatureGates)", name, GateListTypeAttributes, GateListTypeAttributes)
			}
			for _, v := range a.StringValues {
				if !pcieRootRE.MatchString(v) {
					return fmt.Sprintf("%s list holds %q, which is not pci<domain>:<bus> (e.g. \"pci0000:00\", lowercase hex)", name, v)
				}
			}
			return ""
		}
		if a.StringValue == nil {
			return fmt.Sprintf("%s must be a string like \"pci0000:00\" (pci<domain>:<bus>, lowercase hex), or with %s a list of them", name, GateListTypeAttributes)
		}
		if !pcieRootRE.MatchString(*a.StringValue) {
			return fmt.Sprintf("%s = %q is not pci<domain>:<bus> (e.g. \"pci0000:00\", lowercase hex)", name, *a.StringValue)
		}
	case stdPrefix + "pciBusID":
		if a.StringValue == nil {
			return fmt.Sprintf("%s must be a string in extended BDF notation like \"0000:3b:00.0\"", name)
		}
		if !pciBusIDRE.MatchString(*a.StringValue) {
			return fmt.Sprintf("%s = %q is not extended BDF dddd:bb:dd.f (e.g. \"0000:3b:00.0\", lowercase hex)", name, *a.StringValue)
		}
	case stdPrefix + "numaNode":
		switch {
		case a.IntValue != nil:
			if *a.IntValue < 0 || *a.IntValue >= 1024 {
				return fmt.Sprintf("%s = %d is not a NUMA node (0..1023); leave the attribute out for a device without NUMA affinity", name, *a.IntValue)
			}
		case len(a.IntValues) > 0:
			for _, v := range a.IntValues {
				if v < 0 || v >= 1024 {
					return fmt.Sprintf("%s list holds %d, not a NUMA node (0..1023)", name, v)
				}
			}
		default:
			return fmt.Sprintf("%s must be an int (the device's NUMA node) or an int list", name)
		}
	}
	return ""
}

// setupSlices waits until the driver's slices for the node are
// complete (or the publish timeout passes) and indexes their devices. A
// driver whose output says that the API server refused its slices fails
// refusalGrace after the suite first sees that, with the API server's
// message.
func (r *runner) setupSlices(ctx context.Context) error {
	deadline := time.Now().Add(r.cfg.PublishTimeout)
	var refusedSince time.Time
	for {
		slices, err := r.listSlices(ctx)
		if err != nil {
			return unable("%v", err)
		}
		ps := slicepool.Group(slices)
		last := slicepool.Incomplete(ps)
		if len(slices) > 0 && len(last) == 0 {
			r.useSlices(ps)
			return nil
		}
		if exited, why := r.driverExited(); exited {
			return broken("%s before its ResourceSlices were complete%s", why, r.logLines())
		}
		refused := r.refusedSlices()
		if refused != "" && refusedSince.IsZero() {
			refusedSince = time.Now()
		}
		if refused != "" && time.Since(refusedSince) > refusalGrace {
			return broken("the API server refuses the driver's ResourceSlices (from the driver's output): %s\n%s", refused, refusalHint)
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			why := ""
			if refused != "" {
				why = fmt.Sprintf("; the driver's output says the API server refuses them: %s\n%s", refused, refusalHint)
			}
			if len(slices) == 0 {
				return broken("no ResourceSlice with spec.driver=%s for node %s within %s; publish the node's devices (kubeletplugin: Helper.PublishResources)%s", r.cfg.DriverName, r.cfg.NodeName, r.cfg.PublishTimeout, why)
			}
			return broken("pools incomplete after %s: %s%s", r.cfg.PublishTimeout, strings.Join(last, "; "), why)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// refusalGrace is how long a driver whose output says the API server
// refused its slices gets to publish them all the same (a refusal it
// recovers from, such as a slice it then splits), before
// slices.published fails.
const refusalGrace = 5 * time.Second

// refusalHint follows the API server's refusal in a failure message.
const refusalHint = "Publish only what the API server accepts: a field behind a feature gate (e.g. a list-valued attribute, DRAListTypeAttributes) needs the gate on the cluster; without --kubeconfig, drakit conformance --feature-gates starts its control plane with it."

// refusalPattern matches an API server error for a ResourceSlice in a
// driver's output: the status message of an Invalid or Forbidden answer,
// as client-go formats it (`ResourceSlice.resource.k8s.io "NAME" is
// invalid: ...`), quotes escaped or not (klog's text format escapes
// them).
var refusalPattern = regexp.MustCompile(`ResourceSlice(?:\.resource\.k8s\.io)? \\?"[^"\\]*\\?" is (?:invalid|forbidden): .*`)

// refusedSlices returns the last refusal of a ResourceSlice in the output
// of the driver the suite started, or "".
func (r *runner) refusedSlices() string {
	if r.logTail == nil {
		return ""
	}
	lines := strings.Split(r.logTail.String(), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		m := refusalPattern.FindString(lines[i])
		if m == "" {
			continue
		}
		if strings.Contains(m, `\"`) {
			// klog's text format: unescape, and drop the quote that
			// closes its err="..." field.
			m = strings.TrimSuffix(strings.ReplaceAll(m, `\"`, `"`), `"`)
		}
		if len(m) > 600 {
			m = m[:600] + " [...]"
		}
		return m
	}
	return ""
}

func (r *runner) checkSlicesPublished(ctx context.Context) outcome {
	if o := r.judge(ctx, fxSlices); o != nil {
		return *o
	}
	return pass("%d slices in %d pools with %d devices", len(r.slices), len(slicepool.Group(r.slices)), len(r.devices))
}

func (r *runner) checkSlicesPools(context.Context) outcome {
	var f failures
	for _, msg := range slicepool.Incomplete(slicepool.Group(r.slices)) {
		f.add("%s", msg)
	}
	devs := map[devRef]string{}
	sets := map[string]string{}
	for _, sl := range r.slices {
		for _, d := range sl.Spec.Devices {
			k := devRef{sl.Spec.Pool.Name, d.Name}
			if other, ok := devs[k]; ok {
				f.add("device %s is published twice (slices %s and %s); device names must be unique within a pool", k, other, sl.Name)
			}
			devs[k] = sl.Name
		}
		for _, cs := range sl.Spec.SharedCounters {
			k := sl.Spec.Pool.Name + "/" + cs.Name
			if other, ok := sets[k]; ok {
				f.add("counter set %s is published twice (slices %s and %s); names must be unique within a pool", k, other, sl.Name)
			}
			sets[k] = sl.Name
		}
	}
	return f.outcome("%d pools consistent, %d unique devices", len(slicepool.Group(r.slices)), len(devs))
}

func (r *runner) checkSlicesStandardAttributes(context.Context) outcome {
	var f failures
	n := 0
	for _, sl := range r.slices {
		for _, d := range sl.Spec.Devices {
			for name, a := range d.Attributes {
				if !strings.HasPrefix(string(name), stdPrefix) {
					continue
				}
				n++
				if msg := checkStandardAttribute(name, a, r.cfg.gate(GateListTypeAttributes)); msg != "" {
					f.add("device %s/%s: %s", sl.Spec.Pool.Name, d.Name, msg)
				}
			}
		}
	}
	return f.outcome("%d standard attributes well-typed", n)
}

func (r *runner) checkSlicesCounters(context.Context) outcome {
	counters := map[string]map[string]resourceapi.CounterSet{} // pool -> set name -> set
	for _, sl := range r.slices {
		for _, cs := range sl.Spec.SharedCounters {
			if counters[sl.Spec.Pool.Name] == nil {
				counters[sl.Spec.Pool.Name] = map[string]resourceapi.CounterSet{}
			}
			counters[sl.Spec.Pool.Name][cs.Name] = cs
		}
	}
	var f failures
	n := 0
	for _, sl := range r.slices {
		for _, d := range sl.Spec.Devices {
			for _, cc := range d.ConsumesCounters {
				n++
				cs, ok := counters[sl.Spec.Pool.Name][cc.CounterSet]
				if !ok {
					f.add("device %s/%s consumes from counter set %q, which pool %q does not publish", sl.Spec.Pool.Name, d.Name, cc.CounterSet, sl.Spec.Pool.Name)
					continue
				}
				for cname, c := range cc.Counters {
					have, ok := cs.Counters[cname]
					if !ok {
						f.add("device %s/%s consumes counter %q of set %q, which the set does not have", sl.Spec.Pool.Name, d.Name, cname, cc.CounterSet)
						continue
					}
					if c.Value.Cmp(have.Value) > 0 {
						f.add("device %s/%s consumes %s of counter %s/%s, which holds only %s: the device can never be allocated", sl.Spec.Pool.Name, d.Name, c.Value.String(), cc.CounterSet, cname, have.Value.String())
					}
				}
			}
		}
	}
	if n == 0 {
		return skip("no device consumes counters")
	}
	return f.outcome("%d counter consumptions consistent", n)
}

// useSlices keeps the newest generation of each pool and indexes devices.
func (r *runner) useSlices(ps map[string]*slicepool.Pool) {
	r.slices = nil
	r.devices = nil
	r.deviceObj = map[devRef]*resourceapi.Device{}
	names := make([]string, 0, len(ps))
	for n := range ps {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		cur := ps[n].Slices
		sort.Slice(cur, func(i, j int) bool { return cur[i].Name < cur[j].Name })
		for _, sl := range cur {
			r.slices = append(r.slices, sl)
			for i := range sl.Spec.Devices {
				d := &sl.Spec.Devices[i]
				if !r.deviceRelevant(sl, d) {
					continue
				}
				k := devRef{sl.Spec.Pool.Name, d.Name}
				r.devices = append(r.devices, k)
				r.deviceObj[k] = d
			}
		}
	}
	r.sched.setSlices(r.slices)
}

// publishedSoon returns those of devs that the driver's slices for this
// node do not list within publishGrace. A driver whose device set changes
// at run time (dynamic partitions published only while they fit,
// republished after every prepare and unprepare, as KEP-4815 drivers may
// do) names its current devices a moment before the slice publisher has
// written them, and lists a device again a moment after the change that
// withdrew it is undone. Health reports about such devices are fine: the
// kubelet keys health by pool and device and accepts reports for devices
// it has not seen in a slice (pkg/kubelet/cm/dra/healthinfo.go).
func (r *runner) publishedSoon(ctx context.Context, devs []devRef) []devRef {
	if len(devs) == 0 {
		return nil
	}
	missing := map[devRef]bool{}
	for _, k := range devs {
		missing[k] = true
	}
	deadline := time.Now().Add(publishGrace)
	for len(missing) > 0 && time.Now().Before(deadline) && ctx.Err() == nil {
		slices, err := r.listSlices(ctx)
		if err == nil {
			for _, sl := range slices {
				for i := range sl.Spec.Devices {
					if r.deviceRelevant(sl, &sl.Spec.Devices[i]) {
						delete(missing, devRef{sl.Spec.Pool.Name, sl.Spec.Devices[i].Name})
					}
				}
			}
		}
		if len(missing) > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
	var out []devRef
	for _, k := range devs {
		if missing[k] {
			out = append(out, k)
			delete(missing, k) // once per device
		}
	}
	return out
}

// publishGrace is how long a device may take to appear in the driver's
// slices.
const publishGrace = 5 * time.Second
