package explain

import (
	"fmt"
	"sort"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/structured"
)

// reqSpec is one request or firstAvailable alternative, as the allocator
// sees it.
type reqSpec struct {
	name        string // "request" or "request/alternative"
	class       string
	selectors   []resourceapi.DeviceSelector
	tolerations []resourceapi.DeviceToleration
	all         bool
	count       int64
}

func exactSpec(name string, r *resourceapi.ExactDeviceRequest) reqSpec {
	return reqSpec{name: name, class: r.DeviceClassName, selectors: r.Selectors, tolerations: r.Tolerations,
		all: r.AllocationMode == resourceapi.DeviceAllocationModeAll, count: countOf(r.AllocationMode, r.Count)}
}

func subSpec(parent string, r *resourceapi.DeviceSubRequest) reqSpec {
	return reqSpec{name: parent + "/" + r.Name, class: r.DeviceClassName, selectors: r.Selectors, tolerations: r.Tolerations,
		all: r.AllocationMode == resourceapi.DeviceAllocationModeAll, count: countOf(r.AllocationMode, r.Count)}
}

// specsOf returns the request, or each of its alternatives.
func specsOf(r *resourceapi.DeviceRequest) []reqSpec {
	var specs []reqSpec
	if r.Exactly != nil {
		specs = append(specs, exactSpec(r.Name, r.Exactly))
	}
	for si := range r.FirstAvailable {
		specs = append(specs, subSpec(r.Name, &r.FirstAvailable[si]))
	}
	return specs
}

// countOf applies the API default: ExactCount of 1.
func countOf(mode resourceapi.DeviceAllocationMode, count int64) int64 {
	if mode == resourceapi.DeviceAllocationModeAll {
		return 0
	}
	if count == 0 {
		return 1
	}
	return count
}

// only returns claim with just the request at index ri (and, for a
// firstAvailable request, just its alternative si when si >= 0), and no
// constraints.
func only(claim *resourceapi.ResourceClaim, ri, si int) *resourceapi.ResourceClaim {
	c := *claim
	c.Spec.Devices = resourceapi.DeviceClaim{Config: claim.Spec.Devices.Config}
	r := claim.Spec.Devices.Requests[ri]
	if si >= 0 {
		r.FirstAvailable = []resourceapi.DeviceSubRequest{r.FirstAvailable[si]}
	}
	c.Spec.Devices.Requests = []resourceapi.DeviceRequest{r}
	return &c
}

func (n *nodeCtx) explainRequest(claim *resourceapi.ResourceClaim, ri int) RequestReport {
	req := &claim.Spec.Devices.Requests[ri]
	cname := claim.Namespace + "/" + claim.Name
	if len(req.FirstAvailable) == 0 {
		if req.Exactly == nil {
			return RequestReport{Claim: cname, Request: req.Name, Reasons: []Reason{{Kind: AllocatorError, Message: "the request has neither exactly nor firstAvailable"}}}
		}
		return n.explainSpec(cname, only(claim, ri, -1), exactSpec(req.Name, req.Exactly))
	}
	rr := RequestReport{Claim: cname, Request: req.Name}
	for si := range req.FirstAvailable {
		alt := n.explainSpec(cname, only(claim, ri, si), subSpec(req.Name, &req.FirstAvailable[si]))
		rr.Fits = rr.Fits || alt.Fits
		rr.Alternatives = append(rr.Alternatives, alt)
	}
	return rr
}

