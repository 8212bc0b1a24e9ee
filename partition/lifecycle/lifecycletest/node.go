package lifecycletest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/drakit/drakit/driver/drivertest"
	"github.com/drakit/drakit/partition/lifecycle"
)

// node is one scenario's node: its machine, its lifecycle state, the
// driver process that serves it and the kubelet's view of its claims.
type node struct {
	s    *suite
	t    *testing.T
	name string
	dir  string // machine/, state/, driver/ (the runtime's folders)
	m    Machine

	proc    *proc
	kubelet *drivertest.Kubelet
	procs   int

	claims map[string]*resourceapi.ResourceClaim // by the script's name
	gen    map[string]int                        // objects made for the name
	held   []string                              // the claims prepared, in order
	devs   map[string][]string                   // claim → its devices
	cfgs   map[string]string                     // claim → its configuration
	ids    map[string]map[string]string          // claim → device → partition ID
}

// newNode makes a node with fresh hardware.
func (s *suite) newNode(t *testing.T) *node {
	t.Helper()
	s.mu.Lock()
	s.nodes++
	name := fmt.Sprintf("%s-%d", s.prefix, s.nodes)
	s.mu.Unlock()
	// Not t.TempDir: the socket paths must be short (a unix socket's
	// path has at most 107 bytes) and plain (gRPC reads them as URLs).
	dir, err := os.MkdirTemp("", "lct")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	n := &node{s: s, t: t, name: name, dir: dir,
		claims: map[string]*resourceapi.ResourceClaim{}, devs: map[string][]string{},
		gen: map[string]int{}, cfgs: map[string]string{},
		ids: map[string]map[string]string{}}
	for _, d := range []string{"machine", "state", "driver"} {
		if err := os.MkdirAll(filepath.Join(n.dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	m, err := s.c.Machine(filepath.Join(n.dir, "machine"))
	if err != nil {
		t.Fatalf("make the machine: %v", err)
	}
	n.m = m
	// The runtime's slices are owned by the Node (a fake one: no kubelet).
	if err := s.env.AddFakeNode(context.Background(), name, nil); err != nil {
		t.Fatalf("add node %s: %v", name, err)
	}
	t.Cleanup(func() {
		// The node's slices go with it; the namespace takes the claims.
		ctx := context.Background()
		_ = s.env.Client.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{})
		_ = s.env.Client.ResourceV1().ResourceSlices().DeleteCollection(ctx, metav1.DeleteOptions{},
			metav1.ListOptions{FieldSelector: "spec.nodeName=" + n.name})
	})
	return n
}

func (n *node) state() string { return filepath.Join(n.dir, "state") }

// job is a driver process's job on the node.
func (n *node) job() job {
	return job{Node: Node{Name: n.name, Machine: filepath.Join(n.dir, "machine"), State: n.state()},
		Kubeconfig: n.s.env.Kubeconfig, Dir: filepath.Join(n.dir, "driver")}
}

// start starts the node's driver process with j and waits until it
// serves.
func (n *node) start(j job) {
	n.t.Helper()
	if err := n.startErr(j); err != nil {
		n.t.Fatal(err)
	}
}

func (n *node) startErr(j job) error {
	n.procs++
	p, err := n.startProc(j)
	if err != nil {
		return err
	}
	n.proc = p
	socket, err := p.wait()
	if err != nil {
		return err
	}
	k, err := drivertest.Dial(socket)
	if err != nil {
		p.kill()
		return err
	}
	if n.kubelet != nil {
		_ = n.kubelet.Close()
	}
	n.kubelet = k
	n.t.Cleanup(func() { _ = k.Close() })
	return nil
}

// restart starts the driver again after its process died, as a node
// does; with kill, the new process is killed once in its recovery too
// (at its first destroy) and started again.
func (n *node) restart(j job, kill bool) {
	n.t.Helper()
	if kill {
		k := j
		k.Point, k.N = "tool/destroy", 1
		if err := n.startErr(k); err == nil {
			return // recovery destroyed nothing
		}
		if n.proc != nil && !n.proc.dead() {
			n.t.Fatalf("the restart failed without being killed:\n%s", n.proc.tail())
		}
	}
	n.start(j)
}

// stop kills the driver process.
func (n *node) stop() {
	if n.proc != nil {
		n.proc.kill()
	}
}

// claim is the claim object of the script's claim name, created and
// allocated (as the scheduler allocates it) from devices the driver
// publishes, with the step's configuration.
func (n *node) claim(ctx context.Context, st Step) (*resourceapi.ResourceClaim, error) {
	if c := n.claims[st.Claim]; c != nil {
		return c, nil
	}
	n.gen[st.Claim]++
	c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: n.s.ns,
		Name: fmt.Sprintf("%s-%s-%d", n.name, st.Claim, n.gen[st.Claim])}}
	alloc := &resourceapi.AllocationResult{}
	for i, d := range st.Devices {
		pool, err := n.published(ctx, d)
		if err != nil {
			return nil, err
		}
		req := fmt.Sprint("req-", i)
		one := &resourceapi.ExactDeviceRequest{DeviceClassName: "lifecycletest", Count: 1,
			AllocationMode: resourceapi.DeviceAllocationModeExactCount}
		c.Spec.Devices.Requests = append(c.Spec.Devices.Requests, resourceapi.DeviceRequest{
			Name: req, Exactly: one})
		res := resourceapi.DeviceRequestAllocationResult{Request: req, Driver: n.s.c.Driver,
			Pool: pool, Device: d}
		alloc.Devices.Results = append(alloc.Devices.Results, res)
	}
	if st.Config != "" {
		cfg := resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{
			Driver: n.s.c.Driver, Parameters: runtime.RawExtension{Raw: []byte(st.Config)}}}
		c.Spec.Devices.Config = []resourceapi.DeviceClaimConfiguration{{DeviceConfiguration: cfg}}
		alloc.Devices.Config = []resourceapi.DeviceAllocationConfiguration{{
			Source: resourceapi.AllocationConfigSourceClaim, DeviceConfiguration: cfg}}
	}
	claims := n.s.env.Client.ResourceV1().ResourceClaims(n.s.ns)
	created, err := claims.Create(ctx, c, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("create claim %s: %w", st.Claim, err)
	}
	created.Status.Allocation = alloc
	if c, err = claims.UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		return nil, fmt.Errorf("allocate claim %s: %w", st.Claim, err)
	}
	n.claims[st.Claim] = c
	return c, nil
}

