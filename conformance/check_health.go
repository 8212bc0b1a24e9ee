package conformance

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	drahealthv1 "k8s.io/kubelet/pkg/apis/dra-health/v1"

	"github.com/drakit/drakit/internal/kubeletclient"
)

const defaultHealthTimeout = 30 * time.Second

type healthMsg struct {
	at   time.Time
	resp *drahealthv1.NodeWatchResourcesResponse
	err  error
}

// healthReports is the open health stream and its first reports.
type healthReports struct {
	service string
	msgs    chan healthMsg
	first   []healthMsg
	silent  bool // the stream stayed open but sent nothing for 10 s
}

// setupHealth opens the health stream and reads the first report and
// whatever follows within a second (drivers may split the initial report
// by health source).
func (r *runner) setupHealth(ctx context.Context) error {
	h := &r.health
	h.service = kubeletclient.FirstKnown(r.info.SupportedVersions, kubeletclient.HealthServices)
	if h.service == "" {
		return unable("the driver does not advertise a health service")
	}
	sctx, cancel := context.WithCancel(context.Background())
	r.cleanups = append(r.cleanups, func(context.Context) { cancel() })
	stream, err := kubeletclient.HealthClient(r.conn, h.service).NodeWatchResources(sctx, &drahealthv1.NodeWatchResourcesRequest{})
	if err != nil {
		return broken("NodeWatchResources over %s: %v", h.service, err)
	}
	h.msgs = make(chan healthMsg, 100)
	go func() {
		for {
			resp, err := stream.Recv()
			select {
			case h.msgs <- healthMsg{time.Now(), resp, err}:
			case <-sctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	timer := time.NewTimer(10 * time.Second)
	defer timer.Stop()
	for {
		select {
		case m := <-h.msgs:
			if m.err != nil {
				if status.Code(m.err) == codes.Unimplemented {
					return unable("the driver answers NodeWatchResources with Unimplemented: it does not report health (allowed)")
				}
				if len(h.first) == 0 {
					return broken("NodeWatchResources over %s ended before the first report: %v", h.service, m.err)
				}
				return nil
			}
			h.first = append(h.first, m)
			if len(h.first) == 1 {
				timer.Reset(time.Second)
			}
		case <-timer.C:
			// No report in 10 s is not a kubelet breakage (it shows the
			// devices as Unknown until one comes): health.coverage
			// warns about it.
			h.silent = len(h.first) == 0
			return nil
		case <-ctx.Done():
			return unable("run canceled")
		}
	}
}

func (r *runner) checkHealthInitial(ctx context.Context) outcome {
	if o := r.judge(ctx, fxHealth); o != nil {
		return *o
	}
	h := &r.health
	if h.silent {
		return skip("no health report within 10 s of NodeWatchResources over %s: nothing to judge (see health.coverage)", h.service)
	}
	var f failures
	n := 0
	var unknown []devRef
	for _, m := range h.first {
		for _, d := range m.resp.GetDevices() {
			n++
			k := devRef{d.GetDevice().GetPoolName(), d.GetDevice().GetDeviceName()}
			if _, ok := r.deviceObj[k]; !ok {
				unknown = append(unknown, k)
			}
			if _, ok := drahealthv1.HealthStatus_name[int32(d.Health)]; !ok {
				f.add("device %s has health %d, which is not UNKNOWN, HEALTHY or UNHEALTHY", k, d.Health)
			}
			if d.HealthCheckTimeoutSeconds < 0 {
				f.add("device %s has a negative health_check_timeout_seconds %d", k, d.HealthCheckTimeoutSeconds)
			}
		}
	}
	for _, k := range r.publishedSoon(ctx, unknown) {
		f.add("the report names device %s, which the driver does not publish for this node", k)
	}
	if n == 0 {
		return f.outcome("%d reports naming no device (nothing the kubelet could misattribute; see health.coverage)", len(h.first))
	}
	return f.outcome("%d device entries in %d reports, all published devices", n, len(h.first))
}

func (r *runner) checkHealthCoverage(context.Context) outcome {
	h := &r.health
	if h.silent {
		return fail("no health report within 10 s of opening the stream; send an initial report covering every device at once (until then the kubelet shows them as Unknown)")
	}
	seen := map[devRef]bool{}
	for _, m := range h.first {
		for _, d := range m.resp.GetDevices() {
			seen[devRef{d.GetDevice().GetPoolName(), d.GetDevice().GetDeviceName()}] = true
		}
	}
	var missing []string
	for _, dev := range r.devices {
		if !seen[dev] {
			missing = append(missing, dev.String())
		}
	}
	if len(missing) > 0 {
		return fail("the initial reports do not cover %d of %d published devices: %s; report every device at once (the kubelet shows the others as Unknown)", len(missing), len(r.devices), strings.Join(limit(missing, 10), ", "))
	}
	return pass("all %d published devices reported", len(r.devices))
}

func (r *runner) checkHealthRefresh(ctx context.Context) outcome {
	h := &r.health
	if h.silent {
		return skip("needs an initial report (see health.coverage)")
	}
	// Deadline per device: its last report plus its timeout. A device
	// first reported Healthy or Unhealthy is refreshed only by another
	// Healthy or Unhealthy report: Unknown is what the kubelet shows
	// for a stale device anyway, and what a runtime sends in the
	// driver's name when its health source stopped reporting.
	deadline := map[devRef]time.Time{}
	known := map[devRef]bool{}
	unknownFirst := map[devRef]bool{}
	maxTimeout := time.Duration(0)
	for _, m := range h.first {
		for _, d := range m.resp.GetDevices() {
			t := time.Duration(d.HealthCheckTimeoutSeconds) * time.Second
			if t <= 0 {
				t = defaultHealthTimeout
			}
			maxTimeout = max(maxTimeout, t)
			k := devRef{d.GetDevice().GetPoolName(), d.GetDevice().GetDeviceName()}
			switch {
			case d.Health != drahealthv1.HealthStatus_UNKNOWN:
				deadline[k], known[k] = m.at.Add(t), true
			case known[k]:
				unknownFirst[k] = true // stale already within the first second
			default:
				deadline[k] = m.at.Add(t)
			}
		}
	}
	if len(deadline) == 0 {
		return skip("the initial reports name no device: nothing to refresh (see health.coverage)")
	}
	wait := maxTimeout + 5*time.Second
	if r.cfg.HealthWait > 0 {
		wait = r.cfg.HealthWait
	} else if wait > 2*time.Minute {
		wait = 2 * time.Minute
	}
	end := time.Now().Add(wait)
	refreshed := map[devRef]bool{}
	late := map[devRef]bool{}
	unknown := unknownFirst // re-reported, but only as Unknown
	for len(refreshed)+len(late) < len(deadline) {
		select {
		case m := <-h.msgs:
			if m.err != nil {
				return fail("the health stream ended: %v; keep it open until the kubelet cancels it", m.err)
			}
			for _, d := range m.resp.GetDevices() {
				k := devRef{d.GetDevice().GetPoolName(), d.GetDevice().GetDeviceName()}
				if dl, ok := deadline[k]; ok && !refreshed[k] && !late[k] {
					if known[k] && d.Health == drahealthv1.HealthStatus_UNKNOWN {
						unknown[k] = true
						continue
					}
					if m.at.After(dl) {
						late[k] = true
					} else {
						refreshed[k] = true
					}
				}
			}
		case <-time.After(time.Until(end)):
			var missing []string
			for k := range deadline {
				if !refreshed[k] {
					missing = append(missing, k.String())
				}
			}
			sort.Strings(missing)
			if n := countIn(unknown, missing); n > 0 {
				return fail("%d devices were not reported again as Healthy or Unhealthy within their health check timeout (waited %s), %d of them only as Unknown, which the kubelet shows for a stale device anyway: %s; keep the health source reporting (a report of Unknown after a known health means it stopped)", len(missing), wait.Round(time.Second), n, strings.Join(limit(missing, 10), ", "))
			}
			return fail("%d devices were not reported again within their health check timeout (waited %s): %s; re-send reports before the timeout even when nothing changed", len(missing), wait.Round(time.Second), strings.Join(limit(missing, 10), ", "))
		case <-ctx.Done():
			return skip("run canceled")
		}
	}
	if len(late) > 0 {
		var l []string
		for k := range late {
			l = append(l, k.String())
		}
		sort.Strings(l)
		return fail("%d devices were reported again only after their health check timeout: %s", len(l), strings.Join(limit(l, 10), ", "))
	}
	return pass("%d devices refreshed within their timeout", len(refreshed))
}

// countIn counts the devices of names (devRef strings) in set.
func countIn(set map[devRef]bool, names []string) int {
	n := 0
	for k := range set {
		if slices.Contains(names, k.String()) {
			n++
		}
	}
	return n
}

func limit(s []string, n int) []string {
	if len(s) > n {
		return append(s[:n:n], fmt.Sprintf("... (%d more)", len(s)-n))
	}
	return s
}