// explainSpec explains one request (or alternative) that claim holds
// alone.
func (n *nodeCtx) explainSpec(cname string, claim *resourceapi.ResourceClaim, rs reqSpec) RequestReport {
	rr := RequestReport{Claim: cname, Request: rs.name, Class: rs.class, Count: rs.count}
	fail := func(r Reason) RequestReport { rr.Reasons = append(rr.Reasons, r); return rr }
	if !n.alone() {
		// Else the claim alone is the problem that just failed.
		ok, _, err := n.run(n.base, []*resourceapi.ResourceClaim{claim})
		if err != nil {
			return fail(Reason{Kind: AllocatorError, Message: "the allocator fails: " + err.Error()})
		}
		if ok {
			rr.Fits = true
			return rr
		}
	}
	if len(n.devices) == 0 {
		return fail(Reason{Kind: NoDevices, Message: "the node has no devices: no ResourceSlice is published for it"})
	}
	class, err := n.classes.Get(rs.class)
	if err != nil {
		return fail(Reason{Kind: AllocatorError, Message: err.Error()})
	}
	all := n.everyDevice()
	inClass := n.filter(all, class.Spec.Selectors)
	if len(inClass) == 0 {
		sel := n.selectorReport("class "+class.Name, class.Spec.Selectors, all)
		return fail(Reason{Kind: NoClassDevice, Selectors: sel,
			Message: fmt.Sprintf("no device of class %s on the node (drivers here: %s): the class's selector is false for %s%s", class.Name, n.drivers(), every(len(all), "device"), sel.why())})
	}
	matching := n.filter(inClass, rs.selectors)
	if len(matching) == 0 {
		sel := n.selectorReport("request "+rs.name, rs.selectors, inClass)
		return fail(Reason{Kind: SelectorFalse, Selectors: sel,
			Message: fmt.Sprintf("the request's selector is false for %s of class %s on the node%s", every(len(inClass), "device"), class.Name, sel.why())})
	}
	need := int(rs.count)
	if rs.all {
		need = len(matching)
	}
	if need > len(matching) {
		return fail(Reason{Kind: TooMany,
			Message: fmt.Sprintf("asks for %d devices; the node has only %d that match (class %s and the request's selectors), allocated or not", need, len(matching), class.Name)})
	}

	keep := sets.New[structured.DeviceID]()
	var allocated []structured.DeviceID
	var tainted []int
	usesCounters := false
	for _, i := range matching {
		d := n.devices[i]
		keep.Insert(d.id)
		if n.state.AllocatedDevices.Has(d.id) {
			allocated = append(allocated, d.id)
		}
		if len(untolerated(d.dev, rs.tolerations)) > 0 {
			tainted = append(tainted, i)
		}
		usesCounters = usesCounters || len(d.dev.ConsumesCounters) > 0
	}
	nodeAllocated := false
	for id := range n.onNode {
		if n.state.AllocatedDevices.Has(id) {
			nodeAllocated = true
			break
		}
	}
	one := []*resourceapi.ResourceClaim{claim}
	tryFree := len(allocated) > 0 || (usesCounters && nodeAllocated)
	tryTaints := len(tainted) > 0
	free := tryFree && n.try(one, keep, true, false, false)
	untaint := tryTaints && n.try(one, keep, false, true, false)
	both := !free && !untaint && tryFree && tryTaints && n.try(one, keep, true, true, false)

	if untaint || both {
		rr.Reasons = append(rr.Reasons, n.taintReason(tainted, rs, len(matching)))
	}
	if free || both {
		before := len(rr.Reasons)
		freeCount := len(matching) - len(allocated)
		if freeCount < need || (rs.all && len(allocated) > 0) {
			holders := n.holderList(allocated)
			rr.Reasons = append(rr.Reasons, Reason{Kind: Allocated, Holders: holders,
				Message: fmt.Sprintf("%s allocated, to %s; %d free, %d needed", someOf(len(allocated), len(matching), "is", "are"), holderPhrase(holders), freeCount, need)})
		}
		var cands []devInfo
		for _, i := range matching {
			if d := n.devices[i]; !n.state.AllocatedDevices.Has(d.id) && (untaint || both || len(untolerated(d.dev, rs.tolerations)) == 0) {
				cands = append(cands, d)
			}
		}
		if counters := n.countersShort(cands); len(counters) > 0 {
			rr.Reasons = append(rr.Reasons, Reason{Kind: CounterExhausted, Counters: counters,
				Message: fmt.Sprintf("%s, but the shared counters %s are used up (%s)", freePhrase(len(cands)), map[bool]string{true: "it consumes", false: "they consume"}[len(cands) == 1], counterSummary(counters))})
		}
		if len(rr.Reasons) == before {
			var ids []structured.DeviceID
			for id := range n.onNode {
				if n.state.AllocatedDevices.Has(id) {
					ids = append(ids, id)
				}
			}
			sortIDs(ids)
			rr.Reasons = append(rr.Reasons, Reason{Kind: Allocated, Holders: n.holderList(ids),
				Message: "the request fits only when the devices allocated on the node are released"})
		}
		return rr
	}
	if untaint {
		return rr
	}
	if usesCounters && n.try(one, keep, false, tryTaints, true) {
		counters := n.countersTotal(matching, need)
		return fail(Reason{Kind: CounterExhausted, Counters: counters,
			Message: fmt.Sprintf("%s, but the shared counters cannot hold %d of them at once (%s)", plural(len(matching), "matching device"), need, counterSummary(counters))})
	}
	if pools := n.incompletePools(); len(pools) > 0 {
		return fail(Reason{Kind: PoolIncomplete, Message: "resource pools are being updated (not all of their slices are published): " + strings.Join(pools, ", ")})
	}
	return fail(Reason{Kind: Unexplained,
		Message: fmt.Sprintf("%s, but the allocator finds no allocation, even without other allocations, taints or counters", plural(len(matching), "matching device"))})
}

