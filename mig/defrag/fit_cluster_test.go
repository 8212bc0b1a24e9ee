package defrag_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/drakit/drakit/mig/defrag"
	"github.com/drakit/drakit/testenv"
)

// TestLandingAgreesWithScheduler compares the landing check's verdicts
// (the scheduler's filters the defragmenter writes itself: resources,
// host ports, volume topology, topology spread, pod anti-affinity) with
// the real kube-scheduler's on a real API server with fake nodes: on
// node zone-b a pod requesting 15 of its 16 CPUs, one taking host port
// 9000 and two pods labeled for a spread and an anti-affinity run, and a
// volume bound to zone z1's nodes exists. A replacement needing any of
// them on zone-b is refused by both (a CPU-full destination, a zonal
// volume, a spread constraint at skew, ...), and a replacement needing
// them all is admitted by both on zone-a. The scheduler's verdict is
// read with every other node cordoned, so that it can only choose the
// destination (cordoned nodes still count for topology spread).
func TestLandingAgreesWithScheduler(t *testing.T) {
	env := testenv.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cs := env.Client
	for name, zone := range map[string]string{"zone-a": "z1", "zone-b": "z2"} {
		if err := env.AddFakeNode(ctx, name, map[string]string{"zone": zone}); err != nil {
			t.Fatal(err)
		}
	}
	nodes := []string{env.NodeName, "zone-a", "zone-b"}
	container := func(cpu string, port int32) corev1.Container {
		c := corev1.Container{Name: "c", Image: "none"}
		if cpu != "" {
			c.Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)}
		}
		if port != 0 {
			c.Ports = []corev1.ContainerPort{{ContainerPort: port, HostPort: port}}
		}
		return c
	}
	create := func(p *corev1.Pod) {
		t.Helper()
		p.Namespace = ns
		if _, err := cs.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// What runs on zone-b (bound there, as the scheduler found them).
	onB := func(name string, labels map[string]string, c corev1.Container) {
		create(
			&corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
				Spec:       corev1.PodSpec{NodeName: "zone-b", Containers: []corev1.Container{c}},
			},
		)
	}
	onB("big", nil, container("15", 0))
	onB("port", nil, container("", 9000))
	onB("spread-0", map[string]string{"app": "spread"}, container("", 0))
	onB("spread-1", map[string]string{"app": "spread"}, container("", 0))
	onB("db", map[string]string{"role": "db"}, container("", 0))
	// A volume of zone z1's nodes, bound.
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "zonal"},
		Spec: corev1.PersistentVolumeSpec{
			Capacity: corev1.ResourceList{
				corev1.ResourceStorage: resource.MustParse("1Gi"),
			}, AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName: "manual",
			PersistentVolumeSource: corev1.PersistentVolumeSource{
				HostPath: &corev1.HostPathVolumeSource{Path: "/tmp/zonal"},
			},
			ClaimRef: &corev1.ObjectReference{Namespace: ns, Name: "zonal"},
			NodeAffinity: &corev1.VolumeNodeAffinity{
				Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
					MatchExpressions: []corev1.NodeSelectorRequirement{
						{Key: "zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"z1"}},
					}}}},
			},
		},
	}
	_, err := cs.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "zonal", Namespace: ns},
		Spec: corev1.PersistentVolumeClaimSpec{
			StorageClassName: ptr.To("manual"),
			VolumeName:       "zonal",
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources: corev1.VolumeResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
			}},
	}
	_, err = cs.CoreV1().PersistentVolumeClaims(ns).Create(ctx, pvc, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := poll(ctx, time.Minute, func(ctx context.Context) (bool, error) {
		c, err := cs.CoreV1().PersistentVolumeClaims(ns).Get(ctx, "zonal", metav1.GetOptions{})
		return err == nil && c.Status.Phase == corev1.ClaimBound, nil
	}); err != nil {
		t.Fatalf("the zonal claim is not bound: %v", err)
	}

	spread := corev1.TopologySpreadConstraint{
		MaxSkew:           1,
		TopologyKey:       "zone",
		WhenUnsatisfiable: corev1.DoNotSchedule,
		LabelSelector:     &metav1.LabelSelector{MatchLabels: map[string]string{"app": "spread"}},
	}
	antiDB := &corev1.Affinity{
		PodAntiAffinity: &corev1.PodAntiAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
				TopologyKey:   "kubernetes.io/hostname",
				LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"role": "db"}},
			}},
		},
	}
	zonal := corev1.Volume{
		Name: "data",
		VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "zonal"},
		},
	}
	pod := func(name string, spec corev1.PodSpec, labels map[string]string) *corev1.Pod {
		if len(spec.Containers) == 0 {
			spec.Containers = []corev1.Container{container("", 0)}
		}
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{
				Name:      name,
				Namespace: ns,
				Labels:    labels,
				UID:       types.UID("uid-" + name),
			},
			Spec: spec,
		}
	}
	all := pod(
		"all",
		corev1.PodSpec{
			Containers: []corev1.Container{container("2", 9000)},
			Volumes:    []corev1.Volume{zonal},
			TopologySpreadConstraints: []corev1.TopologySpreadConstraint{
				spread,
			},
			Affinity: antiDB,
		},
		map[string]string{"app": "spread"},
	)
	cpuPod := pod("cpu", corev1.PodSpec{Containers: []corev1.Container{container("2", 0)}}, nil)
	portPod := pod("hostport",
		corev1.PodSpec{Containers: []corev1.Container{container("", 9000)}}, nil)
	volumePod := pod("volume", corev1.PodSpec{Volumes: []corev1.Volume{zonal}}, nil)
	antiPod := pod("anti", corev1.PodSpec{Affinity: antiDB}, nil)
	spreadPod := pod("spread",
		corev1.PodSpec{TopologySpreadConstraints: []corev1.TopologySpreadConstraint{spread}},
		map[string]string{"app": "spread"})
	c, err := defrag.New(cs, driver)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		pod    *corev1.Pod
		node   string
		refuse bool
	}{
		{"a CPU-full destination", cpuPod, "zone-b", true},
		{"a host port taken", portPod, "zone-b", true},
		{"a zonal volume", volumePod, "zone-b", true},
		{"a spread constraint at skew", spreadPod, "zone-b", true},
		{"a required anti-affinity", antiPod, "zone-b", true},
		{"all of them where they fit", all, "zone-a", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ours, err := defrag.FitsOn(ctx, c, tc.pod, tc.node)
			if err != nil {
				t.Fatal(err)
			}
			theirs := schedulerRefuses(ctx, t, env, tc.pod, tc.node, nodes)
			switch {
			case (ours != "") != tc.refuse:
				t.Errorf("the landing check on %s: %q, want a refusal %v", tc.node, ours, tc.refuse)
			case (theirs != "") != tc.refuse:
				t.Errorf("kube-scheduler on %s: %q, want a refusal %v", tc.node, theirs, tc.refuse)
			default:
				t.Logf("landing check: %q; kube-scheduler: %q", ours, theirs)
			}
		})
	}
}