// published waits until the driver publishes device for the node and
// returns its pool: the scheduler allocates nothing else.
func (n *node) published(ctx context.Context, device string) (string, error) {
	var last error
	for ctx.Err() == nil {
		list, err := n.s.env.Client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{
			FieldSelector: "spec.nodeName=" + n.name + ",spec.driver=" + n.s.c.Driver})
		if err == nil {
			for _, sl := range list.Items {
				named := func(d resourceapi.Device) bool { return d.Name == device }
				if slices.ContainsFunc(sl.Spec.Devices, named) {
					return sl.Spec.Pool.Name, nil
				}
			}
			err = fmt.Errorf("device %s is not published", device)
		}
		last = err
		time.Sleep(50 * time.Millisecond)
	}
	return "", fmt.Errorf("wait for device %s to be published: %w (%v)", device, ctx.Err(), last)
}

// call is one kubelet call of a step; it fails as the kubelet's does
// when the driver died on the way.
func (n *node) call(st Step) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := n.claim(ctx, st)
	if err != nil {
		return err
	}
	if st.Devices == nil {
		if err := n.kubelet.Unprepare(ctx, c); err != nil {
			return err
		}
		n.held = slices.DeleteFunc(n.held, func(h string) bool { return h == st.Claim })
		delete(n.ids, st.Claim)
		delete(n.claims, st.Claim) // a later prepare of the name is a new claim
		return nil
	}
	if _, err := n.kubelet.Prepare(ctx, c); err != nil {
		return err
	}
	if !slices.Contains(n.held, st.Claim) {
		n.held = append(n.held, st.Claim)
	}
	n.devs[st.Claim], n.cfgs[st.Claim] = st.Devices, st.Config
	return n.record(ctx, st.Claim, st.Devices)
}

