package ledger

import (
	"fmt"
	"slices"

	"github.com/drakit/drakit/partition"
)

// InUse is what is in use on one card of the node, from the two sources
// a dynamic driver reads before each Sync. It needs both: the hardware
// still lists a partition the journal has released and is destroying,
// and the journal holds a partition being made before the hardware lists
// it, and the card used whole, which the hardware lists as nothing.
type InUse struct {
	// Made are the partitions the hardware lists on the card (the
	// vendor's list), complete or made in part, whoever made them.
	Made partition.Layout
	// Journal are the partitions the partition lifecycle's journal holds
	// on the card and has not released (lifecycle.CardInUse).
	Journal partition.Layout
	// Whole is true when the journal holds the card used whole
	// (lifecycle.CardInUse).
	Whole bool
}

// OverlapError is a partition in use on a card that Card left out of
// Busy: with the partitions taken before it, it is not a valid layout.
type OverlapError struct {
	// Card is the card's index.
	Card int
	// Device is the partition's device name (Scheme.DeviceName), or its
	// profile and start when the scheme cannot name it.
	Device string
	// Partition is the partition left out.
	Partition partition.Instance
	// Err is the scheme's reason (Scheme.Validate).
	Err error
}

func (e *OverlapError) Error() string {
	return fmt.Sprintf("card %d: in-use partition %s left out of the layout: %v",
		e.Card, e.Device, e.Err)
}

func (e *OverlapError) Unwrap() error { return e.Err }

// Card returns c with Busy and BusyWhole set from u, keeping c's other
// fields, and an *OverlapError for each in-use partition it left out.
//
// The caller may rely on this: Busy holds each partition of u.Made, then
// of u.Journal, once (by profile and start, InUse set), except one that
// is not a valid layout with those taken before it (an overlap, an
// unknown profile or placement), which is left out and reported; Busy is
// a valid layout of c.Scheme. BusyWhole is u.Whole unless partitions are
// in use too: that happens only while the card goes from whole to
// partitions or back, and then the partitions stay Busy and the whole
// card waits (BusyWhole false), so Publish never opens the whole card
// beside a partition. The caller must read u afresh for every Sync and
// log the errors: a left-out partition is in use but not Busy.
func (u InUse) Card(c AgentCard) (AgentCard, []error) {
	c.Busy, c.BusyWhole = nil, u.Whole
	if c.Scheme == nil {
		return c, []error{fmt.Errorf("card %d: no scheme", c.Index)}
	}
	var errs []error
	for _, in := range slices.Concat(u.Made, u.Journal) {
		in = partition.Instance{Profile: in.Profile, Start: in.Start, InUse: true}
		if hasInstance(c.Busy, in) {
			continue
		}
		if err := c.Scheme.Validate(append(slices.Clone(c.Busy), in)); err != nil {
			name, nerr := c.Scheme.DeviceName(c.Index, in.Profile, in.Start)
			if nerr != nil {
				name = fmt.Sprintf("%s at %d", in.Profile, in.Start)
			}
			errs = append(errs, &OverlapError{Card: c.Index, Device: name, Partition: in, Err: err})
			continue
		}
		c.Busy = append(c.Busy, in)
	}
	if len(c.Busy) > 0 {
		c.BusyWhole = false
	}
	return c, errs
}
