package engine

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
)

// Names are what a scheme's devices, counter sets, counters, attributes
// and capacities are called when published, and the nouns its messages
// use: the vendor's own. An empty field takes the default its comment
// gives. Attribute names may be "-", which leaves the attribute out (at
// most 8 attributes per device keep the scheduler's per-device cost
// down).
type Names struct {
	// Card and Partition are the nouns for one card and one partition in
	// messages ("card", "partition").
	Card      string `json:"card,omitempty"`
	Partition string `json:"partition,omitempty"`
	// MemoryUnit and ComputeUnit are the nouns for one unit in messages
	// ("memory unit", "compute unit"); a plural adds "s".
	MemoryUnit  string `json:"memoryUnit,omitempty"`
	ComputeUnit string `json:"computeUnit,omitempty"`

	// Device is the first part of every device name ("card"): the whole
	// card with index i is "<Device>-<i>", a partition
	// "<Device>-<i>-<profile's DNS form>-<placement start>", e.g.
	// "card-0-half-2". Its counter set is "<Device>-<i>-<CounterSet>"
	// (CounterSet: "counters"). Device must be a DNS label that starts
	// with a letter and ends with one.
	Device     string `json:"device,omitempty"`
	CounterSet string `json:"counterSet,omitempty"`

	// MemoryCounter names the memory counters: for placed memory the
	// prefix of each unit's counter ("memory-": "memory-0", ...), for
	// counted memory the one counter ("memory"). ComputeCounter the
	// same for compute ("compute-", "compute").
	MemoryCounter  string `json:"memoryCounter,omitempty"`
	ComputeCounter string `json:"computeCounter,omitempty"`
	// PartitionsCounter is the counter of Scheme.MaxPartitions
	// ("partitions").
	PartitionsCounter string `json:"partitionsCounter,omitempty"`
	// InstancesCounter is the prefix of a profile's instance counter,
	// followed by its ID ("instances-").
	InstancesCounter string `json:"instancesCounter,omitempty"`
	// ModeCounter is the prefix of the counters that keep a card's
	// partitions in one mode, followed by a unit number ("mode-").
	ModeCounter string `json:"modeCounter,omitempty"`

	// CardType and PartitionType are the values of the type attribute
	// of the whole card's device and of a partition's ("card",
	// "partition").
	CardType      string `json:"cardType,omitempty"`
	PartitionType string `json:"partitionType,omitempty"`

	// Attribute names: the type ("type"), the card's index ("index"), the
	// scheme's name ("model"), the card's UUID ("uuid", published when
	// known), the profile's name and ID ("profile", "profileID", on
	// partitions), and the first unit and unit count of a placed
	// dimension ("memoryStart", "computeStart", on partitions that take
	// units of it; the counts "memorySize" and "computeSize" are left
	// out unless named, the profile and the capacities say them), so
	// that the defaults stay within 8 attributes per device.
	TypeAttribute         string `json:"typeAttribute,omitempty"`
	IndexAttribute        string `json:"indexAttribute,omitempty"`
	ModelAttribute        string `json:"modelAttribute,omitempty"`
	UUIDAttribute         string `json:"uuidAttribute,omitempty"`
	ProfileAttribute      string `json:"profileAttribute,omitempty"`
	ProfileIDAttribute    string `json:"profileIDAttribute,omitempty"`
	MemoryStartAttribute  string `json:"memoryStartAttribute,omitempty"`
	MemorySizeAttribute   string `json:"memorySizeAttribute,omitempty"`
	ComputeStartAttribute string `json:"computeStartAttribute,omitempty"`
	ComputeSizeAttribute  string `json:"computeSizeAttribute,omitempty"`

	// Capacity names: the device's memory in bytes ("memory") and its
	// compute units ("compute").
	MemoryCapacity  string `json:"memoryCapacity,omitempty"`
	ComputeCapacity string `json:"computeCapacity,omitempty"`
}

// Omit as an attribute name leaves the attribute out.
const Omit = "-"

var (
	dnsLabelRE   = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	devicePartRE = regexp.MustCompile(`^[a-z]([-a-z0-9]*[a-z])?$`)
	identRE      = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
)

func dnsLabel(s string) error {
	if len(s) > 63 || !dnsLabelRE.MatchString(s) {
		return fmt.Errorf("%q is not a DNS label", s)
	}
	return nil
}

