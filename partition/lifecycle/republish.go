package lifecycle

import (
	"sync"
	"time"
)

// republisher coalesces changes into calls of notify: the first change
// after a quiet interval is notified after delay, the next ones no
// sooner than interval after the last notification, each batch once.
type republisher struct {
	notify          func()
	delay, interval time.Duration

	mu      sync.Mutex
	pending bool      // a notification is scheduled
	last    time.Time // when the last one ran
}

func (r *republisher) changed() {
	if r.notify == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.pending {
		return // the scheduled notification covers this change
	}
	r.pending = true
	wait := r.delay
	if next := time.Until(r.last.Add(r.interval)); next > wait {
		wait = next
	}
	time.AfterFunc(wait, func() {
		r.mu.Lock()
		r.pending, r.last = false, time.Now()
		r.mu.Unlock()
		r.notify()
	})
}
