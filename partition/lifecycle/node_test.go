package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/drakit/drakit/cdi"
	"github.com/drakit/drakit/device"
	"github.com/drakit/drakit/driver"
	"github.com/drakit/drakit/partition"
)

// fakeScheme is the fake tool's cards as a partition scheme: 8 memory
// units placed, profiles "<n>u" at multiples of n, at most 7 partitions
// and 3 of "2u"; names "card-<i>-<n>u-<start>". name tells two models
// apart.
func fakeScheme(t testing.TB, name string) *partition.Scheme {
	t.Helper()
	s := partition.Scheme{Name: name, MemoryBytes: 8 << 30, MaxPartitions: 7,
		Memory: partition.Units{Count: 8, Placed: true}, Compute: partition.Units{Count: 8}}
	for i, n := range []int{1, 2, 4, 8} {
		p := partition.Profile{Name: fmt.Sprint(n, "u"), ID: i + 1, Memory: n, Compute: n,
			MemoryBytes: int64(n) << 30, MaxCount: min(8/n, 7)}
		if n == 2 {
			p.MaxCount = 3
		}
		for start := 0; start < 8; start += n {
			p.Placements = append(p.Placements, partition.Placement{Start: start, Memory: start})
		}
		s.Profiles = append(s.Profiles, p)
	}
	built, err := partition.NewScheme(s)
	if err != nil {
		t.Fatal(err)
	}
	return built
}

// splitConfig is a claim's setting for its partitions.
type splitConfig struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Mode       string `json:"mode"`
}

// configTool is the fake tool taking a setting at create.
type configTool struct {
	*fakeTool
	mu  sync.Mutex
	got []string // "<key> <mode>" per call
}

func (c *configTool) CreateWithConfig(ctx context.Context, k Key, cfg any) (Partition, error) {
	mode := "none"
	if sc, ok := cfg.(*splitConfig); ok {
		mode = sc.Mode
	}
	c.mu.Lock()
	c.got = append(c.got, k.String()+" "+mode)
	c.mu.Unlock()
	return c.Create(ctx, k)
}

// noSwitch is a tool whose cards have no whole mode.
type noSwitch struct{ Tool }

func withMode(dev driver.AllocatedDevice, mode string) driver.AllocatedDevice {
	raw := fmt.Sprintf(`{"apiVersion":"split.example.com/v1","kind":"SplitConfig","mode":%q}`, mode)
	dev.Config = []driver.OpaqueConfig{{Parameters: []byte(raw)}}
	return dev
}

// newNode is a node of cards c1 and c2 (of two models) on the fake tool
// (as wrap makes it), with a configuration scheme; health fails for the
// cards in sick.
func newNode(t *testing.T, wrap func(*fakeTool) Tool, sick map[string]bool) (*env, *Node) {
	t.Helper()
	e := newEnv(t, "c1", "c2")
	var tool Tool = e.tool
	if wrap != nil {
		tool = wrap(e.tool)
	}
	configs, err := driver.NewConfigScheme("split.example.com", driver.NewConfigType(
		"split.example.com/v1", "SplitConfig", func(c *splitConfig) error {
			if c.Mode != "fast" && c.Mode != "safe" {
				return fmt.Errorf("mode %q: want fast or safe", c.Mode)
			}
			return nil
		}))
	if err != nil {
		t.Fatal(err)
	}
	b := Binding{Driver: "split.example.com", NodeName: "node", Tool: tool, Configs: configs,
		Cards: []Card{{ID: "c1", Scheme: fakeScheme(t, "S8")},
			{ID: "c2", Scheme: fakeScheme(t, "S8b")}},
		Edits: func(dev driver.AllocatedDevice, p Partition, cfg any) (*cdi.Edits, error) {
			mode := "none"
			if sc, ok := cfg.(*splitConfig); ok {
				mode = sc.Mode
			}
			return (&cdi.Edits{}).Env("SPLIT_"+dev.Device, p.ID+" "+mode), nil
		},
		Health: func(_ context.Context, card string) error {
			if sick[card] {
				return errors.New("does not answer")
			}
			return nil
		},
	}
	n, err := NewNode(b, e.state)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Close() })
	e.m = n.Manager
	return e, n
}

