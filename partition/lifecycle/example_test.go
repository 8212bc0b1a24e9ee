package lifecycle_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/rest"

	"github.com/drakit/drakit/cdi"
	"github.com/drakit/drakit/device"
	"github.com/drakit/drakit/driver"
	"github.com/drakit/drakit/partition"
	"github.com/drakit/drakit/partition/lifecycle"
)

// splitTool binds the vendor's partition tool: cards of 4 units split
// into partitions of 1, 2 or 4 units at aligned starts, or used whole.
// A real binding calls the vendor's library or command; this one keeps
// the cards in memory.
type splitTool struct {
	mu    sync.Mutex
	cards map[string][]lifecycle.Partition
	whole map[string]bool
	next  int
}

func (t *splitTool) Create(_ context.Context, k lifecycle.Key) (lifecycle.Partition, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n, err := strconv.Atoi(strings.TrimSuffix(k.Profile, "u"))
	if err != nil || k.Start%n != 0 || k.Start+n > 4 {
		return lifecycle.Partition{}, fmt.Errorf("splitctl: no partition %s at %d", k.Profile, k.Start)
	}
	if t.whole[k.Card] {
		return lifecycle.Partition{}, fmt.Errorf("splitctl: card %s: %w", k.Card, lifecycle.ErrWholeMode)
	}
	for _, p := range t.cards[k.Card] {
		if p.Key == k {
			return p, nil // made before: Create is idempotent
		}
		m, _ := strconv.Atoi(strings.TrimSuffix(p.Profile, "u"))
		if k.Start < p.Start+m && p.Start < k.Start+n {
			return lifecycle.Partition{}, fmt.Errorf("splitctl: %s overlaps %s", k, p.Key)
		}
	}
	t.next++
	p := lifecycle.Partition{Key: k, ID: fmt.Sprint("split-", t.next), Complete: true}
	t.cards[k.Card] = append(t.cards[k.Card], p)
	return p, nil
}

func (t *splitTool) Destroy(_ context.Context, k lifecycle.Key) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.cards[k.Card] = slices.DeleteFunc(t.cards[k.Card], func(p lifecycle.Partition) bool { return p.Key == k })
	return nil
}

func (t *splitTool) List(_ context.Context, card string) ([]lifecycle.Partition, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Clone(t.cards[card]), nil
}

func (t *splitTool) SetWhole(_ context.Context, card string, whole bool) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if whole && len(t.cards[card]) > 0 {
		return fmt.Errorf("splitctl: card %s has partitions", card)
	}
	t.whole[card] = whole
	return nil
}

// keyOf names the partition of a device "<card>-<profile>-<start>" (or
// the card whole, "<card>"), from the key a prepared device recorded
// when there is one.
func keyOf(dev driver.AllocatedDevice, data json.RawMessage) (lifecycle.Key, bool) {
	var k lifecycle.Key
	if json.Unmarshal(data, &k) == nil && k.Card != "" {
		return k, true
	}
	f := strings.SplitN(dev.Device, "-", 3)
	if len(f) == 1 {
		return lifecycle.WholeCard(f[0]), true
	}
	start, err := strconv.Atoi(f[len(f)-1])
	return lifecycle.Key{Card: f[0], Profile: f[1], Start: start}, err == nil && len(f) == 3
}

// preparer is the vendor's driver.Preparer: the embedded Manager makes
// the partitions (ClaimPreparer) and reconciles them at start
// (Reconciler); PrepareDevice hands the container its partition.
type preparer struct{ *lifecycle.Manager }

func (p preparer) PrepareDevice(_ context.Context, _ driver.Claim, dev driver.AllocatedDevice) (driver.PreparedDevice, error) {
	k, _ := keyOf(dev, nil)
	id := k.Card // a card used whole
	if !k.Whole {
		part, ok := p.Made(k)
		if !ok {
			return driver.PreparedDevice{}, fmt.Errorf("partition %s was not made", k)
		}
		id = part.ID
	}
	data, _ := json.Marshal(k) // what Reconcile finds the partition by
	edits := (&cdi.Edits{}).Env("SPLIT_DEVICE_"+strings.ToUpper(strings.ReplaceAll(dev.Device, "-", "_")), id)
	return driver.PreparedDevice{Edits: edits, Data: data}, nil
}

