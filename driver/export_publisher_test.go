package driver

import "time"

// WithSliceSyncDelay sets the slice controller's delay after a slice
// event (resourceslice.Options.SyncDelay; default 30 s).
func WithSliceSyncDelay(d time.Duration) Option {
	return func(o *options) error { o.sliceSyncDelay = d; return nil }
}

// WithSoloPublisher turns the one-publisher rule off: each instance
// publishes its own view, as the runtime did before it (for the
// measurement that compares the two).
func WithSoloPublisher() Option {
	return func(o *options) error { o.soloPublisher = true; return nil }
}
