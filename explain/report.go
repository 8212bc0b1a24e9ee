package explain

// Kind names a reason why claims cannot be allocated on a node. The
// values are stable strings, used as they are in JSON output.
type Kind string

// Reasons, roughly from the most to the least promising for the operator:
// devices that are busy free up by themselves; a missing device does not.
const (
	// Allocated: every device that matches the request is allocated to
	// other claims. Reason.Holders names them.
	Allocated Kind = "allocated"
	// CounterExhausted: matching devices are free, but a shared counter
	// they consume (a partitionable device's memory slices, a MIG GPU's
	// compute slices) is used up. Reason.Counters says which, how much is
	// left and which claims hold it.
	CounterExhausted Kind = "counter-exhausted"
	// Together: each request (or each claim) can be allocated on its own,
	// but not all of them at once: they compete for the same devices or
	// counters.
	Together Kind = "together"
	// Constraint: a matchAttribute or distinctAttribute constraint of the
	// claim cannot be met. Reason.Groups lists the attribute values
	// available and their sizes.
	Constraint Kind = "constraint"
	// DeviceTaint: matching devices are tainted and the request does not
	// tolerate the taint. Reason.Taints lists them.
	DeviceTaint Kind = "device-taint"
	// PoolIncomplete: a resource pool on the node is being updated (not
	// all of its slices are published), so the allocator does not use it.
	PoolIncomplete Kind = "pool-incomplete"
	// TooMany: the request asks for more devices than the node has that
	// match it, allocated or not.
	TooMany Kind = "too-many"
	// SelectorFalse: the request's CEL selectors are false for every
	// device of its class on the node. Reason.Selectors shows the
	// expression, its false parts and the closest devices.
	SelectorFalse Kind = "selector"
	// NoClassDevice: no device on the node belongs to the request's
	// device class (the class's selectors are false for every device).
	NoClassDevice Kind = "no-class-device"
	// NoDevices: the node publishes no devices at all.
	NoDevices Kind = "no-devices"
	// ClaimElsewhere: one of the pod's claims is already allocated, on
	// devices that this node cannot reach.
	ClaimElsewhere Kind = "claim-elsewhere"
	// NodeTaint: the node has a NoSchedule or NoExecute taint that the
	// pod does not tolerate, or it is cordoned.
	NodeTaint Kind = "node-taint"
	// NodeAffinity: the pod's node selector or required node affinity
	// excludes the node.
	NodeAffinity Kind = "node-affinity"
	// Unexplained: the allocator finds no allocation and no reduction of
	// the problem explains why (for example consumable capacity). The
	// message says what was tried.
	Unexplained Kind = "unexplained"
	// AllocatorError: the allocator returned an error (an invalid CEL
	// expression, a missing device class). The scheduler stops on it too.
	AllocatorError Kind = "error"
)

// rank orders kinds from the most promising (0) to the least.
var rank = map[Kind]int{
	Allocated: 1, CounterExhausted: 1, Together: 2, PoolIncomplete: 2, Constraint: 3,
	DeviceTaint: 4, TooMany: 5, Unexplained: 5, SelectorFalse: 6, NoClassDevice: 7, NoDevices: 8,
	ClaimElsewhere: 9, NodeTaint: 9, NodeAffinity: 10, AllocatorError: 11,
}

// Report is the explanation for one pod, claim or claim template.
type Report struct {
	// Subject is what was explained: "pod NS/NAME", "claim NS/NAME" or
	// "template NS/NAME".
	Subject string `json:"subject"`
	// Claims are the claims that still need an allocation ("NS/NAME";
	// a claim that a template would create is named "NS/TEMPLATE (template)").
	Claims []string `json:"claims"`
	// Fits is true when at least one node can allocate all claims.
	Fits bool `json:"fits"`
	// NodesFit counts the nodes that can.
	NodesFit int `json:"nodesFit"`
	// Warnings name claim shapes that cost the scheduler dearly whether
	// they fit or not: several requests for the same devices under one
	// constraint, which the allocator tries in every order (ask for one
	// request with a count instead).
	Warnings []string `json:"warnings,omitempty"`
	// Nodes holds one entry per node, most promising first: nodes that
	// fit, then nodes whose reasons are the easiest to resolve (busy
	// devices before missing ones), then by name.
	Nodes []NodeReport `json:"nodes"`
}

// NodeReport explains one node.
type NodeReport struct {
	// Node is the node's name.
	Node string `json:"node"`
	// Fits is true when the allocator allocates all claims on the node.
	Fits bool `json:"fits"`
	// Allocation is what the allocator picks when Fits: one entry per
	// device, in the allocator's order.
	Allocation []PickedDevice `json:"allocation,omitempty"`
	// Reasons are reasons that concern the whole node or a whole claim
	// (node affinity, node taints, constraints, requests that fit only one
	// by one). Reasons of a single request are in Requests.
	Reasons []Reason `json:"reasons,omitempty"`
	// Requests holds one entry per request of the claims that need an
	// allocation, when the node is a candidate at all.
	Requests []RequestReport `json:"requests,omitempty"`
}

// PickedDevice is one device of an allocation.
type PickedDevice struct {
	// Claim is "NS/NAME" of the claim.
	Claim string `json:"claim"`
	// Request is the request name ("request/subrequest" for a
	// firstAvailable alternative).
	Request string `json:"request"`
	// Driver, Pool and Device name the device.
	Driver string `json:"driver"`
	Pool   string `json:"pool"`
	Device string `json:"device"`
}