// alone is true when the pending claims are one claim with one request
// (with at most one alternative) and no constraints: the request alone is
// then the whole problem.
func (n *nodeCtx) alone() bool {
	if len(n.sub.pending) != 1 {
		return false
	}
	d := n.sub.pending[0].Spec.Devices
	return len(d.Requests) == 1 && len(d.Constraints) == 0 && len(d.Requests[0].FirstAvailable) <= 1
}

func (n *nodeCtx) drivers() string {
	ds := sets.New[string]()
	for _, d := range n.devices {
		ds.Insert(d.id.Driver.String())
	}
	return strings.Join(sets.List(ds), ", ")
}

func sortIDs(ids []structured.DeviceID) {
	sort.Slice(ids, func(i, j int) bool { return ids[i].String() < ids[j].String() })
}

// taintReason lists the untolerated taints of the matching devices.
func (n *nodeCtx) taintReason(tainted []int, rs reqSpec, matching int) Reason {
	type key struct{ k, v, e, rule string }
	byTaint := map[key]*TaintReport{}
	var order []key
	for _, i := range tainted {
		d := n.devices[i]
		for _, t := range untolerated(d.dev, rs.tolerations) {
			rule := n.ruleOf[ruleTaint{d.id.Driver.String(), d.slice.Spec.Pool.Name, d.dev.Name, t.Key, t.Value, string(t.Effect)}]
			k := key{t.Key, t.Value, string(t.Effect), rule}
			if byTaint[k] == nil {
				byTaint[k] = &TaintReport{Key: t.Key, Value: t.Value, Effect: string(t.Effect), Rule: rule}
				order = append(order, k)
			}
			byTaint[k].Devices = append(byTaint[k].Devices, d.String())
		}
	}
	var taints []TaintReport
	var names []string
	for _, k := range order {
		taints = append(taints, *byTaint[k])
		s := k.k
		if k.v != "" {
			s += "=" + k.v
		}
		s += ":" + k.e
		if k.rule != "" {
			s += " (DeviceTaintRule " + k.rule + ")"
		}
		names = append(names, s)
	}
	return Reason{Kind: DeviceTaint, Taints: taints,
		Message: fmt.Sprintf("%s taints the request does not tolerate: %s", someOf(len(tainted), matching, "has", "have"), strings.Join(names, ", "))}
}

// counterKey names one counter of one pool.
type counterKey struct {
	pool         poolKey
	set, counter string
}

