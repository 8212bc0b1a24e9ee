package main

import (
	"context"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/drakit/drakit/examples/nvidia/deploy"
	nvdriver "github.com/drakit/drakit/examples/nvidia/driver"
	"github.com/drakit/drakit/internal/podstatus"
	"github.com/drakit/drakit/mig"
)

// demoSharedGPUs is the chart value of the demo's shared GPU: GPU 1 is
// offered whole (the story's whole-GPU pods take it so) and as MPS
// shares (the fleet step, once they are gone).
const demoSharedGPUs = "sharing.gpus=1"

// demoFleet is the demo's fleet of small models: ten pods asking 12 GiB
// each of a shared GPU, with the default compute share.
const (
	demoFleetPods = 10
	demoFleetGiB  = "12Gi"
)

// sharedFleet runs the fleet step: ten small-model pods at once, each a
// share of a shared GPU; it shows what each container saw and a picture of
// each shared GPU's memory by share, then removes them.
func (d *nvidiaDemo) sharedFleet(ctx context.Context) error {
	cs := d.c.Client
	t0 := time.Now()
	var ws []deploy.Workload
	for i := range demoFleetPods {
		w := deploy.SharedWorkload(demoNS, d.c.Images.Busybox, fmt.Sprintf("model-%d", i),
			demoFleetGiB)
		if _, err := cs.ResourceV1().ResourceClaimTemplates(demoNS).Create(ctx, w.Template,
			metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create ResourceClaimTemplate %s: %w", w.Name, err)
		}
		if _, err := cs.CoreV1().Pods(demoNS).Create(ctx, w.Pod,
			metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create pod %s: %w", w.Name, err)
		}
		ws = append(ws, w)
	}
	seen := map[string]deploy.Seen{}
	if err := poll(ctx, 3*time.Minute, func(ctx context.Context) (bool, error) {
		for _, w := range ws {
			if seen[w.Name].Complete {
				continue
			}
			p, err := cs.CoreV1().Pods(demoNS).Get(ctx, w.Name, metav1.GetOptions{})
			if err != nil || p.Status.Phase != corev1.PodRunning {
				return false, err
			}
			logs, err := cs.CoreV1().Pods(demoNS).GetLogs(w.Name,
				&corev1.PodLogOptions{}).DoRaw(ctx)
			if err != nil {
				return false, nil
			}
			seen[w.Name] = deploy.ParseSeen(string(logs))
			if !seen[w.Name].Complete {
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		var why []string
		for _, w := range ws {
			if !seen[w.Name].Complete {
				p, err := cs.CoreV1().Pods(demoNS).Get(ctx, w.Name, metav1.GetOptions{})
				if err != nil {
					why = append(why, w.Name+": "+err.Error())
					continue
				}
				why = append(why, fmt.Sprintf("%s: %s, %s", w.Name, p.Status.Phase,
					podstatus.Why(p)))
			}
		}
		return fmt.Errorf("wait for the fleet's pods (%s): %w", strings.Join(why, "; "), err)
	}
	shares, err := d.shares(ctx)
	if err != nil {
		return err
	}
	d.stepf("a fleet of %d small models, each asking %s of a shared GPU (class %s, "+
		"capacity.requests memory): all Running in %s;",
		demoFleetPods, demoFleetGiB, nvdriver.ClassShared, since(t0))
	d.linef("the scheduler packed them by consumable capacity; one MPS control daemon per GPU " +
		"serves its shares, and each container saw its own limits:")
	for _, w := range ws {
		s, sh := seen[w.Name], shares[w.Name]
		d.linef("  %-8s %s share %s: %s=%s %s=%s", w.Name, sh.device, short(sh.id),
			nvdriver.EnvMPSMemoryLimit, s.Env[nvdriver.EnvMPSMemoryLimit],
			nvdriver.EnvMPSThreads, s.Env[nvdriver.EnvMPSThreads])
	}
	d.sharePictures(shares)
	for _, w := range ws {
		for _, u := range seen[w.Name].UUIDs {
			d.users[u] = fmt.Sprintf("%d MPS shares", len(shares))
		}
	}
	err = d.picture("the GPUs now")
	d.users = map[string]string{}
	if err != nil {
		return err
	}

	t0 = time.Now()
	for _, w := range ws {
		if err := cs.CoreV1().Pods(demoNS).Delete(ctx, w.Name,
			metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
			return fmt.Errorf("delete pod %s: %w", w.Name, err)
		}
	}
	// The claims go once the pods do; the kubelet then unprepares them:
	// the last share's unprepare stops the GPU's MPS daemon, and the GPU
	// may be handed out whole again.
	var specs []string
	if err := poll(ctx, 2*time.Minute, func(ctx context.Context) (bool, error) {
		l, err := cs.ResourceV1().ResourceClaims(demoNS).List(ctx, metav1.ListOptions{})
		specs, _ = filepath.Glob(filepath.Join(d.c.CDIDir, "*"+nvdriver.DriverName+"*"))
		return err == nil && len(l.Items) == 0 && len(specs) == 0, err
	}); err != nil {
		return fmt.Errorf("wait for the fleet's claims to be unprepared (CDI specs left: %v): %w",
			specs, err)
	}
	d.linef("the fleet deleted: its shares unprepared and the GPU's MPS daemon stopped in %s",
		since(t0))
	return nil
}

// demoShare is one pod's share as its claim's allocation says.
type demoShare struct {
	device, id string
	gib        float64
}

// shares reads the demo namespace's claims: each share by pod.
func (d *nvidiaDemo) shares(ctx context.Context) (map[string]demoShare, error) {
	l, err := d.c.Client.ResourceV1().ResourceClaims(demoNS).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list claims: %w", err)
	}
	out := map[string]demoShare{}
	for _, c := range l.Items {
		if c.Status.Allocation == nil || len(c.Status.ReservedFor) == 0 {
			continue
		}
		for _, r := range c.Status.Allocation.Devices.Results {
			if r.ShareID == nil {
				continue
			}
			mem := r.ConsumedCapacity[resourceapi.QualifiedName(mig.CapMemory)]
			out[c.Status.ReservedFor[0].Name] = demoShare{device: r.Device, id: string(*r.ShareID),
				gib: float64(mem.Value()) / (1 << 30)}
		}
	}
	return out, nil
}

func short(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}

// sharePictures draws each shared GPU's memory as the scheduler handed it
// out: a digit per share (the pod's number), dots free, beside the MIG
// pictures' width.
func (d *nvidiaDemo) sharePictures(shares map[string]demoShare) {
	byDev := map[string][]string{}
	for pod, s := range shares {
		byDev[s.device] = append(byDev[s.device], pod)
	}
	devs := make([]string, 0, len(byDev))
	for dev := range byDev {
		devs = append(devs, dev)
	}
	sort.Strings(devs)
	const width = 71 // a MIG picture's: 8 memory slices
	const totalGiB = 140.4
	for _, dev := range devs {
		pods := byDev[dev]
		sort.Strings(pods)
		var b strings.Builder
		used := 0.0
		for _, pod := range pods {
			used += shares[pod].gib
			n := int(shares[pod].gib/totalGiB*width + 0.5)
			b.WriteString(strings.Repeat(strings.TrimPrefix(pod, "model-"), n))
		}
		bar := b.String()
		if len(bar) < width {
			bar += strings.Repeat(".", width-len(bar))
		}
		d.linef("  %-12s |%s| %.0f of %.0f GiB in %d shares", strings.TrimSuffix(dev,
			nvdriver.SharedSuffix)+" MPS",
			bar[:width], used, totalGiB, len(pods))
	}
}
