package ledger

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/resourceversion"

	"github.com/drakit/drakit/partition"
	"github.com/drakit/drakit/partition/plan"
)

// Device names one device of the driver: its pool and its name.
type Device struct {
	// Pool is the device's pool.
	Pool string `json:"pool"`
	// Name is the device's name in its pool.
	Name string `json:"name"`
}

// String prints "pool/name".
func (d Device) String() string { return d.Pool + "/" + d.Name }

func compareDevices(a, b Device) int {
	return cmp.Or(strings.Compare(a.Pool, b.Pool), strings.Compare(a.Name, b.Name))
}

// ClaimRef names a ResourceClaim.
type ClaimRef struct {
	// UID is the claim's UID.
	UID types.UID `json:"uid"`
	// Namespace and Name are the claim's.
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
}

// String prints "namespace/name".
func (c ClaimRef) String() string { return c.Namespace + "/" + c.Name }

// Hold is what one allocation of a claim holds on the node.
type Hold struct {
	// Claim is the claim.
	Claim ClaimRef `json:"claim"`
	// ResourceVersion is the claim's resourceVersion the allocation was
	// written against (admitted by Admit) or observed at (recorded by
	// Observe). The write compared it: once the claim is seen at a newer
	// one without the devices, the write can no longer commit.
	ResourceVersion string `json:"resourceVersion"`
	// Devices are the claim's devices on this node, sorted.
	Devices []Device `json:"devices"`
}

// Card is one card of the node, as its agent last wrote it.
type Card struct {
	// Index is the card's index on the node; it names its devices.
	Index int `json:"index"`
	// Scheme is the name of the card's partition scheme
	// (partition.Scheme.Name), which the agent and the planner resolve.
	Scheme string `json:"scheme"`
	// Pool is the layout pool the card's devices are published in.
	Pool string `json:"pool"`
	// Profiles are the profiles the card offers; empty: all of the
	// scheme's.
	Profiles []string `json:"profiles,omitempty"`
	// Busy are partitions in use on the node that no Held entry names
	// (prepared for a claim already resolved, being made or destroyed).
	Busy partition.Layout `json:"busy,omitempty"`
	// BusyWhole is true when the whole card is in use on the node.
	BusyWhole bool `json:"busyWhole,omitempty"`
	// NoWhole is true when the card cannot be offered whole.
	NoWhole bool `json:"noWhole,omitempty"`
}

// Ledger is a node's layout ledger: the one record of which of the
// node's layout devices may be allocated (Open) and which claims hold
// (Held). It is changed only by compare-and-swap (Store.Update), and
// every change keeps, per card, Held ∪ Cards[].Busy ∪ Open a valid
// layout of the card's scheme, each device once:
//
//   - Admit (the allocation check) moves devices from Open to Held;
//   - Publish (the node's agent) rewrites Open from Held, Busy and
//     Demand, opening only devices valid with everything else;
//   - Observe and Forget (the planner) drop Held entries that can no
//     longer commit or that ended, and record allocations made without
//     Admit, closing what overlaps them.
//
// Hence no two devices allocated through Admit can overlap, whatever
// the order, the delays and the number of writers (docs/dynamic-mig-publication.md).
// A Ledger value is not safe for concurrent use; its methods change it
// in place.
type Ledger struct {
	// Node is the node's name.
	Node string `json:"node"`
	// Seeded is true once the planner has recorded every allocation of
	// the node's devices that it saw: before, nothing is opened or
	// admitted.
	Seeded bool `json:"seeded,omitempty"`
	// Cards are the node's cards, written by its agent (Publish).
	Cards []Card `json:"cards,omitempty"`
	// Open are the free devices that may be allocated, sorted.
	Open []Device `json:"open,omitempty"`
	// Held are the claims' allocations, by claim UID then
	// resourceVersion.
	Held []Hold `json:"held,omitempty"`
	// Demand is what the planner asks the node to lay out for.
	Demand plan.Demand `json:"demand,omitempty"`
	// Reserved are cards the planner keeps for a larger profile that fits
	// nowhere yet (plan.AssignFleet): the agent opens nothing else
	// on them, so that their partitions drain.
	Reserved []plan.ReservedCard `json:"reserved,omitempty"`
}

