package driver

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2"

	"github.com/drakit/drakit/statefile"
)

// publisherFile is the record, in the lock folder, of which process
// publishes the node's ResourceSlices (see Runtime.Publishing).
const publisherFile = "publisher.json"

// handoffWait bounds how long a new publisher waits for the previous one
// to say it stopped writing (it checks every publisherPoll); a previous
// publisher whose process is gone is not waited for.
const handoffWait = 10 * time.Second

// publisherPoll is how often a process reads the publisher record: a
// follower to see the publisher gone, the publisher to see a follower's
// inventory change or a newer process take the role.
const publisherPoll = time.Second

// publisherDoc is the publisher record.
type publisherDoc struct {
	// Publisher is the instance that publishes.
	Publisher string `json:"publisher"`
	// From is the instance Publisher took the role from, Released true
	// once that one stopped writing.
	From     string `json:"from,omitempty"`
	Released bool   `json:"released,omitempty"`
	// Changes counts the inventory changes followers handed to the
	// publisher.
	Changes uint64 `json:"changes,omitempty"`
}

// slicePublisher writes the node's ResourceSlices through the
// dynamic-resource-allocation resourceslice controller while this process
// is the publisher.
type slicePublisher struct {
	d    *Runtime
	id   string
	doc  statefile.Document
	live *statefile.Lock // this instance's liveness lock

	publishing atomic.Bool
	mu         sync.Mutex
	ctrl       *resourceslice.Controller
	queue      workqueue.TypedRateLimitingInterface[string]
	seen       atomic.Uint64 // the followers' changes already rediscovered
	// solo turns the one-publisher rule off (each process publishes its
	// own view, as before it): for the measurement that compares the two.
	solo bool
}

// Publishing reports whether this process writes the node's
// ResourceSlices now; false before [Runtime.Run] took the role. One
// process of a driver on a node publishes at a time: the one that
// started last, until its process is gone. A process that does not
// publish never writes a slice; its inventory changes make the publisher
// discover again, so a vendor's [Discoverer] must read the node's
// devices, not what its own process did to them. How the role moves
// during a rolling update is in docs/runtime.md.
func (d *Runtime) Publishing() bool {
	d.mu.Lock()
	p := d.slices
	d.mu.Unlock()
	return p != nil && p.publishing.Load()
}

// livenessFile is an instance's liveness lock in the lock folder.
func livenessFile(dir, id string) string {
	return filepath.Join(dir, "publisher-"+id+".lock")
}

// newSlicePublisher takes this process's liveness lock and the publisher
// role (it started last). The previous publisher, if it still runs, is
// recorded to hand over.
func newSlicePublisher(d *Runtime) (*slicePublisher, error) {
	id := string(d.o.rollingUpdateUID)
	if id == "" {
		b := make([]byte, 8)
		if _, err := rand.Read(b); err != nil {
			return nil, fmt.Errorf("publisher identity: %w", err)
		}
		id = fmt.Sprintf("pid%d-%s", os.Getpid(), hex.EncodeToString(b))
	}
	id = strings.NewReplacer("/", "-", ".", "-").Replace(id)
	p := &slicePublisher{
		d:    d,
		id:   id,
		doc:  statefile.Document{Path: filepath.Join(d.o.lockDir, publisherFile), Volatile: true},
		solo: d.o.soloPublisher,
	}
	// Under the cross-instance lock: no other instance removes a
	// liveness file it finds unlocked between this one's creation and
	// its lock.
	err := d.withCrossInstanceLock(func() error {
		l, err := statefile.TryAcquire(livenessFile(d.o.lockDir, id), statefile.Held())
		if err != nil {
			return fmt.Errorf("publisher liveness lock: %w", err)
		}
		p.live = l
		p.cleanStale()
		var doc publisherDoc
		return p.doc.Update(&doc, func(bool) (bool, error) {
			from := doc.Publisher
			if from == id || from != "" && !p.alive(from) {
				from = ""
			}
			doc = publisherDoc{Publisher: id, From: from, Changes: doc.Changes}
			p.seen.Store(doc.Changes)
			return true, nil
		})
	})
	if err != nil {
		_ = p.live.Release()
		return nil, fmt.Errorf("take the publisher role: %w", err)
	}
	return p, nil
}

