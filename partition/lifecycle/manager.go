package lifecycle

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"k8s.io/klog/v2"

	"github.com/drakit/drakit/driver"
	"github.com/drakit/drakit/statefile"
)

// KeyFunc names the partition an allocated device is, from the device
// and, for a device the runtime holds, the Data its PrepareDevice
// returned (nil at prepare). ok is false for a device that is no
// partition and no card used whole. A key for a card that is not
// [Dynamic] is ignored, so a vendor whose names are the same for an
// administrator's partitions and its own may return keys for both: the
// lifecycle then knows which partition a claim holds on a card that an
// administrator names dynamic later. Prefer the card's stable identity
// recorded in data over one derived from a name with an index in it.
type KeyFunc func(dev driver.AllocatedDevice, data json.RawMessage) (key Key, ok bool)

// Manager runs the lifecycle of the partitions made at prepare on the
// cards an administrator named dynamic, on a [Tool], with the guarantees
// the package doc lists (the intent journal, recorded ownership,
// reconcile at start, admin access, one driver per state folder, lost
// cards, republish). It is a [driver.ClaimPreparer] and a
// [driver.Reconciler]: a vendor's preparer calls PrepareClaim,
// UnprepareClaim and Reconcile from its own (or embeds the Manager) and
// hands its containers the partitions that [Manager.Made] returns.
//
// Its methods may be called concurrently, as the runtime does for
// different claims: the work on one card is one call at a time, and a
// call waits only for the cards of its own claim ([Manager.PrepareClaim]
// says how long). [Manager.Close] must come after every other call has
// returned.
type Manager struct {
	dir     string
	tool    Tool
	keyOf   KeyFunc
	o       options
	folder  *folder
	journal journal
	rep     republisher

	mu     sync.Mutex
	states map[string]CardState
	made   map[Key]Partition
	closed bool
}

var (
	_ driver.ClaimPreparer = (*Manager)(nil)
	_ driver.Reconciler    = (*Manager)(nil)
)

// Option configures [Open].
type Option func(*options) error

type options struct {
	dynamic     []string
	volatile    bool
	peer        *peer
	notify      func()
	delay       time.Duration
	interval    time.Duration
	writeOption []statefile.WriteOption
	cardTimeout time.Duration
	configs     *driver.ConfigScheme
}

// WithDynamicCards names the cards (by their stable identity, as in
// [Key.Card]) whose partitions the lifecycle owns: it makes them at
// prepare and destroys, at start, every one on them that no held claim
// names, whoever made it. Naming a card hands it over: name only cards
// whose partitions nobody else needs. Without this option no card is
// dynamic, and every card the lifecycle made partitions on before is
// drained ([Draining]). The list is recorded in the state folder.
func WithDynamicCards(cards ...string) Option {
	return func(o *options) error {
		for _, c := range cards {
			if c == "" {
				return errors.New("dynamic card: empty name")
			}
		}
		o.dynamic = slices.Clone(cards)
		return nil
	}
}

// WithoutFsync makes the journal's changes survive a killed process but
// not a power loss (they are renamed into place, not fsynced): enough
// for partitions that a power loss destroys too (a reset card comes up
// without them), and it saves two fsyncs per prepare and per release.
func WithoutFsync() Option {
	return func(o *options) error { o.volatile = true; return nil }
}

// WithRollingUpdate lets the two instances of one driver's rolling update
// ([driver.WithRollingUpdate]) share the state folder: Open admits this
// process beside at most one other, which must run with the same driver
// and owner, and refuses anyone else with [ErrStateInUse]. owner must be
// the same for both instances and differ for any other deployment (the
// DaemonSet's namespace/name). The two take turns on each card through a
// lock file per card.
func WithRollingUpdate(driverName, owner string) Option {
	return func(o *options) error {
		if driverName == "" || owner == "" {
			return fmt.Errorf("rolling update: driver %q and owner %q must not be empty",
				driverName, owner)
		}
		o.peer = &peer{Driver: driverName, Owner: owner}
		return nil
	}
}