// counterState returns each counter's capacity and what the allocated
// devices leave of it, for the pools on the node.
func (n *nodeCtx) counterState() (capacity, left map[counterKey]resource.Quantity, users map[counterKey][]structured.DeviceID) {
	capacity, left = map[counterKey]resource.Quantity{}, map[counterKey]resource.Quantity{}
	users = map[counterKey][]structured.DeviceID{}
	seen := sets.New[*resourceapi.ResourceSlice]()
	for _, s := range n.slices {
		if seen.Has(s) || s.Spec.Pool.Generation < n.poolGen[poolKey{s.Spec.Driver, s.Spec.Pool.Name}] {
			continue
		}
		seen.Insert(s)
		pk := poolKey{s.Spec.Driver, s.Spec.Pool.Name}
		for _, cs := range s.Spec.SharedCounters {
			for name, c := range cs.Counters {
				k := counterKey{pk, cs.Name, name}
				capacity[k] = c.Value.DeepCopy()
				if _, ok := left[k]; !ok {
					left[k] = c.Value.DeepCopy()
				} else {
					l := left[k]
					l.Add(c.Value)
					left[k] = l
				}
			}
		}
		for i, d := range s.Spec.Devices {
			id := n.ids[s][i]
			if !n.state.AllocatedDevices.Has(id) {
				continue
			}
			for _, cc := range d.ConsumesCounters {
				for name, c := range cc.Counters {
					k := counterKey{pk, cc.CounterSet, name}
					l := left[k]
					l.Sub(c.Value)
					left[k] = l
					users[k] = append(users[k], id)
				}
			}
		}
	}
	return capacity, left, users
}

// countersShort returns the counters that are too short for at least one
// of the candidate devices, with the least any of them needs.
func (n *nodeCtx) countersShort(cands []devInfo) []CounterReport {
	capacity, left, users := n.counterState()
	need := map[counterKey]resource.Quantity{}
	for _, d := range cands {
		pk := poolKey{d.slice.Spec.Driver, d.slice.Spec.Pool.Name}
		for _, cc := range d.dev.ConsumesCounters {
			for name, c := range cc.Counters {
				k := counterKey{pk, cc.CounterSet, name}
				l, ok := left[k]
				if !ok || l.Cmp(c.Value) >= 0 {
					continue
				}
				if cur, ok := need[k]; !ok || c.Value.Cmp(cur) < 0 {
					need[k] = c.Value.DeepCopy()
				}
			}
		}
	}
	return n.counterReports(need, capacity, left, users)
}

// countersTotal returns, for the counters the matching devices consume,
// those whose capacity is less than what need of them would take
// together (the least consuming ones first).
func (n *nodeCtx) countersTotal(matching []int, need int) []CounterReport {
	capacity, left, users := n.counterState()
	per := map[counterKey][]resource.Quantity{}
	for _, i := range matching {
		d := n.devices[i]
		pk := poolKey{d.slice.Spec.Driver, d.slice.Spec.Pool.Name}
		for _, cc := range d.dev.ConsumesCounters {
			for name, c := range cc.Counters {
				k := counterKey{pk, cc.CounterSet, name}
				per[k] = append(per[k], c.Value)
			}
		}
	}
	total := map[counterKey]resource.Quantity{}
	for k, qs := range per {
		sort.Slice(qs, func(i, j int) bool { return qs[i].Cmp(qs[j]) < 0 })
		var sum resource.Quantity
		for _, q := range qs[:min(need, len(qs))] {
			sum.Add(q)
		}
		if l := left[k]; l.Cmp(sum) < 0 {
			total[k] = sum
		}
	}
	return n.counterReports(total, capacity, left, users)
}

func (n *nodeCtx) counterReports(need, capacity, left map[counterKey]resource.Quantity, users map[counterKey][]structured.DeviceID) []CounterReport {
	keys := make([]counterKey, 0, len(need))
	for k := range need {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		a, b := keys[i], keys[j]
		if a.pool != b.pool {
			return a.pool.driver+"/"+a.pool.pool < b.pool.driver+"/"+b.pool.pool
		}
		if a.set != b.set {
			return naturalLess(a.set, b.set)
		}
		return naturalLess(a.counter, b.counter)
	})
	out := make([]CounterReport, len(keys))
	for i, k := range keys {
		c, l, nd := capacity[k], left[k], need[k]
		ids := append([]structured.DeviceID(nil), users[k]...)
		sortIDs(ids)
		out[i] = CounterReport{Pool: k.pool.pool, CounterSet: k.set, Counter: k.counter,
			Capacity: c.String(), Left: l.String(), Need: nd.String(), Holders: n.holderList(ids)}
	}
	return out
}