// alive reports whether instance id's process runs: its liveness lock is
// held.
func (p *slicePublisher) alive(id string) bool {
	if id == p.id {
		return true
	}
	l, err := statefile.TryAcquire(livenessFile(p.d.o.lockDir, id), statefile.Held())
	if errors.Is(err, statefile.ErrLocked) {
		return true
	}
	if err == nil {
		_ = l.Release()
	}
	return false
}

// cleanStale removes the liveness files of instances that are gone; the
// cross-instance lock must be held.
func (p *slicePublisher) cleanStale() {
	ents, _ := filepath.Glob(filepath.Join(p.d.o.lockDir, "publisher-*.lock"))
	for _, e := range ents {
		id := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(e), "publisher-"), ".lock")
		if id != p.id && !p.alive(id) {
			_ = os.Remove(e)
		}
	}
}

// read returns the publisher record.
func (p *slicePublisher) read() (publisherDoc, error) {
	var doc publisherDoc
	_, err := p.doc.Read(&doc)
	return doc, err
}

// stop stops the slice controller, if it runs: its slices stay.
func (p *slicePublisher) stop() {
	p.mu.Lock()
	ctrl := p.ctrl
	p.ctrl, p.queue = nil, nil
	p.mu.Unlock()
	ctrl.Stop()
}

// close stops writing and releases the liveness lock: a follower takes
// the role at its next poll.
func (p *slicePublisher) close() {
	p.publishing.Store(false)
	p.stop()
	_ = p.live.Release()
}

// role decides, before a publish, whether this process publishes: it
// does when the record names it (after the previous publisher released
// the role, or at most handoffWait), or when the publisher it names is
// gone (it takes the role). A process that is not the publisher stops
// writing, and says it released the role when the publisher took it from
// it.
func (p *slicePublisher) role(ctx context.Context) (bool, error) {
	if p.solo {
		p.publishing.Store(true)
		return true, nil
	}
	doc, err := p.read()
	if err != nil {
		return false, err
	}
	for doc.Publisher != p.id {
		if p.alive(doc.Publisher) {
			p.follow(ctx, doc)
			return false, nil
		}
		// Gone: take the role, unless another follower took it first.
		if doc, err = p.take(ctx, doc.Publisher); err != nil {
			return false, err
		}
	}
	if !p.publishing.Load() && doc.From != "" && !doc.Released {
		if err := p.awaitRelease(ctx, doc.From); err != nil {
			return false, err
		}
	}
	p.publishing.Store(true)
	return true, nil
}

// follow stops this process's writing and records the release.
func (p *slicePublisher) follow(ctx context.Context, doc publisherDoc) {
	was := p.publishing.Swap(false)
	p.stop()
	if was {
		klog.FromContext(ctx).
			Info("Another instance of the driver publishes the node's ResourceSlices now; this "+
				"one stopped writing them", "publisher", doc.Publisher)
	}
	if doc.From == p.id && !doc.Released {
		var d publisherDoc
		err := p.doc.Update(&d, func(bool) (bool, error) {
			if d.From != p.id || d.Released {
				return false, nil
			}
			d.Released = true
			return true, nil
		})
		if err != nil {
			klog.FromContext(ctx).
				Error(err, "Recording that this instance stopped writing the node's ResourceSlices")
		}
	}
}

// take makes this process the publisher in place of gone, whose process
// ended, unless another process took the role meanwhile; it returns the
// record as it is then.
func (p *slicePublisher) take(ctx context.Context, gone string) (publisherDoc, error) {
	var d publisherDoc
	err := p.doc.Update(&d, func(bool) (bool, error) {
		if d.Publisher != gone {
			return false, nil // another follower took it first
		}
		d = publisherDoc{Publisher: p.id, Changes: d.Changes}
		p.seen.Store(d.Changes)
		return true, nil
	})
	if err != nil {
		return d, fmt.Errorf("take the publisher role: %w", err)
	}
	if d.Publisher == p.id {
		klog.FromContext(ctx).
			Info("The instance that published the node's ResourceSlices is gone; this one "+
				"publishes them", "was", gone)
	}
	return d, nil
}