// WithSharedState is [WithRollingUpdate] for a driver and owner that
// are not known: two processes that both use it share the folder, and a
// third is refused.
//
// Deprecated: use WithRollingUpdate, which also refuses a second release
// of the driver on the node. WithSharedState will be removed in the next
// release.
func WithSharedState() Option {
	return func(o *options) error { o.peer = &peer{}; return nil }
}

// WithConfigs decodes and checks the opaque configuration of a claim's
// devices with the driver's scheme in [Manager.PrepareClaim], before
// anything of the claim is recorded or made: a bad one fails the prepare
// with the message admission gives (package admission), and a good one
// reaches a tool that is a [ConfigCreator]. Without it configuration is
// the preparer's to decode.
func WithConfigs(s *driver.ConfigScheme) Option {
	return func(o *options) error {
		if s == nil {
			return errors.New("configs: the scheme is nil")
		}
		o.configs = s
		return nil
	}
}

// DefaultRepublishDelay is how long after a partition was made or
// destroyed notify runs (see [WithRepublish]).
const DefaultRepublishDelay = 100 * time.Millisecond

// DefaultRepublishInterval is the least time between two notifications
// (see [WithRepublish]).
const DefaultRepublishInterval = time.Second

// WithRepublish makes the lifecycle call notify, so that the vendor
// republishes its inventory, delay after partitions were made or
// destroyed (or [Manager.Changed] was called) and no sooner than interval
// after the previous call; the changes until then share one call. With
// the default delay a call comes after the prepare or unprepare that
// caused it has answered the kubelet. Without this option nothing is
// notified. Defaults: [DefaultRepublishDelay], [DefaultRepublishInterval];
// a zero interval bounds nothing beyond the delay.
func WithRepublish(notify func(), delay, interval time.Duration) Option {
	return func(o *options) error {
		if notify == nil {
			return errors.New("republish: notify is nil")
		}
		if delay < 0 || interval < 0 {
			return fmt.Errorf("republish: delay %v and interval %v must not be negative", delay, interval)
		}
		o.notify, o.delay, o.interval = notify, delay, interval
		return nil
	}
}

// DefaultCardTimeout is how long [Manager.Reconcile] waits for one card
// (see [WithCardTimeout]).
const DefaultCardTimeout = time.Minute

// WithCardTimeout sets how long [Manager.Reconcile] waits for one card's
// tool calls (default [DefaultCardTimeout]): a card that does not answer
// by then (lost, its calls hung) keeps its records as they are, and the
// start goes on with the others. Its calls get a context that ends then.
func WithCardTimeout(d time.Duration) Option {
	return func(o *options) error {
		if d <= 0 {
			return fmt.Errorf("card timeout %v is not positive", d)
		}
		o.cardTimeout = d
		return nil
	}
}

// Open opens the lifecycle state in folder dir (created if missing) for
// the partitions of tool, whose devices keyOf names, and takes the
// folder's instance lock: another process is refused with
// [ErrStateInUse] (see [WithRollingUpdate] for the one exception). Opens
// of one folder in the same process with the same options share the
// lock and take turns per card; the last Close releases it. Open records
// the card states ([WithDynamicCards]; a card no longer named becomes
// [Draining]) and touches no card: call [Manager.Reconcile] with the claims the runtime holds
// before the first prepare (the runtime does, for a preparer that is a
// [driver.Reconciler]). A journal that does not decode is moved aside
// (its name + ".corrupt") and Reconcile rebuilds it.
func Open(dir string, tool Tool, keyOf KeyFunc, opts ...Option) (*Manager, error) {
	o := options{delay: DefaultRepublishDelay, interval: DefaultRepublishInterval, cardTimeout: DefaultCardTimeout}
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return nil, fmt.Errorf("open partition lifecycle: %w", err)
		}
	}
	switch {
	case dir == "":
		return nil, errors.New("open partition lifecycle: state folder is empty")
	case tool == nil || keyOf == nil:
		return nil, errors.New("open partition lifecycle: a tool and a key function are required")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("open partition lifecycle: %w", err)
	}
	f, err := acquireFolder(dir, o.peer)
	if err != nil {
		return nil, fmt.Errorf("open partition lifecycle: %w", err)
	}
	m := &Manager{dir: dir, tool: tool, keyOf: keyOf, o: o, folder: f, made: map[Key]Partition{}}
	m.journal = journal{file: statefile.Document{Path: filepath.Join(dir, JournalFile), Volatile: o.volatile}}
	m.rep = republisher{notify: o.notify, delay: o.delay, interval: o.interval}
	if !o.volatile {
		m.o.writeOption = []statefile.WriteOption{statefile.Durable()}
	}
	if err := m.start(); err != nil {
		_ = f.release()
		return nil, fmt.Errorf("open partition lifecycle: %w", err)
	}
	return m, nil
}

