package ledger

import (
	"fmt"

	"github.com/drakit/drakit/partition"
	"github.com/drakit/drakit/partition/counter"
	"github.com/drakit/drakit/partition/plan"
)

// Option configures how an Agent, a MemoryAgent, Ledger.Publish and
// Ledger.Layout plan and publish a node's layouts. Options of the
// planners and of the counter model are other types and do not compile
// here; the two below wrap the ones the ledger applies.
type Option interface{ apply(*options) }

type options struct {
	layout []plan.LayoutOption
	pool   []counter.LayoutOption
}

type optionFunc func(*options)

func (f optionFunc) apply(o *options) { f(o) }

// gather applies opts; a nil one is an error.
func gather(opts []Option) (options, error) {
	var o options
	for i, opt := range opts {
		if opt == nil {
			return o, fmt.Errorf("options[%d] is nil", i)
		}
		opt.apply(&o)
	}
	return o, nil
}

// WithPoolDevices sets the most devices of one layout pool
// (counter.WithPoolDevices); an invalid n is an error of the call that
// publishes.
func WithPoolDevices(n int) Option {
	return optionFunc(func(o *options) { o.pool = append(o.pool, counter.WithPoolDevices(n)) })
}

// WithDefaultMix sets the profiles a partitioned card's free space is
// filled with (plan.WithDefaultMix); a nil mix is an error of the call
// that publishes.
func WithDefaultMix(mix func(s *partition.Scheme) []string) Option {
	return optionFunc(func(o *options) { o.layout = append(o.layout, plan.WithDefaultMix(mix)) })
}
