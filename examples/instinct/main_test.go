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

	"github.com/drakit/drakit/driver"
	"github.com/drakit/drakit/partition"
	"github.com/drakit/drakit/partition/counter"
	"github.com/drakit/drakit/partition/lifecycle"
	"github.com/drakit/drakit/partition/lifecycle/lifecycletest"
)

// runAsDriver makes the test binary run as the driver, for the
// conformance suite, which starts, kills -9 and restarts it; the fault
// kit runs it as its driver processes (lifecycletest.Child).
const runAsDriver = "INSTINCT_RUN_AS_DRIVER"

func TestMain(m *testing.M) {
	lifecycletest.Child(kit())
	if os.Getenv(runAsDriver) == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// machine is a fake sysfs under a temporary root with n MI300X-like
// cards in SPX/NPS1, AMD's default, as the kernel shows them; ids[i] is
// card i's unique_id.
func machine(t testing.TB, n int) (root string, ids []string) {
	t.Helper()
	root = t.TempDir()
	ids, err := writeMachine(root, n)
	if err != nil {
		t.Fatal(err)
	}
	return root, ids
}

// writeMachine writes the fake sysfs of n cards under root.
func writeMachine(root string, n int) (ids []string, err error) {
	for i := range n {
		dir := filepath.Join(root, "class/drm", fmt.Sprintf("card%d", i), "device")
		id := fmt.Sprintf("0x%016x", 0x3fa1c0de00+i)
		files := map[string]string{"unique_id": id, "current_compute_partition": "SPX",
			"current_memory_partition": "NPS1", "available_compute_partition": "SPX, DPX, QPX, CPX",
			"available_memory_partition": "NPS1, NPS4"}
		if err := os.MkdirAll(filepath.Join(dir, "xcp"), 0o755); err != nil {
			return nil, err
		}
		for f, v := range files {
			if err := os.WriteFile(filepath.Join(dir, f), []byte(v+"\n"), 0o644); err != nil {
				return nil, err
			}
		}
		ids = append(ids, id)
	}
	return ids, nil
}

// open is the driver's lifecycle node on the machine under root.
func open(t testing.TB, node, root, state string) *lifecycle.Node {
	t.Helper()
	b, err := binding(node, root)
	if err != nil {
		t.Fatal(err)
	}
	n, err := lifecycle.NewNode(b, state)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Close() })
	return n
}

// modes reads card i's modes and partitions as amd-smi shows them, e.g.
// "CPX/NPS4 3 5" (the XCPs made) or "SPX/NPS1".
func modes(t testing.TB, root string, i int) string {
	t.Helper()
	dir := filepath.Join(root, "class/drm", fmt.Sprintf("card%d", i), "device")
	c, err := amdSMI{"x": dir}.read("x")
	if err != nil {
		t.Fatal(err)
	}
	out := []string{c.compute + "/" + c.memory}
	for _, p := range c.parts {
		out = append(out, fmt.Sprint(p.Start))
	}
	slices.Sort(out[1:])
	return strings.Join(out, " ")
}

// TestScheme: the scheme builds, names its devices in AMD's words, keeps
// a card in one mode combination, and its counter model gives the
// scheduler 27 devices per card.
func TestScheme(t *testing.T) {
	if Scheme == nil || Configs == nil {
		t.Fatal("Scheme or Configs did not build")
	}
	two := partition.Layout{{Profile: "QPX/NPS4", Start: 0}, {Profile: "QPX/NPS4", Start: 3}}
	if err := Scheme.Validate(two); err != nil {
		t.Errorf("two QPX/NPS4 partitions: %v", err)
	}
	mixed := partition.Layout{{Profile: "CPX/NPS4", Start: 0}, {Profile: "CPX/NPS1", Start: 7}}
	if err := Scheme.Validate(mixed); !errors.Is(err, partition.ErrMode) {
		t.Errorf("CPX/NPS4 beside CPX/NPS1: %v, want ErrMode", err)
	}
	name, err := Scheme.DeviceName(0, "CPX/NPS4", 3)
	if err != nil || name != "gpu-0-cpx-nps4-3" {
		t.Errorf("device name %q, %v", name, err)
	}
	m, err := counter.NewModel([]counter.Card{{Index: 0, Scheme: Scheme}})
	if err != nil || len(m.Devices) != 1+2+4+4+8+8 {
		t.Errorf("counter model: %d devices, %v", len(m.Devices), err)
	}
}