// awaitRelease waits until the previous publisher recorded that it
// stopped writing, its process ended, or handoffWait passed.
func (p *slicePublisher) awaitRelease(ctx context.Context, from string) error {
	logger := klog.FromContext(ctx)
	deadline := time.Now().Add(handoffWait)
	tick := time.NewTicker(publisherPoll / 10)
	defer tick.Stop()
	for {
		doc, err := p.read()
		switch {
		case err != nil:
			return err
		case doc.Publisher != p.id:
			return nil // a newer one took it: role() finds out next time
		case doc.Released || doc.From != from || !p.alive(from):
			logger.Info("Took over publishing the node's ResourceSlices", "from", from)
			return nil
		case time.Now().After(deadline):
			logger.Info(
				"The previous instance did not say it stopped writing the node's "+
					"ResourceSlices; publishing anyway",
				"previous",
				from,
				"waited",
				handoffWait,
			)
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// handOver tells the publisher that this follower's inventory changed:
// the publisher discovers its own again (the devices are the node's, the
// same for both processes).
func (p *slicePublisher) handOver() error {
	var d publisherDoc
	return p.doc.Update(&d, func(bool) (bool, error) {
		d.Changes++
		return true, nil
	})
}

// write hands res to the slice controller, starting it on the first
// call: then every pool of the driver on the node that res lacks is
// synced (removed) at once, not after the controller's sync delay.
func (p *slicePublisher) write(ctx context.Context, res *resourceslice.DriverResources) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ctrl != nil {
		p.ctrl.Update(res)
		return nil
	}
	p.queue = workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.DefaultTypedControllerRateLimiter[string](),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "node_resource_slices"},
	)
	d := p.d
	delay := d.o.sliceSyncDelay
	ctrl, err := resourceslice.StartController(ctx, resourceslice.Options{
		DriverName: d.name,
		KubeClient: d.client,
		Owner:      &resourceslice.Owner{APIVersion: "v1", Kind: "Node", Name: d.o.nodeName},
		Resources:  res,
		Queue:      p.queue,
		SyncDelay:  &delay,
		ErrorHandler: func(ctx context.Context, err error, msg string) {
			// Publishing errors are retried by the controller.
			d.metrics.error("background", ReasonPublish)
			d.metrics.apiReachable.Set(0)
			klog.FromContext(ctx).Error(err, msg)
		},
	})
	if err != nil {
		return fmt.Errorf("start the ResourceSlice controller: %w", err)
	}
	p.ctrl = ctrl
	// The previous process's pools that this inventory lacks go now.
	for _, o := range d.observed.GetStore().List() {
		if s, ok := o.(*resourceapi.ResourceSlice); ok {
			if _, want := res.Pools[s.Spec.Pool.Name]; !want {
				p.queue.Add(s.Spec.Pool.Name)
			}
		}
	}
	return nil
}

// run follows the publisher record until ctx ends: a follower takes the
// role when the publisher's process is gone, the publisher discovers
// again when a follower handed over a change, and stops writing when a
// newer instance took the role.
func (p *slicePublisher) run(ctx context.Context) {
	if p.solo {
		return
	}
	tick := time.NewTicker(publisherPoll)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		doc, err := p.read()
		if err != nil {
			klog.FromContext(ctx).V(3).Info("Reading the publisher record", "err", err)
			continue
		}
		switch {
		case doc.Publisher == p.id:
			if p.seen.Swap(doc.Changes) != doc.Changes {
				p.d.rediscover()
			}
			if !p.publishing.Load() {
				p.d.kickPublish()
			}
		case p.publishing.Load() || !p.alive(doc.Publisher):
			// A newer instance took the role (release it now, not at
			// the next publish), or the publisher is gone (take it).
			p.d.kickPublish()
		}
	}
}
