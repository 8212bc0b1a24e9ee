package driver_test

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/drakit/drakit/device"
)

// TestRepeatedNodeEventsAggregate: node events go through client-go's
// event recorder, which counts a repeated event on one object instead of
// creating another.
func TestRepeatedNodeEventsAggregate(t *testing.T) {
	c, ctx, _, d, hw := setupE2E(t)
	r := startDriver(ctx, t, c, d, device.StaticDiscoverer{Inv: testInventory(1)}, hw)
	const reason = "TestRepeated"
	message := "repeated warning of " + t.Name() + " " + d.Root
	for range 3 {
		r.d.NodeWarning(reason, message)
	}
	waitFor(ctx, t, "one event counted 3 times", func(ctx context.Context) (bool, error) {
		evs, err := c.Client.CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{FieldSelector: "reason=" + reason + ",involvedObject.name=" + testNode})
		if err != nil {
			return false, err
		}
		var n int32
		objects := 0
		for _, ev := range evs.Items {
			if ev.Message == message {
				objects++
				n += max(ev.Count, 1)
				if ev.Source.Component != testDriver || ev.Type != "Warning" {
					t.Errorf("event source %q type %q, want %q Warning", ev.Source.Component, ev.Type, testDriver)
				}
			}
		}
		if objects > 1 {
			t.Fatalf("%d event objects for one repeated event, want 1 with a count", objects)
		}
		return n == 3, nil
	})
}