func nodeDev(name string) driver.AllocatedDevice {
	return driver.AllocatedDevice{Request: "r", Pool: "node/card-0x", Device: name}
}

// A claim's configuration is checked for every device before anything is
// made, reaches the tool's create and the container's edits; two claims
// share a partition only with equal configurations.
func TestNodeConfig(t *testing.T) {
	var tool *configTool
	e, n := newNode(t, func(f *fakeTool) Tool { tool = &configTool{fakeTool: f}; return tool }, nil)
	ctx := context.Background()
	good, bad := withMode(nodeDev("card-0-2u-0"), "fast"), withMode(nodeDev("card-1-4u-4"), "turbo")
	err := n.PrepareClaim(ctx, claim("a"), []driver.AllocatedDevice{good, bad})
	var ce *driver.ClaimError
	if !errors.As(err, &ce) || ce.Reason() != driver.ReasonConfig ||
		!strings.Contains(err.Error(), `mode "turbo"`) {
		t.Fatalf("a claim with a bad configuration: %v, want an InvalidConfig error naming it", err)
	}
	if got := strings.Join(tool.got, ",") + e.parts("c1") + e.intents(); got != "" {
		t.Fatalf("a claim with a bad configuration made or recorded %q, want nothing", got)
	}
	if err := n.PrepareClaim(ctx, claim("a"), []driver.AllocatedDevice{good}); err != nil {
		t.Fatal(err)
	}
	out, err := n.PrepareDevice(ctx, claim("a"), good)
	if err != nil {
		t.Fatal(err)
	}
	p, _ := n.Made(Key{Card: "c1", Profile: "2u", Start: 0})
	if got := fmt.Sprint(out.Edits); !strings.Contains(got, "SPLIT_card-0-2u-0="+p.ID+" fast") {
		t.Errorf("edits %s, want the partition and its mode", got)
	}
	if got := strings.Join(tool.got, ","); got != "card c1 profile 2u at 0 fast" {
		t.Errorf("creates %q, want the claim's mode at create", got)
	}
	safe := []driver.AllocatedDevice{withMode(nodeDev("card-0-2u-0"), "safe")}
	if err := n.PrepareClaim(ctx, claim("b"), safe); !errors.Is(err, ErrConfigMismatch) {
		t.Errorf("a second claim of the partition with another mode: %v, "+
			"want ErrConfigMismatch", err)
	}
	if err := n.PrepareClaim(ctx, claim("c"), []driver.AllocatedDevice{good}); err != nil {
		t.Errorf("a second claim of the partition with its mode: %v", err)
	}
	err = n.PrepareClaim(ctx, claim("d"), []driver.AllocatedDevice{nodeDev("card-0-2u-0")})
	if !errors.Is(err, ErrConfigMismatch) {
		t.Errorf("a claim of the partition without configuration: %v, want ErrConfigMismatch", err)
	}
	for _, uid := range []string{"a", "c"} {
		if err := e.release(uid); err != nil {
			t.Fatal(err)
		}
	}
	if err := n.PrepareClaim(ctx, claim("b"), safe); err != nil {
		t.Errorf("the other mode once the partition's holders are gone: %v", err)
	}
}

