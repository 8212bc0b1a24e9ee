package main

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/drakit/drakit/driver/drivertest"
)

// benchTarget is one driver as the load client (bench playing the
// kubelet) sees it.
type benchTarget struct {
	name, socket string
	cfg          benchConfig
	client       kubernetes.Interface
	ns           string
	k            *drivertest.Kubelet
	// pid is the driver's process (0: not known).
	pid int
	// settle is how long the driver's client limiter needs to refill;
	// bench waits that long before each measurement.
	settle time.Duration
	// role tells the two targets' claims apart ("floor", "target").
	role string
	seq  atomic.Int64
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

type durations []time.Duration

func (d durations) p(pct int) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := append(durations(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := (len(s)*pct + 99) / 100
	return s[min(max(i-1, 0), len(s)-1)]
}

type latencies struct{ prepare, unprepare durations }

func (t *benchTarget) wait(ctx context.Context) error {
	if t.settle <= 0 {
		return nil
	}
	select {
	case <-time.After(t.settle):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// claims creates n allocated claims of this driver, each with its own
// device.
func (t *benchTarget) claims(ctx context.Context, n int) ([]*resourceapi.ResourceClaim, error) {
	out := make([]*resourceapi.ResourceClaim, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for i := range n {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			id := t.seq.Add(1)
			dev := id
			if t.cfg.devices > 0 {
				dev = id % int64(t.cfg.devices)
			}
			d := drivertest.Device{Pool: t.cfg.pool,
				Device: fmt.Sprintf("%s%d", t.cfg.devicePrefix, dev)}
			if t.cfg.device != "" {
				d.Device = t.cfg.device
			}
			if t.cfg.share != nil {
				d.ShareID, d.ConsumedCapacity = benchShareID(), t.cfg.share
			}
			// A name of its own per target: a baseline of the same
			// driver name makes claims in the same namespace.
			out[i], errs[i] = drivertest.CreateAllocatedClaim(ctx, t.client, drivertest.ClaimSpec{
				Namespace: t.ns, Name: fmt.Sprintf("%s-%s-%d", t.name, t.role, id), Driver: t.name,
				Devices: []drivertest.Device{d}})
		})
	}
	wg.Wait()
	return out, errors.Join(errs...)
}

// cycles prepares and unprepares batch claims per call, n times, with held
// other claims prepared meanwhile.
func (t *benchTarget) cycles(ctx context.Context, batch, n, held int) (latencies, error) {
	var l latencies
	heldClaims, err := t.claims(ctx, held)
	if err != nil {
		return l, err
	}
	claims, err := t.claims(ctx, batch)
	if err != nil {
		return l, err
	}
	if err := t.wait(ctx); err != nil {
		return l, err
	}
	for i := 0; i < len(heldClaims); i += 32 {
		if _, err := t.k.Prepare(ctx, heldClaims[i:min(i+32, len(heldClaims))]...); err != nil {
			return l, err
		}
	}
	if held > 0 {
		if err := t.wait(ctx); err != nil {
			return l, err
		}
	}
	for range 3 { // warm up
		if _, err := t.k.Prepare(ctx, claims...); err != nil {
			return l, err
		}
		if err := t.k.Unprepare(ctx, claims...); err != nil {
			return l, err
		}
	}
	for range n {
		t0 := time.Now()
		if _, err := t.k.Prepare(ctx, claims...); err != nil {
			return l, err
		}
		t1 := time.Now()
		if err := t.k.Unprepare(ctx, claims...); err != nil {
			return l, err
		}
		l.prepare = append(l.prepare, t1.Sub(t0))
		l.unprepare = append(l.unprepare, time.Since(t1))
	}
	for i := 0; i < len(heldClaims); i += 32 {
		if err := t.k.Unprepare(ctx, heldClaims[i:min(i+32, len(heldClaims))]...); err != nil {
			return l, err
		}
	}
	return l, nil
}

// throughput is one throughput measurement.
type throughput struct {
	cycles  int64
	elapsed time.Duration
	// cpu is the driver process's CPU time meanwhile (-1: unknown).
	cpu time.Duration
	// api is the number of API requests for claims meanwhile (-1:
	// unknown).
	api float64
}

func (t throughput) perSecond() float64 { return float64(t.cycles) / t.elapsed.Seconds() }
func (t throughput) cpuPerCycle() float64 {
	return ms(t.cpu) / float64(t.cycles)
}
func (t throughput) apiPerPrepare() float64 { return t.api / float64(t.cycles) }

// throughput runs callers loops of prepare+unprepare for d.
func (t *benchTarget) throughput(ctx context.Context, callers int, d time.Duration, countAPI bool) (throughput, error) {
	res := throughput{cpu: -1, api: -1}
	claims, err := t.claims(ctx, callers)
	if err != nil {
		return res, err
	}
	if err := t.wait(ctx); err != nil {
		return res, err
	}
	var cpu0, cpu1 time.Duration
	var api0, api1 float64
	if countAPI {
		if api0, err = apiRequests(ctx, t.client); err != nil {
			return res, err
		}
	}
	if t.pid > 0 {
		if cpu0, err = procCPU(t.pid); err != nil {
			return res, err
		}
	}
	var count atomic.Int64
	errs := make([]error, callers)
	start := time.Now()
	deadline := start.Add(d)
	var wg sync.WaitGroup
	for i, cl := range claims {
		wg.Go(func() {
			for time.Now().Before(deadline) {
				if _, err := t.k.Prepare(ctx, cl); err != nil {
					errs[i] = err
					return
				}
				if err := t.k.Unprepare(ctx, cl); err != nil {
					errs[i] = err
					return
				}
				count.Add(1)
			}
		})
	}
	wg.Wait()
	res.elapsed = time.Since(start)
	res.cycles = count.Load()
	if err := errors.Join(errs...); err != nil {
		return res, err
	}
	if res.cycles == 0 {
		return res, errors.New("no prepare+unprepare cycle completed")
	}
	if t.pid > 0 {
		if cpu1, err = procCPU(t.pid); err != nil {
			return res, err
		}
		res.cpu = cpu1 - cpu0
	}
	if countAPI {
		if api1, err = apiRequests(ctx, t.client); err != nil {
			return res, err
		}
		res.api = api1 - api0
	}
	return res, nil
}

// calls runs n prepare+unprepare cycles spread over callers claims.
func (t *benchTarget) calls(ctx context.Context, callers, n int) error {
	claims, err := t.claims(ctx, callers)
	if err != nil {
		return err
	}
	var next atomic.Int64
	errs := make([]error, callers)
	var wg sync.WaitGroup
	for i, cl := range claims {
		wg.Go(func() {
			for next.Add(1) <= int64(n) {
				if _, err := t.k.Prepare(ctx, cl); err != nil {
					errs[i] = err
					return
				}
				if err := t.k.Unprepare(ctx, cl); err != nil {
					errs[i] = err
					return
				}
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// benchShareID is a fresh share ID (a random version-4 UUID, the form
// the API server takes).
func benchShareID() types.UID {
	var u [16]byte
	_, _ = rand.Read(u[:])
	u[6], u[8] = u[6]&0x0f|0x40, u[8]&0x3f|0x80
	return types.UID(fmt.Sprintf("%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16]))
}