// TestConfig: a bad XCPConfig is refused with a message that names the
// field and the values allowed; a good one sets HSA_XNACK.
func TestConfig(t *testing.T) {
	cfg := func(xnack string) driver.AllocatedDevice {
		raw := fmt.Sprintf(`{"apiVersion":"%s/v1","kind":"XCPConfig","xnack":%q}`,
			DriverName, xnack)
		cfg := driver.OpaqueConfig{Parameters: []byte(raw)}
		return driver.AllocatedDevice{Device: "gpu-0", Config: []driver.OpaqueConfig{cfg}}
	}
	_, err := driver.DecodeAs[XCPConfig](Configs, cfg("maybe"))
	if err == nil || !strings.Contains(err.Error(), `xnack "maybe": want on or off`) {
		t.Errorf("bad xnack: %v", err)
	}
	root, _ := machine(t, 1)
	d := open(t, "node", root, t.TempDir())
	ctx := context.Background()
	out, err := d.PrepareDevice(ctx, driver.Claim{}, cfg("on"))
	if err != nil {
		t.Fatal(err)
	}
	env := fmt.Sprint(out.Edits)
	if !strings.Contains(env, "HSA_XNACK=1") || !strings.Contains(env, "INSTINCT_XCP_GPU_0=0x") {
		t.Errorf("edits %s lack HSA_XNACK=1 or the card", env)
	}
	never := driver.AllocatedDevice{Device: "gpu-0-cpx-nps1-0"}
	if _, err := d.PrepareDevice(ctx, driver.Claim{}, never); err == nil {
		t.Error("a partition that was never made was handed out")
	}
	bad := cfg("maybe")
	bad.Device = "gpu-0-cpx-nps1-0"
	if err := d.PrepareClaim(ctx, driver.Claim{}, []driver.AllocatedDevice{bad}); err == nil {
		t.Error("a claim with a bad XCPConfig was prepared")
	}
	if got := modes(t, root, 0); got != "SPX/NPS1" {
		t.Errorf("card 0 after a claim with a bad XCPConfig: %q, want it untouched", got)
	}
}

// TestToolRules: the amd-smi stand-in keeps the MI300X's rules.
func TestToolRules(t *testing.T) {
	root, ids := machine(t, 2)
	a := amdSMI{ids[0]: filepath.Join(root, "class/drm/card0/device"),
		ids[1]: filepath.Join(root, "class/drm/card1/device")}
	ctx := context.Background()
	key := func(profile string, start int) lifecycle.Key {
		return lifecycle.Key{Card: ids[0], Profile: profile, Start: start}
	}
	if _, err := a.Create(ctx, key("CPX/NPS4", 3)); !errors.Is(err, lifecycle.ErrWholeMode) {
		t.Fatalf("create in SPX mode: %v, want ErrWholeMode", err)
	}
	if err := a.SetWhole(ctx, ids[0], false); err != nil {
		t.Fatal(err)
	}
	if got := modes(t, root, 0); got != "CPX/NPS1" {
		t.Errorf("out of whole mode: %q, want CPX/NPS1", got)
	}
	for _, tc := range []struct {
		profile string
		start   int
		want    string // "" for success
	}{
		{"DPX/NPS4", 0, "MI300X supports SPX and DPX with NPS1"},
		{"SPX/NPS4", 0, "MI300X supports"},
		{"QPX/NPS4", 4, "QPX/NPS4 has no XCP 4"},
		{"TPX/NPS1", 0, "has no XCP"},
		{"QPX/NPS4", 1, ""},
		{"QPX/NPS4", 3, ""},
		{"CPX/NPS4", 0, "cannot set CPX/NPS4: 2 partitions of QPX/NPS4 are in use"},
		{"QPX/NPS1", 0, "cannot set QPX/NPS1"},
	} {
		_, err := a.Create(ctx, key(tc.profile, tc.start))
		if tc.want == "" && err != nil ||
			tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("create %s@%d: %v, want %q", tc.profile, tc.start, err, tc.want)
		}
	}
	p, err := a.Create(ctx, key("QPX/NPS4", 1))
	parts, _ := a.List(ctx, ids[0])
	if err != nil || len(parts) != 2 || !slices.Contains(parts, p) {
		t.Errorf("create again %+v (%v): list %+v, want it once among 2", p, err, parts)
	}
	if err := a.SetWhole(ctx, ids[0], true); err == nil || modes(t, root, 0) != "QPX/NPS4 1 3" {
		t.Errorf("whole while partitions are in use: %v, card %q", err, modes(t, root, 0))
	}
	for _, s := range []int{1, 3, 3} {
		if err := a.Destroy(ctx, key("QPX/NPS4", s)); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.SetWhole(ctx, ids[0], true); err != nil || modes(t, root, 0) != "SPX/NPS1" {
		t.Errorf("whole once empty: %v, card %q", err, modes(t, root, 0))
	}
	if err := os.RemoveAll(filepath.Join(root, "class/drm/card1")); err != nil {
		t.Fatal(err)
	}
	if _, err := a.List(ctx, ids[1]); !errors.Is(err, lifecycle.ErrCardGone) {
		t.Errorf("a card gone from sysfs: %v, want ErrCardGone", err)
	}
}
