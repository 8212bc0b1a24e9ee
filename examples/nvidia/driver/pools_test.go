package driver_test

import (
	"context"
	"fmt"
	"io"
	"math/rand"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/drakit/drakit/driver/drivertest"
	nvdriver "github.com/drakit/drakit/examples/nvidia/driver"
	"github.com/drakit/drakit/testenv"
)

// poolWatch follows one node's ResourceSlices through a watch and judges
// every pool after every event as the scheduler's allocator does: a pool
// is its slices of the highest generation, complete when there are
// ResourceSliceCount of them; an incomplete pool is skipped whole.
type poolWatch struct {
	mu       sync.Mutex
	cond     *sync.Cond
	slices   map[string]*resourceapi.ResourceSlice
	events   int
	since    map[string]time.Time // pool -> when it became incomplete
	episodes []poolEpisode        // incomplete spells that ended
	seen     map[string]bool      // pools ever incomplete
	err      error
}

// poolEpisode is one spell during which a pool was incomplete.
type poolEpisode struct {
	at      time.Time // when it began
	pool    string
	devices int // devices the pool had when it was last complete
	took    time.Duration
}

// watchPools starts following node's slices; it stops when ctx ends.
func watchPools(
	ctx context.Context,
	t testing.TB,
	client kubernetes.Interface,
	node string,
) *poolWatch {
	t.Helper()
	pw := &poolWatch{
		slices: map[string]*resourceapi.ResourceSlice{},
		since:  map[string]time.Time{},
		seen:   map[string]bool{},
	}
	pw.cond = sync.NewCond(&pw.mu)
	sel := "spec.nodeName=" + node
	list, err := client.ResourceV1().
		ResourceSlices().
		List(ctx, metav1.ListOptions{FieldSelector: sel})
	if err != nil {
		t.Fatal(err)
	}
	for i := range list.Items {
		pw.slices[list.Items[i].Name] = &list.Items[i]
	}
	w, err := client.ResourceV1().
		ResourceSlices().
		Watch(ctx, metav1.ListOptions{FieldSelector: sel, ResourceVersion: list.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	lastDevices := map[string]int{}
	go func() {
		defer w.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case ev, ok := <-w.ResultChan():
				if !ok {
					pw.mu.Lock()
					if ctx.Err() == nil {
						pw.err = fmt.Errorf("slice watch of node %s ended", node)
					}
					pw.cond.Broadcast()
					pw.mu.Unlock()
					return
				}
				s, ok := ev.Object.(*resourceapi.ResourceSlice)
				if !ok {
					continue
				}
				now := time.Now()
				pw.mu.Lock()
				switch ev.Type {
				case watch.Added, watch.Modified:
					pw.slices[s.Name] = s
				case watch.Deleted:
					delete(pw.slices, s.Name)
				}
				pw.events++
				for pool, st := range pw.poolsLocked() {
					_, was := pw.since[pool]
					switch {
					case !st.complete && !was:
						pw.since[pool] = now
						pw.seen[pool] = true
					case st.complete && was:
						pw.episodes = append(
							pw.episodes,
							poolEpisode{
								at:      pw.since[pool],
								pool:    pool,
								devices: lastDevices[pool],
								took:    now.Sub(pw.since[pool]),
							},
						)
						delete(pw.since, pool)
					}
					if st.complete {
						lastDevices[pool] = st.devices
					}
				}
				pw.cond.Broadcast()
				pw.mu.Unlock()
			}
		}
	}()
	go func() { // wake waiters when ctx ends
		<-ctx.Done()
		pw.mu.Lock()
		pw.cond.Broadcast()
		pw.mu.Unlock()
	}()
	return pw
}

// poolState is a pool as the allocator sees it.
type poolState struct {
	complete bool
	devices  int      // in the newest generation's slices
	names    []string // those devices, in slice-name then device order
}