// A node whose tool has no whole mode offers its cards whole all the
// same, and the lifecycle keeps the guard between the card whole and its
// partitions.
func TestWholeCardWithoutSwitch(t *testing.T) {
	e, n := newNode(t, func(f *fakeTool) Tool { return noSwitch{f} }, nil)
	ctx := context.Background()
	e.admin("c2", "1u", 0)
	if err := e.reconcile(); err != nil { // c2 is dynamic: its unheld partition goes
		t.Fatal(err)
	}
	whole := []driver.AllocatedDevice{nodeDev("card-1")}
	if err := n.PrepareClaim(ctx, claim("w"), whole); err != nil {
		t.Fatal(err)
	}
	out, err := n.PrepareDevice(ctx, claim("w"), whole[0])
	if err != nil || !strings.Contains(fmt.Sprint(out.Edits), "=c2 none") {
		t.Errorf("the card whole: %v, %v; want the card's ID", out.Edits, err)
	}
	err = n.PrepareClaim(ctx, claim("p"), []driver.AllocatedDevice{nodeDev("card-1-2u-2")})
	if !errors.Is(err, ErrCardBusy) {
		t.Errorf("a partition of a card held whole: %v, want ErrCardBusy", err)
	}
	if err := e.release("w"); err != nil {
		t.Fatal(err)
	}
	part := []driver.AllocatedDevice{nodeDev("card-1-2u-2")}
	if err := n.PrepareClaim(ctx, claim("p"), part); err != nil {
		t.Fatal(err)
	}
	if err := n.PrepareClaim(ctx, claim("w"), whole); !errors.Is(err, ErrCardBusy) {
		t.Errorf("the card whole while a partition is held: %v, want ErrCardBusy", err)
	}
	if got := e.parts("c2") + " | " + e.intents(); got != "2u@2 | c2/2u@2:p" {
		t.Errorf("card and journal: %q", got)
	}
}

// The node publishes one pool per card, of either model, with only what
// still fits and at most 8 attributes a device, names each device's
// partition from its name or its recorded data, and reports a card that
// fails its health check with every device on it.
func TestNodeInventory(t *testing.T) {
	_, n := newNode(t, nil, map[string]bool{"c2": true})
	ctx := context.Background()
	inv, err := n.Inventory(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := inv.Validate(); err != nil {
		t.Fatal(err)
	}
	count := func(inv *device.Inventory) []int {
		var out []int
		for _, p := range inv.Pools {
			out = append(out, len(p.Devices))
		}
		res, err := inv.DriverResources()
		if err != nil {
			t.Fatal(err)
		}
		for _, pool := range res.Pools {
			for _, sl := range pool.Slices {
				for _, d := range sl.Devices {
					if a := len(d.Attributes); a > 8 {
						t.Errorf("device %s has %d attributes, over 8", d.Name, a)
					}
				}
			}
		}
		return out
	}
	if got := fmt.Sprint(count(inv)); got != "[16 16]" {
		t.Errorf("devices per pool %s, want 1+8+4+2+1 on each card", got)
	}
	for name, want := range map[string]Key{"card-0-2u-4": {Card: "c1", Profile: "2u", Start: 4},
		"card-1": WholeCard("c2"), "card-1-8u-0": {Card: "c2", Profile: "8u"}} {
		if k, ok := n.Key(nodeDev(name), nil); !ok || k != want {
			t.Errorf("key of %s: %v %v, want %v", name, k, ok, want)
		}
	}
	if _, ok := n.Key(nodeDev("card-2"), nil); ok {
		t.Error("a device of no card has a key")
	}
	for uid, name := range map[string]string{"a": "card-0-4u-0", "b": "card-0-4u-4"} {
		devs := []driver.AllocatedDevice{nodeDev(name)}
		if err := n.PrepareClaim(ctx, claim(uid), devs); err != nil {
			t.Fatal(err)
		}
	}
	inv, _ = n.Inventory(ctx)
	if got := fmt.Sprint(count(inv)); got != "[2 16]" {
		t.Errorf("devices per pool with card c1 full: %s, "+
			"want its two partitions and all of c2", got)
	}
	reports, err := n.health(ctx)
	if err != nil || len(reports) != 2 || reports[0].Health != device.Healthy ||
		reports[1].Health != device.Unhealthy || reports[1].Device.Device != "card-1-counters" ||
		!strings.Contains(reports[1].Message, "does not answer") {
		t.Errorf("health %+v, %v; want c2's counter set unhealthy with the check's error",
			reports, err)
	}
}