// record notes the partition each device of a prepared claim got, and
// checks that the claim's CDI spec hands it to the containers.
func (n *node) record(ctx context.Context, claim string, devices []string) error {
	ids := map[string]string{}
	spec := n.cdiSpec(string(n.claims[claim].UID))
	for _, d := range devices {
		k, ok := n.m.Key(d)
		if !ok {
			return fmt.Errorf("claim %s: device %s has no key", claim, d)
		}
		if k.Whole {
			continue
		}
		p, err := n.partition(ctx, k)
		if err != nil {
			return fmt.Errorf("claim %s prepared: %w", claim, err)
		}
		if !strings.Contains(spec, p.ID) {
			return fmt.Errorf("claim %s prepared: its CDI spec does not name "+
				"partition %s (%s):\n%s", claim, k, p.ID, spec)
		}
		ids[d] = p.ID
	}
	n.ids[claim] = ids
	return nil
}

// partition is the complete partition at k, as the tool lists it.
func (n *node) partition(ctx context.Context, k lifecycle.Key) (lifecycle.Partition, error) {
	parts, err := n.m.Tool.List(ctx, k.Card)
	if err != nil {
		return lifecycle.Partition{}, err
	}
	at := func(p lifecycle.Partition) bool { return p.Key == k && p.Complete }
	i := slices.IndexFunc(parts, at)
	if i < 0 {
		err := fmt.Errorf("partition %s is not there (the card has %v)", k, parts)
		return lifecycle.Partition{}, err
	}
	return parts[i], nil
}

// cdiSpec is the claim's CDI spec files, concatenated.
func (n *node) cdiSpec(uid string) string {
	files, _ := filepath.Glob(filepath.Join(n.dir, "driver", "cdi", "*"+uid+"*"))
	var b strings.Builder
	for _, f := range files {
		data, _ := os.ReadFile(f)
		b.Write(data)
	}
	return b.String()
}

// do runs st; with restart, a driver that dies on the way is started
// again (and killed once more in its recovery when kill) and the call
// retried until it succeeds, as the kubelet does. died reports a death.
func (n *node) do(st Step, restart func() job, kill bool) (died bool) {
	n.t.Helper()
	err := n.call(st)
	if err == nil {
		return false
	}
	if restart == nil || !n.proc.dies() {
		n.t.Fatalf("%s: %v\n%s", st, err, n.proc.tail())
	}
	if !n.proc.killed() {
		n.t.Fatalf("%s: the driver exited: %v\n%s", st, err, n.proc.tail())
	}
	n.restart(restart(), kill)
	n.checkCutShort(st)
	n.retry(st)
	return true
}

// checkCutShort checks the node after a restart, before the kubelet
// retries the call st that the kill cut short: the claim of st holds all
// its partitions (the driver recorded the prepare, or had not begun the
// unprepare) or none (it undid what it had begun), and every other
// partition is a held claim's, as check says.
func (n *node) checkCutShort(st Step) {
	n.t.Helper()
	ctx := context.Background()
	devs := st.Devices
	if devs == nil {
		devs = n.devs[st.Claim]
	}
	present := 0
	for _, d := range devs {
		if k, _ := n.m.Key(d); !k.Whole {
			if _, err := n.partition(ctx, k); err == nil {
				present++
			}
		}
	}
	held, devsBefore, idsBefore := slices.Clone(n.held), n.devs[st.Claim], n.ids[st.Claim]
	n.held = slices.DeleteFunc(n.held, func(h string) bool { return h == st.Claim })
	if present > 0 {
		n.held = append(n.held, st.Claim)
		n.devs[st.Claim] = devs
		if st.Devices != nil { // made by the prepare cut short: its IDs are new
			if err := n.record(ctx, st.Claim, devs); err != nil {
				n.t.Errorf("after the restart, before the retry of %s: %v", st, err)
			}
		}
	}
	n.check("after the restart, before the retry of " + st.String())
	n.held, n.devs[st.Claim], n.ids[st.Claim] = held, devsBefore, idsBefore
}

