package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"github.com/drakit/drakit/driver"
	"github.com/drakit/drakit/partition/lifecycle"
	"github.com/drakit/drakit/partition/lifecycle/lifecycletest"
)

// runAsDriver makes the test binary run as the driver, for the
// conformance suite, which starts, kills -9 and restarts it; the fault
// kit runs it as its driver processes (lifecycletest.Child).
const runAsDriver = "TILES_RUN_AS_DRIVER"

func TestMain(m *testing.M) {
	lifecycletest.Child(kit())
	if os.Getenv(runAsDriver) == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// writeMachine writes a fake sysfs of n cards under root, with no
// partition; ids[i] is card i's serial.
func writeMachine(root string, n int) (ids []string, err error) {
	for i := range n {
		dir := filepath.Join(root, "class/tiles", fmt.Sprintf("tile%d", i))
		id := fmt.Sprintf("T8-%06d", 4711+i)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(dir, "serial"), []byte(id+"\n"), 0o644); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, nil
}

// node is the driver's lifecycle node on a new machine of n cards.
func node(t *testing.T, n int) (*lifecycle.Node, tilectl) {
	t.Helper()
	root := t.TempDir()
	if _, err := writeMachine(root, n); err != nil {
		t.Fatal(err)
	}
	b, err := binding("node", root)
	if err != nil {
		t.Fatal(err)
	}
	nd, err := lifecycle.NewNode(b, filepath.Join(t.TempDir(), "state"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = nd.Close() })
	return nd, b.Tool.(tilectl)
}

// parts is card's partitions as tilectl shows them: "<start>-<profile>
// <sram>", sorted.
func parts(t *testing.T, tool tilectl, card string) string {
	t.Helper()
	ps, err := tool.list(card)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for k, p := range ps {
		out = append(out, fmt.Sprintf("%d-%s %s", k.Start, k.Profile, p.SRAM))
	}
	slices.Sort(out)
	return strings.Join(out, ",")
}

// TestScheme: the scheme builds, names its devices, publishes at most 8
// attributes a device, and gives the scheduler 16 devices per card.
func TestScheme(t *testing.T) {
	if Scheme == nil || Configs == nil {
		t.Fatal("Scheme or Configs did not build")
	}
	if name, err := Scheme.DeviceName(1, "2t", 4); err != nil || name != "npu-1-2t-4" {
		t.Errorf("device name %q, %v", name, err)
	}
	n, _ := node(t, 2)
	inv, err := n.Inventory(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	res, err := inv.DriverResources()
	if err != nil {
		t.Fatal(err)
	}
	for _, pool := range res.Pools {
		devs := 0
		for _, sl := range pool.Slices {
			for _, d := range sl.Devices {
				devs++
				if len(d.Attributes) > 8 {
					t.Errorf("device %s has %d attributes", d.Name, len(d.Attributes))
				}
			}
		}
		if devs != 1+8+4+2+1 {
			t.Errorf("pool has %d devices, want 16", devs)
		}
	}
	var names []string
	for _, c := range DeviceClasses() {
		names = append(names, c.Name)
	}
	want := "npu.tiles.drakit.dev 1t.tiles.drakit.dev 2t.tiles.drakit.dev " +
		"4t.tiles.drakit.dev 8t.tiles.drakit.dev"
	if got := strings.Join(names, " "); got != want {
		t.Errorf("classes %s, want %s", got, want)
	}
}

func withSRAM(device, sram string) driver.AllocatedDevice {
	raw := fmt.Sprintf(`{"apiVersion":"%s/v1","kind":"TileConfig","sram":%q}`, DriverName, sram)
	return driver.AllocatedDevice{Request: "r", Pool: "node/npu-00", Device: device,
		Config: []driver.OpaqueConfig{{Parameters: []byte(raw)}}}
}

// TestConfig: a claim's SRAM split reaches tilectl's create and the
// container; a bad one fails the prepare before anything is made; a
// claim with another split does not share a partition; the card whole
// takes no switch and keeps its partitions' claims out.
func TestConfig(t *testing.T) {
	n, tool := node(t, 1)
	ctx := context.Background()
	card := func() string { return parts(t, tool, "T8-004711") }
	claim := func(uid string) driver.Claim {
		return driver.Claim{ClaimRef: driver.ClaimRef{UID: types.UID(uid)}}
	}
	bad := []driver.AllocatedDevice{withSRAM("npu-0-1t-0", "scratch"),
		withSRAM("npu-0-2t-2", "huge")}
	err := n.PrepareClaim(ctx, claim("a"), bad)
	if err == nil || !strings.Contains(err.Error(), `sram "huge": want cache or scratch`) ||
		card() != "" {
		t.Errorf("a claim with a bad split: %v, card %q; want its error, nothing made", err, card())
	}
	good := withSRAM("npu-0-2t-2", "scratch")
	if err := n.PrepareClaim(ctx, claim("a"), []driver.AllocatedDevice{good}); err != nil {
		t.Fatal(err)
	}
	out, err := n.PrepareDevice(ctx, claim("a"), good)
	edits := fmt.Sprint(out.Edits)
	if err != nil || card() != "2-2t scratch" ||
		!strings.Contains(edits, "NPU_0_2T_2_SRAM=scratch") {
		t.Errorf("prepare: %v, card %q, edits %v", err, card(), edits)
	}
	other := []driver.AllocatedDevice{withSRAM("npu-0-2t-2", "cache")}
	if err := n.PrepareClaim(ctx, claim("b"), other); !errors.Is(err, lifecycle.ErrConfigMismatch) {
		t.Errorf("a second claim of the partition with another split: %v, "+
			"want ErrConfigMismatch", err)
	}
	whole := driver.AllocatedDevice{Request: "r", Pool: "node/npu-00", Device: "npu-0"}
	err = n.PrepareClaim(ctx, claim("w"), []driver.AllocatedDevice{whole})
	if !errors.Is(err, lifecycle.ErrCardBusy) {
		t.Errorf("the card whole while a partition is held: %v, want ErrCardBusy", err)
	}
	if err := n.UnprepareClaim(ctx, claim("a").ClaimRef, nil); err != nil {
		t.Fatal(err)
	}
	if err := n.PrepareClaim(ctx, claim("w"), []driver.AllocatedDevice{whole}); err != nil {
		t.Fatalf("the card whole once free: %v", err)
	}
	if in, _ := n.Intents(); card() != "" || len(in) != 1 || !in[0].Whole {
		t.Errorf("card %q, journal %+v; want the card whole, held, and no partition", card(), in)
	}
}

// TestToolRules: tilectl keeps the card's rules.
func TestToolRules(t *testing.T) {
	root := t.TempDir()
	ids, err := writeMachine(root, 1)
	if err != nil {
		t.Fatal(err)
	}
	tool := tilectl{ids[0]: filepath.Join(root, "class/tiles/tile0")}
	ctx := context.Background()
	key := func(profile string, start int) lifecycle.Key {
		return lifecycle.Key{Card: ids[0], Profile: profile, Start: start}
	}
	for _, tc := range []struct {
		profile string
		start   int
		want    string // "" for success
	}{
		{"2t", 1, "no partition of 2t at tile 1"},
		{"3t", 0, "no partition of 3t"},
		{"8t", 4, "no partition of 8t"},
		{"4t", 4, ""},
		{"2t", 6, "overlaps"},
		{"2t", 2, ""},
		{"1t", 0, ""},
	} {
		_, err := tool.Create(ctx, key(tc.profile, tc.start))
		if tc.want == "" && err != nil ||
			tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("create %s@%d: %v, want %q", tc.profile, tc.start, err, tc.want)
		}
	}
	p, err := tool.Create(ctx, key("2t", 2))
	list, _ := tool.List(ctx, ids[0])
	if err != nil || len(list) != 3 || !slices.Contains(list, p) {
		t.Errorf("create again %+v (%v): list %+v, want it once among 3", p, err, list)
	}
	cfg := &TileConfig{SRAM: "scratch"}
	if _, err := tool.CreateWithConfig(ctx, key("2t", 2), cfg); err == nil {
		t.Error("a partition made with cache was taken for one with scratch")
	}
	// A partition cut short (its file empty) is listed made in part and
	// completed by the next create.
	if err := os.WriteFile(tool.file(key("1t", 1)), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	list, _ = tool.List(ctx, ids[0])
	cut := slices.IndexFunc(list, func(p lifecycle.Partition) bool { return p.Key == key("1t", 1) })
	if cut < 0 || list[cut].Complete {
		t.Errorf("a partition cut short: %+v, want it listed made in part", list)
	}
	if p, err := tool.CreateWithConfig(ctx, key("1t", 1), cfg); err != nil || !p.Complete {
		t.Errorf("complete a partition made in part: %+v, %v", p, err)
	}
	all := []lifecycle.Key{key("4t", 4), key("4t", 4), key("2t", 2), key("1t", 0), key("1t", 1)}
	for _, k := range all {
		if err := tool.Destroy(ctx, k); err != nil {
			t.Fatal(err)
		}
	}
	if got := parts(t, tool, ids[0]); got != "" {
		t.Errorf("after every destroy: %q", got)
	}
	if err := os.RemoveAll(filepath.Join(root, "class/tiles/tile0")); err != nil {
		t.Fatal(err)
	}
	if _, err := tool.List(ctx, ids[0]); !errors.Is(err, lifecycle.ErrCardGone) {
		t.Errorf("a card gone from sysfs: %v, want ErrCardGone", err)
	}
}