func (preparer) UnprepareDevice(context.Context, driver.ClaimRef, driver.AllocatedDevice, json.RawMessage) error {
	return nil
}

// A vendor's dynamic partitioning, complete: the tool binding, the key
// function, the preparer, the discoverer of the partitions of the
// moment, and the calls the driver runtime makes.
func Example() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "split-state-")
	defer os.RemoveAll(dir)
	tool := &splitTool{cards: map[string][]lifecycle.Partition{}, whole: map[string]bool{}}

	// The inventory: on each dynamic card the card whole and every
	// partition at every start, each consuming the units it covers of the
	// card's counter set, so that the scheduler never allocates two that
	// overlap. (A driver that publishes only what still fits lists the
	// tool's partitions here; Changed republishes after each change.)
	units := func(start, n int) map[string]resource.Quantity {
		c := map[string]resource.Quantity{}
		for u := start; u < start+n; u++ {
			c[fmt.Sprint("unit", u)] = resource.MustParse("1")
		}
		return c
	}
	disc, _ := device.NewDynamicDiscoverer(func(context.Context) (*device.Inventory, error) {
		pool := device.Pool{Name: "node-1"}
		for _, card := range []string{"card0"} {
			pool.CounterSets = append(pool.CounterSets, device.CounterSet{Name: card, Counters: units(0, 4)})
			pool.Devices = append(pool.Devices, device.New(card).ConsumesCounters(card, units(0, 4)))
			for _, n := range []int{1, 2, 4} {
				for start := 0; start < 4; start += n {
					pool.Devices = append(pool.Devices, device.New(fmt.Sprintf("%s-%du-%d", card, n, start)).ConsumesCounters(card, units(start, n)))
				}
			}
		}
		return &device.Inventory{Driver: "split.example.com", Pools: []device.Pool{pool}}, nil
	}, device.HealthChannel(make(chan []device.HealthReport)))
	inv, _ := disc.Inventory(ctx)
	fmt.Println("devices:", len(inv.Pools[0].Devices), inv.Validate())

	// The administrator names the dynamic cards (-dynamic-cards=card0).
	lc, err := lifecycle.Open(dir, tool, keyOf,
		lifecycle.WithDynamicCards("card0"),
		lifecycle.WithRepublish(disc.Changed, lifecycle.DefaultRepublishDelay, lifecycle.DefaultRepublishInterval))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer lc.Close()
	p := preparer{lc}
	_, err = driver.New("split.example.com", driver.WithDiscoverer(disc), driver.WithPreparer(p),
		driver.WithRESTConfig(&rest.Config{Host: "https://127.0.0.1:6443"}), driver.WithNodeName("node-1"))
	fmt.Println("driver:", err)
	// A real driver now runs it (Runtime.Run), which calls what follows.

	_ = p.Reconcile(ctx, nil) // at start, with the claims the runtime holds
	c := driver.Claim{ClaimRef: driver.ClaimRef{UID: "uid-1", Namespace: "default", Name: "train"}}
	devs := []driver.AllocatedDevice{{Request: "acc", Pool: "node-1", Device: "card0-2u-2"}}
	if err := p.PrepareClaim(ctx, c, devs); err != nil {
		fmt.Println(err)
		return
	}
	pd, _ := p.PrepareDevice(ctx, c, devs[0])
	parts, _ := tool.List(ctx, "card0")
	fmt.Println("prepared:", parts[0].Key, parts[0].ID, string(pd.Data))

	// Another claim wants the card whole while the partition is held.
	whole := driver.Claim{ClaimRef: driver.ClaimRef{UID: "uid-2", Namespace: "default", Name: "render"}}
	err = p.PrepareClaim(ctx, whole, []driver.AllocatedDevice{{Request: "acc", Pool: "node-1", Device: "card0"}})
	fmt.Println("whole:", err)

	_ = p.UnprepareClaim(ctx, c.ClaimRef, devs)
	parts, _ = tool.List(ctx, "card0")
	fmt.Println("after unprepare:", len(parts), "partitions")
	// Output:
	// devices: 8 <nil>
	// driver: <nil>
	// prepared: card card0 profile 2u at 2 split-1 {"card":"card0","profile":"2u","start":2}
	// whole: card card0 whole: card is in use: partitions of the card are held by claim uid-1; it can be used whole once they are unprepared
	// after unprepare: 0 partitions
}

