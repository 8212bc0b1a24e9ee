package lifecycle

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"github.com/drakit/drakit/driver"
)

// fakeKeyOf names the fake tool's devices: "<card>-<profile>-<start>"
// is a partition, "<card>" the card whole; held data {"key": ...} wins.
func fakeKeyOf(dev driver.AllocatedDevice, data json.RawMessage) (Key, bool) {
	if len(data) > 0 {
		var d struct {
			Key *Key `json:"key"`
		}
		if json.Unmarshal(data, &d) == nil && d.Key != nil {
			return *d.Key, true
		}
	}
	f := strings.SplitN(dev.Device, "-", 3)
	switch len(f) {
	case 1:
		return WholeCard(f[0]), true
	case 3:
		start, err := strconv.Atoi(f[2])
		return Key{Card: f[0], Profile: f[1], Start: start}, err == nil
	}
	return Key{}, false
}

// env is a node: cards on a fake tool and a state folder.
type env struct {
	t     testing.TB
	dir   string // the test's folder
	state string // the lifecycle's state folder
	tool  *fakeTool
	m     *Manager
}

func newEnv(t testing.TB, cards ...string) *env {
	t.Helper()
	dir := t.TempDir()
	tool, err := newFakeTool(filepath.Join(dir, "cards.json"), cards...)
	if err != nil {
		t.Fatal(err)
	}
	return &env{t: t, dir: dir, state: filepath.Join(dir, "state"), tool: tool}
}

// open opens (or reopens: a restart) the lifecycle with opts.
func (e *env) open(opts ...Option) *Manager {
	e.t.Helper()
	if e.m != nil {
		_ = e.m.Close()
	}
	m, err := Open(e.state, e.tool, fakeKeyOf, opts...)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = m.Close() })
	e.m = m
	return m
}

func claim(uid string) driver.Claim {
	return driver.Claim{ClaimRef: driver.ClaimRef{UID: types.UID(uid), Namespace: "default", Name: "c-" + uid}}
}

func devs(names ...string) []driver.AllocatedDevice {
	var out []driver.AllocatedDevice
	for i, n := range names {
		out = append(out, driver.AllocatedDevice{Request: "r" + strconv.Itoa(i), Pool: "node", Device: n})
	}
	return out
}

// prepare prepares claim uid with devices names and returns what the
// runtime holds of it: each device with the key as its data.
func (e *env) prepare(uid string, names ...string) driver.HeldClaim {
	e.t.Helper()
	c := claim(uid)
	if err := e.m.PrepareClaim(context.Background(), c, devs(names...)); err != nil {
		e.t.Fatalf("prepare %s %v: %v", uid, names, err)
	}
	return held(uid, names...)
}

// held is what the runtime holds of claim uid with devices names.
func held(uid string, names ...string) driver.HeldClaim {
	h := driver.HeldClaim{ClaimRef: claim(uid).ClaimRef, Prepared: true}
	for _, d := range devs(names...) {
		hd := driver.HeldDevice{AllocatedDevice: d}
		if k, ok := fakeKeyOf(d, nil); ok {
			hd.Data, _ = json.Marshal(map[string]Key{"key": k})
		}
		h.Devices = append(h.Devices, hd)
	}
	return h
}

func (e *env) release(uid string) error {
	return e.m.UnprepareClaim(context.Background(), claim(uid).ClaimRef, nil)
}

func (e *env) reconcile(held ...driver.HeldClaim) error {
	return e.m.Reconcile(context.Background(), held)
}

// parts is the card's partitions ("2u@0", "~" when made in part,
// "whole").
func (e *env) parts(card string) string {
	e.t.Helper()
	p, err := e.tool.parts(card)
	if err != nil {
		e.t.Fatal(err)
	}
	return strings.Join(p, " ")
}

// intents is the journal as "key:claims" strings.
func (e *env) intents() string {
	e.t.Helper()
	in, err := e.m.Intents()
	if err != nil {
		e.t.Fatal(err)
	}
	var out []string
	for _, i := range in {
		k := i.Card + "/" + i.Profile + "@" + strconv.Itoa(i.Start)
		if i.Whole {
			k = i.Card + "/whole"
		}
		out = append(out, k+":"+strings.Join(i.Claims, ","))
	}
	return strings.Join(out, " ")
}

// admin makes an administrator's partition, behind the lifecycle's back.
func (e *env) admin(card, profile string, start int) {
	e.t.Helper()
	err := e.tool.set(card, func(c *fakeCard) {
		c.Parts = append(c.Parts, fakePart{Profile: profile, Start: start, ID: "ADMIN-" + card + "-" + profile + "-" + strconv.Itoa(start), Complete: true})
	})
	if err != nil {
		e.t.Fatal(err)
	}
}
