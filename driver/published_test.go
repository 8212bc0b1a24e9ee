package driver_test

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"testing"
	"time"

	"github.com/drakit/drakit/device"
	"github.com/drakit/drakit/driver"
)

// TestPublished: once Published is closed, the API server holds the
// whole inventory in complete pools (a pod created then finds every
// device), and /readyz says ready; Ready came first. 130 devices make
// two slices, so that one slice alone is not complete. The slices of an
// earlier test's driver with other devices, under the same driver and
// node names, are not taken for this one's.
func TestPublished(t *testing.T) {
	c, ctx, _, d, hw := setupE2E(t)
	inv := testInventory(130)
	for i, dev := range inv.Pools[0].Devices {
		inv.Pools[0].Devices[i] = device.New("published-" + dev.Name())
	}
	r := startDriver(ctx, t, c, d, device.StaticDiscoverer{Inv: inv}, hw, driver.WithHTTPAddress("127.0.0.1:0"))
	defer r.stop(t)
	select {
	case <-r.d.Published():
	case <-time.After(60 * time.Second):
		t.Fatal("Published not closed within 60 s")
	}
	// At once: no waiting after Published.
	slices, err := slicesOfNode(context.WithoutCancel(ctx), c)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range slices {
		if s.Spec.Pool.ResourceSliceCount != int64(len(slices)) {
			t.Errorf("slice %s: resourceSliceCount %d, %d slices listed", s.Name, s.Spec.Pool.ResourceSliceCount, len(slices))
		}
		for _, dev := range s.Spec.Devices {
			names = append(names, dev.Name)
		}
	}
	var want []string
	for i := range 130 {
		want = append(want, fmt.Sprintf("published-dev-%d", i))
	}
	sort.Strings(names)
	sort.Strings(want)
	if fmt.Sprint(names) != fmt.Sprint(want) {
		t.Errorf("when Published is closed the API server lists %d devices (%d slices), want the inventory's 130", len(names), len(slices))
	}
	if code, body := httpStatus(t, "http://"+r.d.HTTPAddr()+"/readyz"); code != http.StatusOK {
		t.Errorf("/readyz after Published = %d %q", code, body)
	}
}
