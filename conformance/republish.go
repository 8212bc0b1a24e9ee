package conformance

import (
	"context"
	"fmt"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/drakit/drakit/internal/slicepool"
)

// sliceMarks are the driver's ResourceSlices for the node as the API
// server showed them at one moment: each slice's resourceVersion by UID.
type sliceMarks map[types.UID]string

// marksOf returns the marks of slices.
func marksOf(slices []*resourceapi.ResourceSlice) sliceMarks {
	m := sliceMarks{}
	for _, sl := range slices {
		m[sl.UID] = sl.ResourceVersion
	}
	return m
}

// writtenSince reports whether slices show a write since m was taken: a
// slice m does not have, one with another resourceVersion, or one of m
// gone. Every write to a slice, by whoever makes it, changes its
// resourceVersion, so this holds from the first write on, however many
// follow.
func writtenSince(m sliceMarks, slices []*resourceapi.ResourceSlice) bool {
	if len(slices) != len(m) {
		return true
	}
	for _, sl := range slices {
		if rv, ok := m[sl.UID]; !ok || rv != sl.ResourceVersion {
			return true
		}
	}
	return false
}

// sliceMarks returns the marks of the driver's slices for the node now,
// or nil when they cannot be listed or were never read (nothing to
// recognize a new publication against).
func (r *runner) sliceMarks(ctx context.Context) sliceMarks {
	if r.slices == nil {
		return nil
	}
	slices, err := r.listSlices(ctx)
	if err != nil {
		return nil
	}
	return marksOf(slices)
}

// republication is the publication of a restarted driver that the suite
// waits for before it allocates from its slices again. It is recognized
// by what the API server shows, not by how long the restart took: a
// write to the driver's slices for the node since the restart (marks
// before it), with every pool complete. A driver that publishes the same
// devices again may write nothing (kubeletplugin's slice controller
// leaves identical slices alone); after PublishTimeout from its
// registration the suite judges on the slices as they are, and says so.
type republication struct {
	before     sliceMarks
	registered time.Time
	// blocking: the restart fixture's restart, whose slices are judged
	// (restart.device-names) and allocated from: the first need waits
	// for the publication. Otherwise (a crash's restart) each check
	// looks once whether it came, and allocates from what is there
	// until it did, as the scheduler does.
	blocking bool
	done     bool
	// wrote is set when the new process's write was seen; after is how
	// long after its registration that was (or the bound, when no write
	// came).
	wrote bool
	after time.Duration
}

// restarted records that the driver was restarted and registered again
// (r.registered), with before the marks of its slices before the
// restart. A restart while an earlier one's publication is still awaited
// keeps the earlier marks: any write since counts.
func (r *runner) restarted(before sliceMarks, blocking bool) {
	if before == nil {
		return
	}
	if p := r.repub; p != nil && !p.done {
		before, blocking = p.before, blocking || p.blocking
	}
	r.repub = &republication{before: before, registered: r.registered, blocking: blocking}
}

// freshSlices makes the slices the suite allocates from the restarted
// driver's, once its publication is recognized (see republication): it
// waits for it when the restart is the fixture's (wait), else looks once.
func (r *runner) freshSlices(ctx context.Context, wait bool) {
	p := r.repub
	if p == nil || p.done {
		return
	}
	wait = wait && p.blocking
	deadline := p.registered.Add(r.cfg.PublishTimeout)
	for {
		slices, err := r.listSlices(ctx)
		if err == nil {
			ps := slicepool.Group(slices)
			complete := len(slices) > 0 && len(slicepool.Incomplete(ps)) == 0
			switch {
			case complete && writtenSince(p.before, slices):
				r.useSlices(ps)
				p.done, p.wrote, p.after = true, true, time.Since(p.registered)
				return
			case wait && time.Now().After(deadline):
				if complete {
					r.useSlices(ps)
				}
				p.done, p.after = true, r.cfg.PublishTimeout
				r.logger.Info("The restarted driver wrote no ResourceSlice; judging on its slices as they are", "timeout", r.cfg.PublishTimeout)
				return
			}
		}
		if !wait || ctx.Err() != nil {
			return
		}
		if exited, _ := r.driverExited(); exited {
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// relist makes the driver's slices for the node as the API server shows
// them now the ones the suite allocates from, if every pool is complete
// and there was a write since the suite read them, and reports whether
// it did. A driver may publish its pools one after another (the suite
// starts once those it sees are complete) and republishes as it likes;
// the scheduler allocates from its current view, so a claim that finds
// no room in the suite's view is tried again on this one before it
// fails.
func (r *runner) relist(ctx context.Context) bool {
	slices, err := r.listSlices(ctx)
	if err != nil || len(slices) == 0 || !writtenSince(marksOf(r.slices), slices) {
		return false
	}
	ps := slicepool.Group(slices)
	if len(slicepool.Incomplete(ps)) > 0 {
		return false
	}
	r.useSlices(ps)
	return true
}

// republishedNote says, for a check judged on the slices after the
// restart fixture's restart, how they were recognized as the new
// process's.
func (r *runner) republishedNote() string {
	p := r.repub
	switch {
	case p == nil || !p.done:
		return ""
	case p.wrote:
		return fmt.Sprintf(" (the restarted driver's slices: its write seen %.1f s after it registered again)", p.after.Seconds())
	}
	return fmt.Sprintf("; not republished within %s: the restarted driver wrote no ResourceSlice for the node in that time after it registered again, so this is judged on the slices from before the restart (a driver that publishes the same devices may leave them as they are)", p.after)
}