// Clone returns a deep copy.
func (l *Ledger) Clone() *Ledger {
	if l == nil {
		return nil
	}
	c := *l
	c.Cards = slices.Clone(l.Cards)
	for i := range c.Cards {
		c.Cards[i].Profiles = slices.Clone(c.Cards[i].Profiles)
		c.Cards[i].Busy = slices.Clone(c.Cards[i].Busy)
	}
	c.Open = slices.Clone(l.Open)
	c.Held = slices.Clone(l.Held)
	for i := range c.Held {
		c.Held[i].Devices = slices.Clone(c.Held[i].Devices)
	}
	if l.Demand != nil {
		c.Demand = plan.Demand{}
		for k, v := range l.Demand {
			c.Demand[k] = v
		}
	}
	c.Reserved = slices.Clone(l.Reserved)
	return &c
}

// Pools returns the layout pools of the node's cards, sorted.
func (l *Ledger) Pools() []string {
	var out []string
	for _, c := range l.Cards {
		out = append(out, c.Pool)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// IsOpen reports whether d is Open.
func (l *Ledger) IsOpen(d Device) bool { return slices.Contains(l.Open, d) }

// Holder returns the claims that hold d, in Held's order.
func (l *Ledger) Holder(d Device) []ClaimRef {
	var out []ClaimRef
	for _, h := range l.Held {
		if slices.Contains(h.Devices, d) && !slices.Contains(out, h.Claim) {
			out = append(out, h.Claim)
		}
	}
	return out
}

// HeldDevices returns every device some Held entry names, sorted, once.
func (l *Ledger) HeldDevices() []Device {
	var out []Device
	for _, h := range l.Held {
		out = append(out, h.Devices...)
	}
	slices.SortFunc(out, compareDevices)
	return slices.Compact(out)
}

// ErrNotSeeded is wrapped by Admit's refusal on a ledger the planner has
// not seeded yet.
var ErrNotSeeded = errors.New("the node's layout ledger is not seeded yet")

// NotOpenError is Admit's refusal of devices that are neither Open nor
// held by the claim already: the allocation was made from a view of the
// node's layout older than the ledger.
type NotOpenError struct {
	// Node is the ledger's node.
	Node string
	// Claim is the claim.
	Claim ClaimRef
	// Devices are the devices refused, sorted.
	Devices []Device
}

func (e *NotOpenError) Error() string {
	names := make([]string, len(e.Devices))
	for i, d := range e.Devices {
		names[i] = d.String()
	}
	return fmt.Sprintf("claim %s: device %s of node %s is not open for allocation in the node's"+
		" layout ledger: it was allocated from an older publication of the layout",
		e.Claim, strings.Join(names, ", "), e.Node)
}

// Admit records that an allocation of claim, written against the claim's
// resourceVersion rv, holds devs: each device must be Open (it moves to
// Held) or held by the same claim already (a write retried). Otherwise
// it returns a *NotOpenError naming the devices that are neither (or an
// error wrapping ErrNotSeeded before the ledger is seeded) and changes
// nothing. Admitting the same devices again for the same claim and rv
// changes nothing. The caller passes only devices of the ledger's pools.
func (l *Ledger) Admit(claim ClaimRef, rv string, devs []Device) error {
	if !l.Seeded {
		return fmt.Errorf("claim %s on node %s: %w", claim, l.Node, ErrNotSeeded)
	}
	if claim.UID == "" || rv == "" {
		return fmt.Errorf("admit claim %s: the claim's UID and resourceVersion must be set", claim)
	}
	devs = slices.Clone(devs)
	slices.SortFunc(devs, compareDevices)
	devs = slices.Compact(devs)
	var refused []Device
	for _, d := range devs {
		if l.IsOpen(d) || l.heldBy(claim.UID, d) {
			continue
		}
		refused = append(refused, d)
	}
	if len(refused) > 0 {
		return &NotOpenError{Node: l.Node, Claim: claim, Devices: refused}
	}
	l.Open = slices.DeleteFunc(l.Open, func(d Device) bool {
		_, ok := slices.BinarySearchFunc(devs, d, compareDevices)
		return ok
	})
	l.addHold(Hold{Claim: claim, ResourceVersion: rv, Devices: devs})
	return nil
}

// heldBy reports whether a Held entry of the claim with uid names d.
func (l *Ledger) heldBy(uid types.UID, d Device) bool {
	for _, h := range l.Held {
		if h.Claim.UID == uid && slices.Contains(h.Devices, d) {
			return true
		}
	}
	return false
}

// addHold merges h into Held: into the entry of the same claim and
// resourceVersion, or as a new entry, keeping Held sorted.
func (l *Ledger) addHold(h Hold) {
	for i := range l.Held {
		e := &l.Held[i]
		if e.Claim.UID == h.Claim.UID && e.ResourceVersion == h.ResourceVersion {
			e.Devices = append(e.Devices, h.Devices...)
			slices.SortFunc(e.Devices, compareDevices)
			e.Devices = slices.Compact(e.Devices)
			return
		}
	}
	l.Held = append(l.Held, h)
	slices.SortStableFunc(l.Held, func(a, b Hold) int {
		return cmp.Or(strings.Compare(string(a.Claim.UID), string(b.Claim.UID)),
			compareRV(a.ResourceVersion, b.ResourceVersion))
	})
}

// compareRV compares two resourceVersions of one claim; malformed ones
// compare as strings (they come only from a broken writer).
func compareRV(a, b string) int {
	c, err := resourceversion.CompareResourceVersion(a, b)
	if err != nil {
		return strings.Compare(a, b)
	}
	return c
}

// newerRV reports whether a is known to be newer than b.
func newerRV(a, b string) bool {
	c, err := resourceversion.CompareResourceVersion(a, b)
	return err == nil && c > 0
}

// Observation is what the API server showed of one claim: at
// ResourceVersion, the devices of the ledger's node that its allocation
// names (none when it is not allocated), or that it is gone.
type Observation struct {
	// Claim is the claim.
	Claim ClaimRef
	// ResourceVersion is the claim's resourceVersion as observed.
	ResourceVersion string
	// Deleted is true when the claim was observed deleted (or a claim of
	// its namespace and name with another UID was observed).
	Deleted bool
	// Allocated are the devices of the ledger's node its allocation
	// names; empty when it is not allocated or allocated elsewhere.
	Allocated []Device
}

// Observe applies an observation of a claim to the Held entries:
//
//   - an entry of the claim admitted against an older resourceVersion
//     whose devices the observed allocation lacks is dropped (that write
//     can no longer commit, or its allocation ended); so are all of a
//     deleted claim's entries;
//   - devices of the observed allocation that no entry of the claim
//     names (allocated without Admit: before the ledger was seeded, or
//     with the webhook bypassed) are recorded as an entry at the
//     observed resourceVersion; with record false they are not.
//
// It returns whether Held changed and the devices recorded. A recorded
// device leaves Open; the caller (Seed, the planner) closes what
// overlaps it with Reconcile.
func (l *Ledger) Observe(o Observation, record bool) (changed bool, recorded []Device) {
	alloc := slices.Clone(o.Allocated)
	slices.SortFunc(alloc, compareDevices)
	alloc = slices.Compact(alloc)
	has := func(d Device) bool {
		_, ok := slices.BinarySearchFunc(alloc, d, compareDevices)
		return ok
	}
	n := len(l.Held)
	l.Held = slices.DeleteFunc(l.Held, func(h Hold) bool {
		if h.Claim.UID != o.Claim.UID {
			return false
		}
		if o.Deleted {
			return true
		}
		return newerRV(o.ResourceVersion, h.ResourceVersion) && !allOf(h.Devices, has)
	})
	changed = len(l.Held) != n
	if o.Deleted || !record {
		return changed, nil
	}
	for _, d := range alloc {
		if !l.heldBy(o.Claim.UID, d) {
			recorded = append(recorded, d)
		}
	}
	if len(recorded) > 0 {
		l.Open = slices.DeleteFunc(l.Open, func(d Device) bool { return slices.Contains(recorded, d) })
		l.addHold(Hold{Claim: o.Claim, ResourceVersion: o.ResourceVersion, Devices: recorded})
		changed = true
	}
	return changed, recorded
}

func allOf(ds []Device, has func(Device) bool) bool {
	for _, d := range ds {
		if !has(d) {
			return false
		}
	}
	return true
}

// Claims returns the claims Held names, by UID, once each.
func (l *Ledger) Claims() []ClaimRef {
	var out []ClaimRef
	for _, h := range l.Held {
		if len(out) == 0 || out[len(out)-1].UID != h.Claim.UID {
			out = append(out, h.Claim)
		}
	}
	return out
}
