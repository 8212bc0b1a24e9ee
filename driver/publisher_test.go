package driver_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/drakit/drakit/device"
	"github.com/drakit/drakit/driver"
	"github.com/drakit/drakit/internal/cluster"
)

// viewDiscoverer is the node's devices as one version of a driver
// publishes them: every device carries the attribute "view" (two
// versions of a driver during a rolling update publish the same devices
// differently). The devices can change (the hardware, shared by both
// versions), and the test sends change events to one process only.
type viewDiscoverer struct {
	eventDiscoverer // its Watch; Inventory is the view's
	view            string
	hw              *sharedHW
}

func viewOf(view string, hw *sharedHW) *viewDiscoverer {
	return &viewDiscoverer{
		eventDiscoverer: eventDiscoverer{events: make(chan device.Event, 1)},
		view:            view,
		hw:              hw,
	}
}

// sharedHW is the node's devices per pool, which both versions see.
type sharedHW struct {
	mu    sync.Mutex
	pools map[string][]string
}

func (h *sharedHW) set(pool string, devs ...string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.pools == nil {
		h.pools = map[string][]string{}
	}
	h.pools[pool] = devs
}

func (d *viewDiscoverer) Inventory(context.Context) (*device.Inventory, error) {
	d.hw.mu.Lock()
	defer d.hw.mu.Unlock()
	inv := &device.Inventory{Driver: testDriver}
	names := make([]string, 0, len(d.hw.pools))
	for p := range d.hw.pools {
		names = append(names, p)
	}
	sort.Strings(names)
	for _, p := range names {
		pool := device.Pool{Name: p}
		for _, dev := range d.hw.pools[p] {
			pool.Devices = append(pool.Devices, device.New(dev).StringAttribute("view", d.view))
		}
		inv.Pools = append(inv.Pools, pool)
	}
	return inv, nil
}

// published is the node's slices as "pool/device=view", sorted.
func published(ctx context.Context, t *testing.T, c *cluster.Cluster) []string {
	t.Helper()
	items, err := slicesOfNode(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, s := range items {
		for _, d := range s.Spec.Devices {
			v := ""
			if a, ok := d.Attributes["view"]; ok && a.StringValue != nil {
				v = *a.StringValue
			}
			out = append(out, s.Spec.Pool.Name+"/"+d.Name+"="+v)
		}
	}
	sort.Strings(out)
	return out
}

// sliceRequests is the API server's count of ResourceSlice requests
// with an HTTP code of the form code ("409", "2") and one of verbs, from
// its own metrics (apiserver_request_total): what the API server saw,
// not what a client believes it sent.
func sliceRequests(
	ctx context.Context,
	t *testing.T,
	c *cluster.Cluster,
	code string,
	verbs ...string,
) int {
	t.Helper()
	raw, err := c.Client.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "apiserver_request_total{") ||
			!strings.Contains(line, `resource="resourceslices"`) ||
			!strings.Contains(line, `code="`+code) {
			continue
		}
		verb := false
		for _, v := range verbs {
			verb = verb || strings.Contains(line, `verb="`+v+`"`)
		}
		if !verb {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			t.Fatalf("metrics line %q: %v", line, err)
		}
		n += int(v)
	}
	return n
}

// At start the new process replaces the previous process's pools that
// its inventory lacks at once: with the slice controller's sync delay at
// an hour, the previous process's second pool would stay published
// beside the new one's devices for that hour.
func TestRestartRemovesPreviousPoolsAtOnce(t *testing.T) {
	c, ctx, _, d, fhw := setupE2E(t)
	hw := &sharedHW{}
	hw.set(testNode, "dev-0")
	hw.set(testNode+"/gone", "dev-9")
	slow := driver.WithSliceSyncDelay(time.Hour)
	first := startDriver(ctx, t, c, d, viewOf("v1", hw), fhw, slow)
	first.waitPublished(ctx, t, "the first process's slices")
	first.stop(t)

	hw.mu.Lock() // the second pool's devices are gone
	delete(hw.pools, testNode+"/gone")
	hw.mu.Unlock()
	second := startDriver(ctx, t, c, d, viewOf("v2", hw), fhw, slow)
	second.waitPublished(ctx, t, "the second process's slices")
	want := testNode + "/dev-0=v2"
	waitFor(ctx, t, "the previous process's pool removed", func(ctx context.Context) (bool, error) {
		got := published(ctx, t, c)
		return len(got) == 1 && got[0] == want, nil
	})
}