func (pw *poolWatch) poolsLocked() map[string]poolState {
	gen := map[string]int64{}
	for _, s := range pw.slices {
		gen[s.Spec.Pool.Name] = max(gen[s.Spec.Pool.Name], s.Spec.Pool.Generation)
	}
	byPool := map[string][]*resourceapi.ResourceSlice{}
	for _, s := range pw.slices {
		if s.Spec.Pool.Generation == gen[s.Spec.Pool.Name] {
			byPool[s.Spec.Pool.Name] = append(byPool[s.Spec.Pool.Name], s)
		}
	}
	out := map[string]poolState{}
	for pool, ss := range byPool {
		sort.Slice(ss, func(i, j int) bool { return ss[i].Name < ss[j].Name })
		st := poolState{complete: int64(len(ss)) == ss[0].Spec.Pool.ResourceSliceCount}
		for _, s := range ss {
			for _, d := range s.Spec.Devices {
				st.names = append(st.names, d.Name)
			}
		}
		st.devices = len(st.names)
		out[pool] = st
	}
	return out
}

// waitFor blocks until cond holds for the pools (checked after every
// event) or the timeout passes, and reports whether it held.
func (pw *poolWatch) waitFor(timeout time.Duration, cond func(map[string]poolState) bool) bool {
	timer := time.AfterFunc(timeout, func() {
		pw.mu.Lock()
		pw.cond.Broadcast()
		pw.mu.Unlock()
	})
	defer timer.Stop()
	deadline := time.Now().Add(timeout)
	pw.mu.Lock()
	defer pw.mu.Unlock()
	for {
		if cond(pw.poolsLocked()) {
			return true
		}
		if pw.err != nil || time.Now().After(deadline) {
			return false
		}
		pw.cond.Wait()
	}
}

// reset forgets what the watch saw so far (a new pool is incomplete
// while its first slices are created; that is no loss).
func (pw *poolWatch) reset() {
	pw.mu.Lock()
	defer pw.mu.Unlock()
	pw.episodes, pw.seen, pw.events = nil, map[string]bool{}, 0
	for p := range pw.since {
		pw.seen[p] = true
	}
}

// report is what the watch saw: the incomplete spells (those still open
// counted up to now) and the pools that were ever incomplete.
func (pw *poolWatch) report() (episodes []poolEpisode, pools []string, events int) {
	pw.mu.Lock()
	defer pw.mu.Unlock()
	episodes = slices.Clone(pw.episodes)
	for pool, t := range pw.since {
		episodes = append(episodes, poolEpisode{at: t, pool: pool, took: time.Since(t)})
	}
	for p := range pw.seen {
		pools = append(pools, p)
	}
	sort.Strings(pools)
	return episodes, pools, pw.events
}

// dynamicDevices is how many devices the pools hold (dynamic GPUs whole
// and their MIG devices), when every pool is complete; -1 otherwise.
func dynamicDevices(pools map[string]poolState) int {
	n := 0
	for _, st := range pools {
		if !st.complete {
			return -1
		}
		n += st.devices
	}
	return n
}

// poolOf finds the pool that publishes dev.
func poolOf(pools map[string]poolState, dev string) string {
	for pool, st := range pools {
		if slices.Contains(st.names, dev) {
			return pool
		}
	}
	return ""
}

// firstOn is the first device of GPU gpu in pool's order (the
// scheduler's first fit on that GPU for a request its first device
// satisfies).
func firstOn(pools map[string]poolState, pool string, gpu int) string {
	prefix := fmt.Sprintf("gpu-%d-", gpu)
	for _, n := range pools[pool].names {
		if strings.HasPrefix(n, prefix) {
			return n
		}
	}
	return ""
}

