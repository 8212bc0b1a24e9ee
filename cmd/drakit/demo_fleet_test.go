package main

import (
	"bytes"
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/drakit/drakit/internal/cluster"
	"github.com/drakit/drakit/internal/cluster/clustertest"
)

// TestFleetGang runs the fleet demo's steps on 12 fake nodes in 4 racks of
// 3 (two racks of whole GPUs, two of dynamic MIG, the reference driver's
// own slices) and checks the gangs through the API: every pod of the gang
// that fits a rack is bound, all in one rack; no pod of the gang that fits
// the fleet's free GPUs but no rack is bound; every MIG pod is bound to a
// MIG node.
func TestFleetGang(t *testing.T) {
	c := clustertest.Start(t, cluster.WithGangScheduling(), cluster.WithSchedulerClient(5000, 5000))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var out bytes.Buffer
	res, err := runFleet(ctx, c, fleetConfig{racks: 4, rackSize: 3, server: "dgx-h200", migPods: 12, schedQPS: 5000}, &out)
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatal(err)
	}
	pods := c.Client.CoreV1().Pods(fleetNS)
	racks := map[string]int{}
	for _, name := range res.gangFits {
		p, err := pods.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if p.Spec.NodeName == "" {
			t.Errorf("gang that fits a rack: pod %s not bound", name)
			continue
		}
		racks[res.rackOf[p.Spec.NodeName]]++
	}
	if len(racks) != 1 {
		t.Errorf("gang that fits a rack landed in racks %v, want one", racks)
	}
	for _, name := range res.gangTooBig {
		p, err := pods.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if p.Spec.NodeName != "" {
			t.Errorf("gang that fits no rack: pod %s bound to %s", name, p.Spec.NodeName)
		}
	}
	if len(res.gangTooBig) == 0 || len(res.gangFits) == 0 {
		t.Fatalf("gangs %v and %v: want pods in both", res.gangFits, res.gangTooBig)
	}
	migNode := map[string]bool{}
	for _, n := range res.nodes {
		migNode[n.name] = n.mig
	}
	for _, name := range res.migPods {
		p, err := pods.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !migNode[p.Spec.NodeName] {
			t.Errorf("MIG pod %s on %q, not a MIG node", name, p.Spec.NodeName)
		}
	}
}