// During a rolling update's surge the two instances publish one view:
// the new instance takes the node's slices over from the old one, which
// writes nothing from then on (with the slice controller's sync delay
// short, two publishers wrote their views over each other several times
// a second), and the API server sees no update conflict and no slice
// write while nothing changes. A change seen by the old instance reaches
// the slices through the new one. When the new instance goes (a failed
// rollout), the old one publishes again.
func TestSurgePublishesOneView(t *testing.T) {
	c, ctx, _, d, fhw := setupE2E(t)
	hw := &sharedHW{}
	hw.set(testNode, "dev-0", "dev-1")
	fast := driver.WithSliceSyncDelay(200 * time.Millisecond)
	oldDisc := viewOf("old", hw)
	old := startDriver(ctx, t, c, d, oldDisc, fhw, driver.WithRollingUpdate("old-pod"), fast)
	old.waitPublished(ctx, t, "the old instance's slices")
	newer := startDriver(
		ctx,
		t,
		c,
		d,
		viewOf("new", hw),
		fhw,
		driver.WithRollingUpdate("new-pod"),
		fast,
	)
	view := func(v string, devs ...string) []string {
		var out []string
		for _, dev := range devs {
			out = append(out, testNode+"/"+dev+"="+v)
		}
		return out
	}
	waitFor(ctx, t, "the new instance's view", func(ctx context.Context) (bool, error) {
		return slicesEqual(published(ctx, t, c), view("new", "dev-0", "dev-1")), nil
	})
	if old.d.Publishing() || !newer.d.Publishing() {
		t.Fatalf(
			"publishing: old %v, new %v; want the new instance only",
			old.d.Publishing(),
			newer.d.Publishing(),
		)
	}

	// Quiet: nothing changes for 15 sync delays; two publishers would
	// have written their views over each other all along.
	conflicts := sliceRequests(ctx, t, c, "409", "PUT", "POST", "DELETE")
	writes := sliceRequests(ctx, t, c, "2", "PUT", "POST", "DELETE")
	list, err := c.Client.ResourceV1().
		ResourceSlices().
		List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + testNode})
	if err != nil {
		t.Fatal(err)
	}
	w, err := c.Client.ResourceV1().
		ResourceSlices().
		Watch(ctx, metav1.ListOptions{
			FieldSelector:   "spec.nodeName=" + testNode,
			ResourceVersion: list.ResourceVersion,
		})
	if err != nil {
		t.Fatal(err)
	}
	events := 0
	quiet := time.After(3 * time.Second)
watch:
	for {
		select {
		case <-w.ResultChan():
			events++
		case <-quiet:
			break watch
		}
	}
	w.Stop()
	if n := sliceRequests(ctx, t, c, "409", "PUT", "POST", "DELETE") - conflicts; n != 0 {
		t.Errorf("%d ResourceSlice update conflicts while nothing changed", n)
	}
	if n := sliceRequests(ctx, t, c, "2", "PUT", "POST", "DELETE") - writes; n != 0 || events != 0 {
		t.Errorf("%d ResourceSlice writes (%d watch events) while nothing changed", n, events)
	}

	// The hardware changes and only the old instance hears of it.
	hw.set(testNode, "dev-0", "dev-1", "dev-2")
	oldDisc.events <- device.Event{Type: device.EventInventoryChanged}
	waitFor(
		ctx,
		t,
		"the old instance's change published by the new one",
		func(ctx context.Context) (bool, error) {
			return slicesEqual(published(ctx, t, c), view("new", "dev-0", "dev-1", "dev-2")), nil
		},
	)

	// The new instance goes: the old one publishes again.
	newer.stop(t)
	waitFor(
		ctx,
		t,
		"the old instance's view after the new one left",
		func(ctx context.Context) (bool, error) {
			return slicesEqual(published(ctx, t, c), view("old", "dev-0", "dev-1", "dev-2")), nil
		},
	)
	if !old.d.Publishing() {
		t.Error("the old instance does not say it publishes")
	}
}