// A driver on a Node: the vendor's binding (the cards and their scheme,
// the tool, the container edits) and the calls the driver runtime makes.
func ExampleNewNode() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "split-state-")
	defer os.RemoveAll(dir)
	// The cards' scheme: 4 memory units placed, partitions of 1, 2 or 4
	// units at aligned starts.
	s := partition.Scheme{Name: "split4", MemoryBytes: 4 << 30,
		Memory: partition.Units{Count: 4, Placed: true}, Compute: partition.Units{Count: 4}}
	for i, n := range []int{1, 2, 4} {
		p := partition.Profile{Name: fmt.Sprint(n, "u"), ID: i + 1, Memory: n, Compute: n,
			MemoryBytes: int64(n) << 30, MaxCount: 4 / n}
		for start := 0; start < 4; start += n {
			p.Placements = append(p.Placements, partition.Placement{Start: start, Memory: start})
		}
		s.Profiles = append(s.Profiles, p)
	}
	scheme, err := partition.NewScheme(s)
	if err != nil {
		fmt.Println(err)
		return
	}
	tool := &splitTool{cards: map[string][]lifecycle.Partition{}, whole: map[string]bool{}}
	edits := func(dev driver.AllocatedDevice, p lifecycle.Partition, _ any) (*cdi.Edits, error) {
		name := "SPLIT_" + strings.ToUpper(strings.ReplaceAll(dev.Device, "-", "_"))
		return (&cdi.Edits{}).Env(name, p.ID), nil
	}
	n, err := lifecycle.NewNode(lifecycle.Binding{Driver: "split.example.com", NodeName: "node-1",
		Cards: []lifecycle.Card{{ID: "SN-0001", Scheme: scheme}}, Tool: tool, Edits: edits}, dir)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer n.Close()
	// The driver's main runs driver.New("split.example.com",
	// driver.WithDiscoverer(n), driver.WithPreparer(n), ...), and the
	// runtime calls what follows.
	_ = n.Reconcile(ctx, nil)
	c := driver.Claim{ClaimRef: driver.ClaimRef{UID: "uid-1", Namespace: "default", Name: "train"}}
	devs := []driver.AllocatedDevice{{Request: "acc", Pool: "node-1/card-00", Device: "card-0-2u-2"}}
	if err := n.PrepareClaim(ctx, c, devs); err != nil {
		fmt.Println(err)
		return
	}
	pd, _ := n.PrepareDevice(ctx, c, devs[0])
	inv, _ := n.Inventory(ctx)
	var fit []string
	for _, d := range inv.Pools[0].Devices {
		fit = append(fit, d.Name())
	}
	fmt.Println("prepared:", string(pd.Data))
	fmt.Println("published:", fit)
	_ = n.UnprepareClaim(ctx, c.ClaimRef, devs)
	parts, _ := tool.List(ctx, "SN-0001")
	fmt.Println("after unprepare:", len(parts), "partitions")
	// Output:
	// prepared: {"card":"SN-0001","profile":"2u","start":2}
	// published: [card-0-1u-0 card-0-1u-1 card-0-2u-0 card-0-2u-2]
	// after unprepare: 0 partitions
}