// retry repeats st until it succeeds, as the kubelet repeats a failed
// call.
func (n *node) retry(st Step) {
	n.t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		err := n.call(st)
		if err == nil {
			return
		}
		if time.Now().After(deadline) || n.proc.dead() {
			n.t.Fatalf("%s, retried for a minute: %v\n%s", st, err, n.proc.tail())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (st Step) String() string {
	if st.Devices == nil {
		return "unprepare " + st.Claim
	}
	return fmt.Sprintf("prepare %s %v", st.Claim, st.Devices)
}

// releaseAll unprepares every claim the kubelet holds.
func (n *node) releaseAll() {
	n.t.Helper()
	for _, c := range slices.Clone(n.held) {
		n.retry(Unprepare(c))
	}
}

// check checks that the cards hold exactly the partitions of the claims
// the kubelet holds, each the one its claim got (not destroyed, not made
// again), nothing made in part, and that the journal records exactly
// their holders.
func (n *node) check(when string) {
	n.t.Helper()
	ctx := context.Background()
	holders := map[lifecycle.Key][]string{}
	for _, c := range n.held {
		for _, d := range n.devs[c] {
			k, _ := n.m.Key(d)
			holders[k] = append(holders[k], string(n.claims[c].UID))
		}
	}
	var errs []string
	for _, card := range n.m.Cards {
		parts, err := n.m.Tool.List(ctx, card)
		if err != nil {
			n.t.Fatalf("%s: list card %s: %v", when, card, err)
		}
		for _, p := range parts {
			switch {
			case !p.Complete:
				errs = append(errs, fmt.Sprintf("%s is left made in part", p.Key))
			case holders[p.Key] == nil:
				errs = append(errs, fmt.Sprintf("%s (%s) is left, no held claim has it (leaked)",
					p.Key, p.ID))
			}
		}
		for k := range holders {
			if k.Card != card || k.Whole {
				continue
			}
			got := slices.IndexFunc(parts, func(p lifecycle.Partition) bool { return p.Key == k })
			if want := n.idOf(k); got < 0 || parts[got].ID != want {
				errs = append(errs, fmt.Sprintf("%s: %v on the card, "+
					"want partition %s its claim got (destroyed, or made again)", k, parts, want))
			}
			if holders[lifecycle.WholeCard(card)] != nil {
				errs = append(errs, fmt.Sprintf("card %s is held whole and %s at once", card, k))
			}
		}
	}
	intents, err := lifecycle.ReadIntents(n.state())
	if err != nil {
		n.t.Fatalf("%s: read the journal: %v", when, err)
	}
	seen := map[lifecycle.Key]bool{}
	for _, in := range intents {
		seen[in.Key] = true
		want := slices.Sorted(slices.Values(holders[in.Key]))
		if !slices.Equal(in.Claims, slices.Compact(want)) {
			errs = append(errs, fmt.Sprintf("the journal says %s is held by %v, want %v",
				in.Key, in.Claims, want))
		}
	}
	for k := range holders {
		if !seen[k] {
			errs = append(errs, fmt.Sprintf("the journal does not record %s, "+
				"which a held claim has", k))
		}
	}
	if b, err := os.ReadFile(filepath.Join(n.dir, "driver", "overlaps")); err == nil {
		errs = append(errs, "the lifecycle called the tool twice at once for one card: "+string(b))
	}
	if len(errs) > 0 {
		slices.Sort(errs)
		n.t.Errorf("%s:\n  %s", when, strings.Join(errs, "\n  "))
	}
}

// idOf is the partition ID the claim holding k got.
func (n *node) idOf(k lifecycle.Key) string {
	for c, ids := range n.ids {
		for d, id := range ids {
			if kk, _ := n.m.Key(d); kk == k && slices.Contains(n.held, c) {
				return id
			}
		}
	}
	return ""
}

// empty checks that nothing is left: no partition, no intent.
func (n *node) empty(when string) {
	n.t.Helper()
	if len(n.held) > 0 {
		n.t.Fatalf("%s: claims %v still held", when, n.held)
	}
	n.check(when)
}