// TestPoolsStayCompleteAcrossMIGChanges runs the reference driver with
// dynamic MIG on all 8 GPUs of a simulated DGX H200 against a real API
// server (issue 25, item 9): MIG devices are made and destroyed through
// the kubelet's gRPC calls, one GPU at a time and two GPUs at once, and
// after every slice event the test judges every pool of the node as the
// scheduler's allocator does. No pool may ever be incomplete: an
// incomplete pool is skipped whole, with every GPU in it. With one pool
// for all 8 GPUs (112 devices in two slices) the first MIG change starts
// a new pool generation and the pool is incomplete until its last slice
// is rewritten.
func TestPoolsStayCompleteAcrossMIGChanges(t *testing.T) {
	env := testenv.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const node = "nv-pools"
	if err := env.AddFakeNode(ctx, node, nil); err != nil {
		t.Fatal(err)
	}
	pw := watchPools(ctx, t, env.Client, node)
	d := runDriver(ctx, t, env, nvdriver.DriverName, node, nvidiaStart(t, nil, false))
	defer d.stop()
	kl, err := drivertest.Dial(d.k.DRASocket())
	if err != nil {
		t.Fatal(err)
	}
	defer kl.Close()

	const empty = 8 * 15 // each GPU whole, and mig.DefaultProfiles on an H200: 14 placements
	if !pw.waitFor(
		time.Minute,
		func(p map[string]poolState) bool { return dynamicDevices(p) == empty },
	) {
		t.Fatalf("the node's %d dynamic MIG devices were not published", empty)
	}
	pw.reset()
	var pools map[string]poolState
	pw.waitFor(0, func(p map[string]poolState) bool { pools = p; return true })

	// claimFor allocates GPU gpu's first device in its pool's order: the
	// scheduler's pick on that GPU.
	n := 0
	claimFor := func(gpu int) *resourceapi.ResourceClaim {
		t.Helper()
		dev := fmt.Sprintf("gpu-%d-1g-18gb-0", gpu)
		pool := poolOf(pools, dev)
		if first := firstOn(pools, pool, gpu); first != "" {
			dev = first
		}
		n++
		c, err := drivertest.CreateAllocatedClaim(ctx, env.Client, drivertest.ClaimSpec{
			Namespace: "default", Name: fmt.Sprintf("pools-%d", n), Driver: nvdriver.DriverName,
			Devices: []drivertest.Device{{Pool: pool, Device: dev}},
		})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	// step prepares (or unprepares) claims in one kubelet call and waits
	// for the driver's republish to reach the API server.
	step := func(what string, prepare bool, claims ...*resourceapi.ResourceClaim) {
		t.Helper()
		before := dynamicDevices(pools)
		if prepare {
			if _, err := kl.Prepare(ctx, claims...); err != nil {
				t.Fatalf("%s: %v", what, err)
			}
		} else if err := kl.Unprepare(ctx, claims...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		ok := pw.waitFor(time.Minute, func(p map[string]poolState) bool {
			if n := dynamicDevices(p); n >= 0 && n != before {
				pools = p
				return true
			}
			return false
		})
		if !ok {
			t.Fatalf("%s: the slices did not change within a minute", what)
		}
	}
	a, b, c := claimFor(4), claimFor(1), claimFor(6)
	step("MIG device on GPU 4", true, a)
	step("MIG devices on GPUs 1 and 6 in one call", true, b, c)
	step("MIG device on GPU 4 destroyed", false, a)
	step("MIG devices on GPUs 1 and 6 destroyed", false, b, c)
	if !pw.waitFor(
		time.Minute,
		func(p map[string]poolState) bool { return dynamicDevices(p) == empty },
	) {
		t.Errorf("the node did not return to its %d dynamic devices", empty)
	}
	episodes, incomplete, events := pw.report()
	if len(incomplete) > 0 {
		t.Errorf(
			"pools %v were incomplete %d times during the MIG changes (%d slice events): the "+
				"scheduler skipped them whole",
			incomplete,
			len(episodes),
			events,
		)
	}
	t.Logf(
		"%d slice events, %d pools, none incomplete: %v",
		events,
		len(pools),
		len(incomplete) == 0,
	)
}

// BenchmarkPoolStream measures what the reference driver's own republish
// costs the scheduler (issue 25, item 9): the driver serves a fake node
// with dynamic MIG on all 8 GPUs of a simulated DGX H200, the real
// kube-scheduler places a stream of pods, each with a claim for one MIG
// device (1g, 2g or 3g at 4:2:1), this test plays the kubelet (prepare
// over the driver's gRPC socket, then pod deletion and unprepare), and a
// watch judges every pool after every slice event as the allocator does.
// It prints how often and how long pools were incomplete and how many
// pods the scheduler turned away at least once (FailedScheduling) with
// room on the node: at most 6 pods run at a time, far below the node's
// capacity, so every refusal is the publication's doing. Pods, concurrency
// and seed: POOL_STREAM_PODS (default 500), POOL_STREAM_CONCURRENCY (6).
// Run with -benchtime=1x.
func BenchmarkPoolStream(b *testing.B) {
	env := testenv.Start(b)
	klog.LogToStderr(false)
	klog.SetOutput(io.Discard)
	pods, conc := envInt("POOL_STREAM_PODS", 500), envInt("POOL_STREAM_CONCURRENCY", 6)
	tw := tabwriter.NewWriter(os.Stdout, 2, 0, 2, ' ', 0)
	fmt.Fprintln(
		tw,
		"round\tpods\tpods refused >=1 (FailedScheduling)\trefusals\tprepare errors\tpools ever "+
			"incomplete\tincomplete spells\tspell p50 / max ms\tincomplete "+
			"pool-seconds\tcreate->bound p50 / p99 / max ms\twall s",
	)
	for round := range b.N {
		r := poolStream(b, env, fmt.Sprintf("nv-stream-%d", round), pods, conc, int64(round+1))
		fmt.Fprintf(
			tw,
			"%d\t%d\t%d\t%d\t%d\t%d\t%d\t%.0f / %.0f\t%.2f\t%.0f / %.0f / %.0f\t%.0f\n",
			round,
			r.pods,
			r.refusedPods,
			r.refusals,
			r.prepareErrors,
			r.poolsIncomplete,
			r.spells,
			ms(r.spellP50),
			ms(r.spellMax),
			r.incompleteSeconds,
			ms(r.boundP50),
			ms(r.boundP99),
			ms(r.boundMax),
			r.wall.Seconds(),
		)
	}
	tw.Flush()
}

func envInt(name string, def int) int {
	var v int
	if _, err := fmt.Sscan(os.Getenv(name), &v); err == nil && v > 0 {
		return v
	}
	return def
}

type streamResult struct {
	pods, refusedPods, refusals, prepareErrors int
	poolsIncomplete, spells                    int
	spellP50, spellMax                         time.Duration
	incompleteSeconds                          float64
	boundP50, boundP99, boundMax               time.Duration
	wall                                       time.Duration
}

// poolStream runs one stream of pods on a fresh node; see
// BenchmarkPoolStream.
func poolStream(
	b *testing.B,
	env *testenv.Env,
	node string,
	pods, conc int,
	seed int64,
) streamResult {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	if err := env.AddFakeNode(ctx, node, nil); err != nil {
		b.Fatal(err)
	}
	profiles := []string{
		"1g.18gb",
		"1g.18gb",
		"1g.18gb",
		"1g.18gb",
		"2g.35gb",
		"2g.35gb",
		"3g.71gb",
	}
	for _, c := range nvdriver.DeviceClasses(profiles) {
		if _, err := env.Client.ResourceV1().DeviceClasses().Create(
			ctx, c, metav1.CreateOptions{},
		); err != nil &&
			!apierrors.IsAlreadyExists(err) {
			b.Fatal(err)
		}
	}
	ns := node
	if _, err := env.Client.CoreV1().Namespaces().Create(
		ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{},
	); err != nil {
		b.Fatal(err)
	}
	for { // pods need the namespace's default ServiceAccount
		if _, err := env.Client.CoreV1().ServiceAccounts(ns).Get(
			ctx, "default", metav1.GetOptions{},
		); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	pw := watchPools(ctx, b, env.Client, node)
	d := runDriver(ctx, b, env, nvdriver.DriverName, node, nvidiaStart(b, nil, false))
	defer d.stop()
	kl, err := drivertest.Dial(d.k.DRASocket())
	if err != nil {
		b.Fatal(err)
	}
	defer kl.Close()
	if !pw.waitFor(
		time.Minute,
		func(p map[string]poolState) bool { return dynamicDevices(p) == 8*14 },
	) {
		b.Fatal("the node's dynamic MIG devices were not published")
	}
	pw.reset()

	// Refusals: FailedScheduling events of the stream's pods.
	var mu sync.Mutex
	refused := map[string]bool{} // pods
	refusals := map[string]int{} // events: the highest count seen
	evw, err := env.Client.CoreV1().
		Events(ns).
		Watch(ctx, metav1.ListOptions{FieldSelector: "reason=FailedScheduling"})
	if err != nil {
		b.Fatal(err)
	}
	defer evw.Stop()
	go func() {
		for ev := range evw.ResultChan() {
			if e, ok := ev.Object.(*corev1.Event); ok && ev.Type != watch.Deleted {
				mu.Lock()
				refused[e.InvolvedObject.Name] = true
				refusals[e.Name] = max(refusals[e.Name], 1, int(e.Count))
				mu.Unlock()
			}
		}
	}()

	// The kubelet: prepare each bound pod's claim, then end the pod.
	created := map[string]time.Time{}
	var bound []time.Duration
	prepareErrors := 0
	slots := make(chan struct{}, conc)
	var wg sync.WaitGroup
	pwatch, err := env.Client.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		b.Fatal(err)
	}
	defer pwatch.Stop()
	handled := map[string]bool{}
	go func() {
		for ev := range pwatch.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok || p.Spec.NodeName == "" || ev.Type == watch.Deleted {
				continue
			}
			mu.Lock()
			if handled[p.Name] {
				mu.Unlock()
				continue
			}
			handled[p.Name] = true
			bound = append(bound, time.Since(created[p.Name]))
			mu.Unlock()
			wg.Add(1)
			go func(name string) {
				defer wg.Done()
				defer func() { <-slots }()
				claims := env.Client.ResourceV1().ResourceClaims(ns)
				claim, err := claims.Get(ctx, name, metav1.GetOptions{})
				if err == nil {
					if _, err = kl.Prepare(ctx, claim); err == nil {
						err = kl.Unprepare(ctx, claim)
					}
				}
				if err != nil && ctx.Err() == nil {
					mu.Lock()
					prepareErrors++
					mu.Unlock()
					b.Logf("pod %s: %v", name, err)
				}
				_ = env.Client.CoreV1().
					Pods(ns).
					Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
				_ = claims.Delete(ctx, name, metav1.DeleteOptions{})
			}(p.Name)
		}
	}()

	rng := rand.New(rand.NewSource(seed))
	t0 := time.Now()
	take := func() {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			b.Fatalf("the stream did not finish: %v", ctx.Err())
		}
	}
	for i := range pods {
		take()
		name := fmt.Sprintf("p-%04d", i)
		prof := profiles[rng.Intn(len(profiles))]
		claim := &resourceapi.ResourceClaim{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: resourceapi.ResourceClaimSpec{
				Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
					Name: "mig",
					Exactly: &resourceapi.ExactDeviceRequest{
						DeviceClassName: nvdriver.ProfileClass(prof),
					},
				}}},
			},
		}
		if _, err := env.Client.ResourceV1().ResourceClaims(ns).Create(
			ctx, claim, metav1.CreateOptions{},
		); err != nil {
			b.Fatal(err)
		}
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: corev1.PodSpec{
				Containers: []corev1.Container{
					{
						Name:  "c",
						Image: "busybox",
						Resources: corev1.ResourceRequirements{
							Claims: []corev1.ResourceClaim{{Name: "mig"}},
						},
					},
				},
				ResourceClaims: []corev1.PodResourceClaim{
					{Name: "mig", ResourceClaimName: ptr.To(name)},
				},
				NodeSelector: map[string]string{"kubernetes.io/hostname": node},
			},
		}
		mu.Lock()
		created[name] = time.Now()
		mu.Unlock()
		if _, err := env.Client.CoreV1().Pods(ns).Create(
			ctx, pod, metav1.CreateOptions{},
		); err != nil {
			b.Fatal(err)
		}
	}
	for range conc { // every pod bound and ended
		take()
	}
	wg.Wait()
	wall := time.Since(t0)
	pw.waitFor(
		10*time.Second,
		func(p map[string]poolState) bool { return dynamicDevices(p) == 8*14 },
	)

	episodes, incomplete, _ := pw.report()
	r := streamResult{
		pods:            pods,
		prepareErrors:   prepareErrors,
		poolsIncomplete: len(incomplete),
		spells:          len(episodes),
		wall:            wall,
	}
	var spells []time.Duration
	for i, e := range episodes {
		if i < 5 {
			b.Logf(
				"incomplete spell %d: pool %s (%d devices when last complete) for %s, %s after "+
					"the stream began",
				i,
				e.pool,
				e.devices,
				e.took,
				e.at.Sub(t0),
			)
		}
		spells = append(spells, e.took)
		r.incompleteSeconds += e.took.Seconds()
	}
	if len(spells) > 0 {
		r.spellP50, r.spellMax = pct(spells, 0.5), slices.Max(spells)
	}
	mu.Lock()
	r.refusedPods = len(refused)
	for _, n := range refusals {
		r.refusals += n
	}
	r.boundP50, r.boundP99, r.boundMax = pct(bound, 0.5), pct(bound, 0.99), slices.Max(bound)
	mu.Unlock()
	return r
}
