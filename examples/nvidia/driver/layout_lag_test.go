package driver_test

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	nvdriver "github.com/drakit/drakit/examples/nvidia/driver"
	"github.com/drakit/drakit/examples/nvidia/nvml/nvmlsim"
	"github.com/drakit/drakit/partition/ledger"
	"github.com/drakit/drakit/testenv"
)

// BenchmarkLayoutLags measures, on a real API server with the real
// scheduler, the lags the fleet model of mig/bench assumes: from a pod
// asking for a 3g device no layout offers yet (one dynamic H200, idle and
// published whole), to the planner's demand in the node's ledger
// (planner lag: its watch of pods and claims, its interval, its write),
// to the 3g open in the ledger (the agent's lag: its ledger watch, its
// republish delay, its write), to the device in the node's slice (slice
// lag: the driver's slice controller), to the pod bound (the scheduler's
// backoff included). Each of b.N iterations is 5 pods one after the
// other, each deleted before the next; it reports the medians.
// go test ./examples/nvidia/driver -run '^$' -bench BenchmarkLayoutLags -benchtime 1x
func BenchmarkLayoutLags(b *testing.B) {
	env := testenv.Start(b)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	const node, ns = "nv-lags", "default"
	if err := env.AddFakeNode(ctx, node, nil); err != nil {
		b.Fatal(err)
	}
	for _, c := range nvdriver.DeviceClasses([]string{"3g.71gb"}) {
		if _, err := env.Client.ResourceV1().DeviceClasses().Create(
			ctx, c, metav1.CreateOptions{},
		); err != nil &&
			!apierrors.IsAlreadyExists(err) {
			b.Fatal(err)
		}
	}
	for {
		if _, err := env.Client.CoreV1().ServiceAccounts(ns).Get(
			ctx, "default", metav1.GetOptions{},
		); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	dir := b.TempDir()
	sim, err := nvmlsim.Open(filepath.Join(dir, "gpus.json"), nvmlsim.WithServer("dgx-h200"),
		nvmlsim.WithSetup(nvmlsim.Setup{MIGGPUs: []int{0}}))
	if err != nil {
		b.Fatal(err)
	}
	startLayoutWebhook(ctx, b, env)
	stopPlanner := startPlanner(ctx, b, env)
	defer stopPlanner()
	d := startLayoutDriver(ctx, b, env, sim, node, filepath.Join(dir, "state"), false, 0)
	defer d.stop()
	store, err := ledger.NewStore(env.Client, layoutNamespace, nvdriver.DriverName)
	if err != nil {
		b.Fatal(err)
	}
	var planner, agent, slice, bound []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N*5; i++ {
		name := fmt.Sprintf("lag-%d", i)
		claim := &resourceapi.ResourceClaim{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: resourceapi.ResourceClaimSpec{
				Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
					Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{
						DeviceClassName: nvdriver.ProfileClass("3g.71gb"),
					},
				}}},
			},
		}
		if _, err := env.Client.ResourceV1().ResourceClaims(ns).Create(
			ctx, claim, metav1.CreateOptions{},
		); err != nil {
			b.Fatal(err)
		}
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: corev1.PodSpec{
				Containers: []corev1.Container{{Name: "c", Image: "busybox",
					Resources: corev1.ResourceRequirements{
						Claims: []corev1.ResourceClaim{{Name: "gpu"}},
					}}},
				ResourceClaims: []corev1.PodResourceClaim{
					{Name: "gpu", ResourceClaimName: ptr.To(name)},
				},
				NodeSelector: map[string]string{"kubernetes.io/hostname": node},
			}}
		t0 := time.Now()
		if _, err := env.Client.CoreV1().Pods(ns).Create(
			ctx, pod, metav1.CreateOptions{},
		); err != nil {
			b.Fatal(err)
		}
		var tp, ta, ts, tb time.Duration
		for tb == 0 {
			if ctx.Err() != nil {
				b.Fatal("the pod was not bound")
			}
			now := time.Since(t0)
			if l, _, err := store.Get(ctx, node); err == nil {
				if tp == 0 && l.Demand["3g.71gb"] > 0 {
					tp = now
				}
				if ta == 0 &&
					slices.ContainsFunc(
						l.Open,
						func(d ledger.Device) bool { return strings.Contains(d.Name, "3g") },
					) {
					ta = now
				}
			}
			if ts == 0 &&
				slices.ContainsFunc(layoutPublished(ctx, b, env, node), func(n string) bool {
					return strings.Contains(n, "3g")
				}) {
				ts = now
			}
			if p, err := env.Client.CoreV1().Pods(ns).Get(
				ctx, name, metav1.GetOptions{},
			); err == nil &&
				p.Spec.NodeName != "" {
				tb = now
			}
			time.Sleep(10 * time.Millisecond)
		}
		planner, agent, slice, bound = append(
			planner,
			tp,
		), append(
			agent,
			ta,
		), append(
			slice,
			ts,
		), append(
			bound,
			tb,
		)
		b.StopTimer()
		_ = env.Client.CoreV1().
			Pods(ns).
			Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
		_ = env.Client.ResourceV1().ResourceClaims(ns).Delete(ctx, name, metav1.DeleteOptions{})
		for { // idle again: the GPU published whole
			if g := gpuPublished(ctx, b, env, node, 0); slices.Equal(g, []string{"gpu-0"}) ||
				ctx.Err() != nil {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		b.StartTimer()
	}
	b.StopTimer()
	med := func(ds []time.Duration) time.Duration {
		s := slices.Clone(ds)
		sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
		return s[len(s)/2]
	}
	b.ReportMetric(float64(med(planner).Milliseconds()), "planner-ms")
	b.ReportMetric(float64(med(agent).Milliseconds()), "open-ms")
	b.ReportMetric(float64(med(slice).Milliseconds()), "slice-ms")
	b.ReportMetric(float64(med(bound).Milliseconds()), "bound-ms")
	b.Logf(
		"from the pod's creation, medians of %d: demand in the ledger %s, the 3g open %s, "+
			"in the slice %s, the pod bound %s",
		len(bound),
		med(planner),
		med(agent),
		med(slice),
		med(bound),
	)
}