// start reads the journal (moving a corrupt one aside) and the card
// record, and records the card states.
func (m *Manager) start() error {
	logger := klog.Background()
	intents, err := m.journal.intents()
	if errors.Is(err, ErrCorruptJournal) {
		aside := m.journal.file.Path + ".corrupt"
		if rerr := os.Rename(m.journal.file.Path, aside); rerr != nil {
			return errors.Join(err, fmt.Errorf("move the corrupt journal aside: %w", rerr))
		}
		logger.Error(err, "Moved the corrupt partition intent journal aside; Reconcile rebuilds it from the cards and the claims the runtime holds", "movedTo", aside)
		intents, err = nil, nil
	}
	if err != nil {
		return err
	}
	recorded, err := readCards(m.dir)
	if errors.Is(err, errCorruptCards) {
		// What it said is the administrator's list, given again, and
		// the cards to drain, which the journal names too.
		logger.Error(err, "Ignoring the corrupt card record; the cards the journal names are drained")
		recorded, err = map[string]CardState{}, nil
	}
	if err != nil {
		return err
	}
	m.states = decideCards(m.o.dynamic, recorded, intents)
	if maps.Equal(m.states, recorded) {
		return nil
	}
	for _, c := range sortedCards(m.states) {
		if recorded[c] != m.states[c] {
			logger.Info("Card state", "card", c, "state", m.states[c], "was", recorded[c])
		}
	}
	return writeCards(m.dir, m.states, m.o.writeOption...)
}

// Close releases the state folder; call it after every other call has
// returned, and do not use the Manager after. Further calls return nil.
func (m *Manager) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil
	}
	m.closed = true
	return m.folder.release()
}

// State is how the lifecycle treats card now.
func (m *Manager) State(card string) CardState {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.states[card]
}

// Owns reports whether the partition at k is the lifecycle's: every
// partition on a [Dynamic] card, and on a [Draining] card one the
// journal records. A vendor publishes the others of a card that is not
// dynamic as the administrator's, and never the lifecycle's on a
// draining card (they are being given back).
func (m *Manager) Owns(k Key) (bool, error) {
	switch m.State(k.Card) {
	case Dynamic:
		return true, nil
	case Draining:
		intents, err := m.journal.intents()
		if err != nil {
			return false, err
		}
		return slices.ContainsFunc(intents, func(in Intent) bool { return in.Key == k }), nil
	}
	return false, nil
}

// Intents returns the intent journal's records, by key.
func (m *Manager) Intents() ([]Intent, error) { return m.journal.intents() }

// Made returns the partition at k as this process's PrepareClaim made
// (or found) it, if it has not been destroyed since: what a preparer
// hands the claim's containers without asking its tool again.
func (m *Manager) Made(k Key) (Partition, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	p, ok := m.made[k]
	return p, ok
}

func (m *Manager) remember(p Partition) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.made[p.Key] = p
}

func (m *Manager) forget(k Key) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.made, k)
}

// Changed schedules a republish (see [WithRepublish]) for a change the
// lifecycle did not make (a card hot-plugged, found lost or recovered),
// shared with the republish of the lifecycle's own changes.
func (m *Manager) Changed() { m.rep.changed() }