func slicesEqual(a, b []string) bool {
	return fmt.Sprint(a) == fmt.Sprint(b)
}

// TestMeasureSurgeConflicts measures, with the slice controller's
// default sync delay, what the API server sees during one minute of a
// rolling update's surge whose two instances publish different views:
// ResourceSlice update conflicts (HTTP 409) and writes, with each
// instance publishing its own view (as before one publisher per node)
// and with one publisher. It asserts nothing and runs only with
// DRAKIT_MEASURE_SURGE=1 (about two and a half minutes):
//
//	DRAKIT_MEASURE_SURGE=1 go test -run TestMeasureSurgeConflicts -v ./driver/
func TestMeasureSurgeConflicts(t *testing.T) {
	if os.Getenv("DRAKIT_MEASURE_SURGE") != "1" {
		t.Skip("a measurement: set DRAKIT_MEASURE_SURGE=1")
	}
	for _, mode := range []struct {
		name string
		opts []driver.Option
	}{
		{"each instance publishes", []driver.Option{driver.WithSoloPublisher()}},
		{"one publisher", nil},
	} {
		t.Run(mode.name, func(t *testing.T) {
			c, ctx, _, d, fhw := setupE2E(t)
			// The reference NVIDIA driver's shape on a node with four
			// dynamic GPUs: the node's pool, and a pool of 15 devices per
			// GPU.
			hw := &sharedHW{}
			hw.set(testNode, "dev-0", "dev-1")
			for g := range 4 {
				var devs []string
				for i := range 15 {
					devs = append(devs, fmt.Sprintf("gpu-%d-%d", g, i))
				}
				hw.set(fmt.Sprintf("%s/gpu-%02d", testNode, g), devs...)
			}
			old := startDriver(
				ctx,
				t,
				c,
				d,
				viewOf("old", hw),
				fhw,
				append(mode.opts, driver.WithRollingUpdate("old-pod"))...)
			old.waitPublished(ctx, t, "the old instance's slices")
			conflicts := sliceRequests(ctx, t, c, "409", "PUT", "POST", "DELETE")
			writes := sliceRequests(ctx, t, c, "2", "PUT", "POST", "DELETE")
			newer := startDriver(
				ctx,
				t,
				c,
				d,
				viewOf("new", hw),
				fhw,
				append(mode.opts, driver.WithRollingUpdate("new-pod"))...)
			flips, last := -1, fmt.Sprint(published(ctx, t, c)) // the start's change is not a flip
			end := time.Now().Add(time.Minute)
			for ; time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
				if v := fmt.Sprint(published(ctx, t, c)); v != last {
					flips, last = flips+1, v
				}
				if flips < 0 {
					flips = 0
				}
			}
			t.Logf(
				"%s: in the surge's first minute the API server saw %d ResourceSlice update "+
					"conflicts and %d writes; the published view changed %d times after the new "+
					"instance's first",
				mode.name,
				sliceRequests(ctx, t, c, "409", "PUT", "POST", "DELETE")-conflicts,
				sliceRequests(ctx, t, c, "2", "PUT", "POST", "DELETE")-writes,
				flips,
			)
			newer.stop(t)
			old.stop(t)
		})
	}
}