// withDefaults fills the empty fields and checks the result.
func (n Names) withDefaults(memPlaced, compPlaced bool) (Names, error) {
	def := func(f *string, v string) {
		if *f == "" {
			*f = v
		}
	}
	def(&n.Card, "card")
	def(&n.Partition, "partition")
	def(&n.MemoryUnit, "memory unit")
	def(&n.ComputeUnit, "compute unit")
	def(&n.Device, "card")
	def(&n.CounterSet, "counters")
	if memPlaced {
		def(&n.MemoryCounter, "memory-")
	} else {
		def(&n.MemoryCounter, "memory")
	}
	if compPlaced {
		def(&n.ComputeCounter, "compute-")
	} else {
		def(&n.ComputeCounter, "compute")
	}
	def(&n.PartitionsCounter, "partitions")
	def(&n.InstancesCounter, "instances-")
	def(&n.ModeCounter, "mode-")
	def(&n.CardType, "card")
	def(&n.PartitionType, "partition")
	def(&n.TypeAttribute, "type")
	def(&n.IndexAttribute, "index")
	def(&n.ModelAttribute, "model")
	def(&n.UUIDAttribute, "uuid")
	def(&n.ProfileAttribute, "profile")
	def(&n.ProfileIDAttribute, "profileID")
	def(&n.MemoryStartAttribute, "memoryStart")
	def(&n.MemorySizeAttribute, Omit)
	def(&n.ComputeStartAttribute, "computeStart")
	def(&n.ComputeSizeAttribute, Omit)
	def(&n.MemoryCapacity, "memory")
	def(&n.ComputeCapacity, "compute")
	if len(n.Device) > 40 || !devicePartRE.MatchString(n.Device) {
		return n, fmt.Errorf("names.device %q: want a DNS label of at most 40 characters that starts and ends with a letter", n.Device)
	}
	if err := dnsLabel(n.CounterSet); err != nil {
		return n, fmt.Errorf("names.counterSet: %v", err)
	}
	for _, c := range []struct {
		field, v string
		prefix   bool
	}{
		{"memoryCounter", n.MemoryCounter, memPlaced},
		{"computeCounter", n.ComputeCounter, compPlaced},
		{"partitionsCounter", n.PartitionsCounter, false},
		{"instancesCounter", n.InstancesCounter, true},
		{"modeCounter", n.ModeCounter, true},
	} {
		v := c.v
		if c.prefix {
			v += "0"
		}
		if err := dnsLabel(v); err != nil {
			return n, fmt.Errorf("names.%s %q: a counter name made from it: %v", c.field, c.v, err)
		}
	}
	for _, v := range []struct{ field, v string }{{"cardType", n.CardType}, {"partitionType", n.PartitionType}} {
		if len(v.v) > 64 {
			return n, fmt.Errorf("names.%s %q: longer than 64 bytes", v.field, v.v)
		}
	}
	for _, a := range []struct{ field, v string }{
		{"typeAttribute", n.TypeAttribute}, {"indexAttribute", n.IndexAttribute}, {"modelAttribute", n.ModelAttribute},
		{"uuidAttribute", n.UUIDAttribute}, {"profileAttribute", n.ProfileAttribute}, {"profileIDAttribute", n.ProfileIDAttribute},
		{"memoryStartAttribute", n.MemoryStartAttribute}, {"memorySizeAttribute", n.MemorySizeAttribute},
		{"computeStartAttribute", n.ComputeStartAttribute}, {"computeSizeAttribute", n.ComputeSizeAttribute},
		{"memoryCapacity", n.MemoryCapacity}, {"computeCapacity", n.ComputeCapacity},
	} {
		if a.v != Omit && (len(a.v) > 32 || !identRE.MatchString(a.v)) {
			return n, fmt.Errorf("names.%s %q: want a C identifier of at most 32 characters, or %q", a.field, a.v, Omit)
		}
	}
	return n, nil
}

// CardDeviceName is the name of the whole card's device for card index.
func (s *Scheme) CardDeviceName(index int) string {
	return s.Names.Device + "-" + strconv.Itoa(index)
}

// CounterSetName is the name of card index's counter set.
func (s *Scheme) CounterSetName(index int) string {
	return s.Names.Device + "-" + strconv.Itoa(index) + "-" + s.Names.CounterSet
}

// PoolName is the name of card index's pool in CounterModel.CardPools:
// the node's pool name, "/", Names.Device, "-" and the index with at
// least two digits, so that the allocator, which walks a node's pools by
// name, walks them in card order.
func (s *Scheme) PoolName(name string, index int) string {
	return fmt.Sprintf("%s/%s-%02d", name, s.Names.Device, index)
}

// slotDeviceName is the device name of slot si on card index.
func (s *Scheme) slotDeviceName(index, si int) string {
	return s.Names.Device + "-" + strconv.Itoa(index) + s.suffix[si]
}

// DeviceName returns the device name of a partition of the named profile
// at the placement start on card index, or of the whole card when
// profile is empty. The error wraps ErrUnknownProfile or names the
// unknown placement.
func (s *Scheme) DeviceName(index int, profile string, start int) (string, error) {
	if profile == "" {
		return s.CardDeviceName(index), nil
	}
	pi, err := s.profileIndex(profile)
	if err != nil {
		return "", err
	}
	si := s.slotIndex(pi, start)
	if si < 0 {
		return "", fmt.Errorf("device name: %w: %s has no placement %d", ErrPlacement, s.Profiles[pi].Name, start)
	}
	return s.slotDeviceName(index, si), nil
}

// DeviceRef is what a device name of the counter model says.
type DeviceRef struct {
	// Card is the card's index.
	Card int `json:"card"`
	// Profile is the profile's name; "" for the whole card.
	Profile string `json:"profile,omitempty"`
	// Start is the placement's start; 0 for the whole card.
	Start int `json:"start"`
}

// ErrDeviceName is returned (wrapped) by ParseDeviceName for a name that
// is not one of the scheme's devices.
var ErrDeviceName = errors.New("not a device name of the scheme")

// ParseDeviceName reads back a device name of the scheme's counter model
// (see Names.Device); the card index is any non-negative number.
func (s *Scheme) ParseDeviceName(name string) (DeviceRef, error) {
	fail := func() (DeviceRef, error) {
		return DeviceRef{}, fmt.Errorf("parse device name %q: %w %s", name, ErrDeviceName, s.Name)
	}
	p := s.Names.Device + "-"
	if len(name) <= len(p) || name[:len(p)] != p {
		return fail()
	}
	rest := name[len(p):]
	i := 0
	for i < len(rest) && rest[i] >= '0' && rest[i] <= '9' {
		i++
	}
	if i == 0 || i > 9 || (i > 1 && rest[0] == '0') {
		return fail()
	}
	card, _ := strconv.Atoi(rest[:i])
	if i == len(rest) {
		return DeviceRef{Card: card}, nil
	}
	si, ok := s.bySuffix[rest[i:]]
	if !ok {
		return fail()
	}
	return DeviceRef{Card: card, Profile: s.Profiles[s.slots[si].prof].Name, Start: s.slots[si].start}, nil
}