// schedulerRefuses creates pod (a copy named probe-<name>) with every
// node but node cordoned and returns kube-scheduler's reason when it
// finds it unschedulable, "" when it binds it to node. It deletes the
// probe and uncordons the nodes.
func schedulerRefuses(
	ctx context.Context,
	t *testing.T,
	env *testenv.Env,
	pod *corev1.Pod,
	node string,
	nodes []string,
) string {
	t.Helper()
	cs := env.Client
	cordon := func(name string, on bool) {
		patch := fmt.Sprintf(`{"spec":{"unschedulable":%t}}`, on)
		_, err := cs.CoreV1().Nodes().
			Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range nodes {
		if n != node {
			cordon(n, true)
			defer cordon(n, false)
		}
	}
	probe := pod.DeepCopy()
	probe.Name, probe.UID, probe.ResourceVersion = "probe-"+pod.Name, "", ""
	remove := func() {
		t.Helper()
		bg := context.WithoutCancel(ctx)
		_ = cs.CoreV1().Pods(ns).Delete(bg, probe.Name,
			metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
		if err := poll(bg, time.Minute, func(ctx context.Context) (bool, error) {
			_, err := cs.CoreV1().Pods(ns).Get(ctx, probe.Name, metav1.GetOptions{})
			return apierrors.IsNotFound(err), nil
		}); err != nil {
			t.Fatalf("probe %s stays: %v", probe.Name, err)
		}
	}
	defer remove()
	var why string
	// kube-scheduler may bind the probe before its cache has seen the
	// cordons (its informer lags the API server): the probe then lands on
	// a cordoned node, which is no verdict; it is removed and made again.
	for try := 0; ; try++ {
		if _, err := cs.CoreV1().Pods(ns).Create(ctx, probe, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		stale := ""
		if err := poll(ctx, time.Minute, func(ctx context.Context) (bool, error) {
			p, err := cs.CoreV1().Pods(ns).Get(ctx, probe.Name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			if p.Spec.NodeName != "" {
				if p.Spec.NodeName != node {
					stale = p.Spec.NodeName
				}
				return true, nil
			}
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse &&
					c.Reason == corev1.PodReasonUnschedulable {
					why = c.Message
					return true, nil
				}
			}
			return false, nil
		}); err != nil {
			t.Fatalf("kube-scheduler's verdict on %s: %v", probe.Name, err)
		}
		if stale == "" {
			return why
		}
		if try == 2 {
			t.Fatalf("kube-scheduler bound the probe to %s, a cordoned node, %d times", stale, try+1)
		}
		t.Logf("kube-scheduler bound the probe to %s before it saw the cordon; again", stale)
		remove()
	}
}