// RequestReport explains one request of a claim on one node.
type RequestReport struct {
	// Claim is "NS/NAME" of the claim.
	Claim string `json:"claim"`
	// Request is the request's name ("request/subrequest" for an
	// alternative of a firstAvailable request).
	Request string `json:"request"`
	// Class is the device class; Count the number of devices asked for
	// (0 for allocationMode All).
	Class string `json:"class,omitempty"`
	Count int64  `json:"count,omitempty"`
	// Fits is true when the allocator can allocate this request on its
	// own on the node (no other requests, no constraints).
	Fits bool `json:"fits"`
	// Reasons say why it cannot, when it cannot.
	Reasons []Reason `json:"reasons,omitempty"`
	// Alternatives explain each firstAvailable alternative, in order.
	Alternatives []RequestReport `json:"alternatives,omitempty"`
}

// Reason is one reason, with the details that make it actionable. Only
// the details that belong to the Kind are set.
type Reason struct {
	// Kind classifies the reason.
	Kind Kind `json:"kind"`
	// Message is one sentence for an operator.
	Message string `json:"message"`
	// Claim names the claim a claim-level reason (Constraint, Together
	// within one claim) is about, as in Report.Claims.
	Claim string `json:"claim,omitempty"`
	// Selectors explain SelectorFalse and NoClassDevice.
	Selectors *SelectorReport `json:"selectors,omitempty"`
	// Holders are the claims holding the devices (Allocated) or the
	// counters (CounterExhausted).
	Holders []Holder `json:"holders,omitempty"`
	// Counters explain CounterExhausted.
	Counters []CounterReport `json:"counters,omitempty"`
	// Constraint is the constraint (Constraint): "matchAttribute NAME" or
	// "distinctAttribute NAME".
	Constraint string `json:"constraint,omitempty"`
	// Groups are the attribute groups (Constraint).
	Groups []AttributeGroup `json:"groups,omitempty"`
	// Taints are the untolerated taints (DeviceTaint, NodeTaint).
	Taints []TaintReport `json:"taints,omitempty"`
}

// Holder is a claim that holds devices or counters, and the pods it is
// reserved for.
type Holder struct {
	// Claim is "NS/NAME".
	Claim string `json:"claim"`
	// Pods are "NS/NAME" of the pods in the claim's status.reservedFor.
	Pods []string `json:"pods,omitempty"`
	// Devices are the devices ("pool/device") the claim holds that
	// matter for the reason.
	Devices []string `json:"devices"`
}

// SelectorReport shows why devices do not match a request's or a class's
// selectors.
type SelectorReport struct {
	// Source is "class NAME" or "request NAME".
	Source string `json:"source"`
	// Expressions are the selectors' CEL expressions, in order.
	Expressions []string `json:"expressions"`
	// Devices is how many devices were evaluated.
	Devices int `json:"devices"`
	// Closest are the devices for which the most sub-expressions (the
	// top-level && terms of all selectors) are true.
	Closest []DeviceMismatch `json:"closest,omitempty"`
}

// DeviceMismatch is one device and the selector terms that are false for
// it.
type DeviceMismatch struct {
	// Device is "driver/pool/device".
	Device string `json:"device"`
	// False are the terms that are false (or fail) for the device.
	False []TermResult `json:"false"`
	// True counts the terms that are true.
	True int `json:"true"`
}

// TermResult is one false selector term and the values it read.
type TermResult struct {
	// Term is the sub-expression.
	Term string `json:"term"`
	// Error is the evaluation error, when the term did not evaluate (for
	// example an attribute the device does not have).
	Error string `json:"error,omitempty"`
	// Values are the device's values of the attributes and capacities the
	// term reads ("<missing>" when the device has none).
	Values map[string]string `json:"values,omitempty"`
}

// CounterReport is one counter that is too short.
type CounterReport struct {
	// Pool and CounterSet name the counter set; Counter the counter.
	Pool       string `json:"pool"`
	CounterSet string `json:"counterSet"`
	Counter    string `json:"counter"`
	// Capacity is the counter's value in the counter set, Left what
	// allocated devices leave of it, Need the least that a matching
	// device consumes.
	Capacity string `json:"capacity"`
	Left     string `json:"left"`
	Need     string `json:"need"`
	// Holders are the claims whose devices consume the counter.
	Holders []Holder `json:"holders,omitempty"`
}

// AttributeGroup is one value of a constraint's attribute and the free
// matching devices that have it, per request.
type AttributeGroup struct {
	// Value is the attribute value ("<missing>" for devices without it).
	Value string `json:"value"`
	// Devices counts the devices per request.
	Devices map[string]int `json:"devices"`
}

// TaintReport is one untolerated taint and the devices that carry it.
type TaintReport struct {
	Key    string `json:"key"`
	Value  string `json:"value,omitempty"`
	Effect string `json:"effect"`
	// Devices are "pool/device" (empty for a node taint).
	Devices []string `json:"devices,omitempty"`
	// Rule names the DeviceTaintRule that put the taint on the devices,
	// when one did (else the driver published it).
	Rule string `json:"rule,omitempty"`
}