// counterSummary names the counter sets and their holders in a short
// phrase.
func counterSummary(cs []CounterReport) string {
	var sets []string
	seen := map[string]bool{}
	var holders []Holder
	for _, c := range cs {
		if !seen[c.CounterSet] {
			seen[c.CounterSet] = true
			sets = append(sets, c.CounterSet)
		}
		holders = append(holders, c.Holders...)
	}
	var s string
	switch {
	case len(sets) > 3:
		s = fmt.Sprintf("counter sets %s and %d more", strings.Join(sets[:3], ", "), len(sets)-3)
	case len(sets) == 1:
		s = "counter set " + sets[0]
	default:
		s = "counter sets " + strings.Join(sets, ", ")
	}
	if len(holders) > 0 {
		s += "; held by " + holderPhrase(holders)
	}
	return s
}

// holderPhrase names the claims (and their pods) of holders, each once.
func holderPhrase(hs []Holder) string {
	seen := map[string]bool{}
	var parts []string
	for _, h := range hs {
		if seen[h.Claim] {
			continue
		}
		seen[h.Claim] = true
		p := h.Claim
		if len(h.Pods) > 0 {
			p += " (pod " + strings.Join(h.Pods, ", ") + ")"
		}
		parts = append(parts, p)
	}
	if len(parts) == 0 {
		return "claims not in the snapshot"
	}
	if len(parts) > 3 {
		return fmt.Sprintf("%s and %d more claims", strings.Join(parts[:3], ", "), len(parts)-3)
	}
	return strings.Join(parts, ", ")
}

// someOf returns "the only matching device is", "both matching devices
// are", "all n matching devices are" or "k of the n matching devices
// are" (with the verb given for one and for many).
func someOf(k, n int, one, many string) string {
	switch {
	case n == 1 && k == 1:
		return "the only matching device " + one
	case k == n && n == 2:
		return "both matching devices " + many
	case k == n:
		return fmt.Sprintf("all %d matching devices %s", n, many)
	}
	if k == 1 {
		return fmt.Sprintf("1 of the %d matching devices %s", n, one)
	}
	return fmt.Sprintf("%d of the %d matching devices %s", k, n, many)
}

// freePhrase returns "1 matching device is free" or "n matching devices
// are free".
func freePhrase(n int) string {
	if n == 1 {
		return "1 matching device is free"
	}
	return fmt.Sprintf("%d matching devices are free", n)
}

// every returns "the only device" or "all n devices".
func every(n int, noun string) string {
	if n == 1 {
		return "the only " + noun
	}
	return fmt.Sprintf("all %d %ss", n, noun)
}

// plural returns "1 device" or "n devices".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// naturalLess compares strings with embedded numbers by value, so that
// gpu-2 comes before gpu-10.
func naturalLess(a, b string) bool {
	for a != "" && b != "" {
		da, db := digits(a), digits(b)
		if da > 0 && db > 0 {
			na, nb := strings.TrimLeft(a[:da], "0"), strings.TrimLeft(b[:db], "0")
			if len(na) != len(nb) {
				return len(na) < len(nb)
			}
			if na != nb {
				return na < nb
			}
			a, b = a[da:], b[db:]
			continue
		}
		if a[0] != b[0] {
			return a[0] < b[0]
		}
		a, b = a[1:], b[1:]
	}
	return len(a) < len(b)
}

func digits(s string) int {
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	return i
}

// incompletePools names the pools on the node whose newest generation
// does not have all of its slices.
func (n *nodeCtx) incompletePools() []string {
	count := map[poolKey]int64{}
	want := map[poolKey]int64{}
	seen := sets.New[*resourceapi.ResourceSlice]()
	for _, s := range n.slices {
		pk := poolKey{s.Spec.Driver, s.Spec.Pool.Name}
		if seen.Has(s) || s.Spec.Pool.Generation < n.poolGen[pk] {
			continue
		}
		seen.Insert(s)
		count[pk]++
		want[pk] = s.Spec.Pool.ResourceSliceCount
	}
	var out []string
	for pk, c := range count {
		if c != want[pk] {
			out = append(out, fmt.Sprintf("%s/%s (%d of %d slices)", pk.driver, pk.pool, c, want[pk]))
		}
	}
	sort.Strings(out)
	return out
}
