package admission_test

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	admissionregv1 "k8s.io/api/admissionregistration/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/drakit/drakit/admission"
	"github.com/drakit/drakit/testenv"
)

// layoutSlice is a ResourceSlice of driver that is the whole of pool on
// node (the layout publication's shape) or, with count > 1, one of count
// slices of it, listing devices.
func layoutSlice(name, driver, pool string, count int64, devices ...string) *resourceapi.ResourceSlice {
	s := &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: resourceapi.ResourceSliceSpec{
			Driver:   driver,
			Pool:     resourceapi.ResourcePool{Name: pool, Generation: 1, ResourceSliceCount: count},
			NodeName: ptr.To(pool),
		},
	}
	for _, d := range devices {
		s.Spec.Devices = append(s.Spec.Devices, resourceapi.Device{Name: d})
	}
	return s
}

// allocate sets c's allocation to one device, as the scheduler's PreBind
// writes it.
func allocate(c *resourceapi.ResourceClaim, driver, pool, device string) *resourceapi.ResourceClaim {
	c = c.DeepCopy()
	c.Status.Allocation = &resourceapi.AllocationResult{
		Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{
			Request: "gpu", Driver: driver, Pool: pool, Device: device,
		}}},
		AllocationTimestamp: ptr.To(metav1.Now()),
	}
	return c
}

// staleMessage is what the layout guard says of device in pool.
func staleMessage(device, pool string) string {
	return "device " + device + " of pool " + pool + " (driver " + testDriver + ") was allocated from an older publication of the layout"
}

// TestLayoutOnAPIServer registers the layout webhook (admission.LayoutWebhook,
// failure policy Fail) on a real API server, served by a Server with a
// LayoutGuard, and writes allocations as the scheduler's PreBind does.
// ResourceSlices: the driver's one-slice pool n1 (the layout publication)
// listing gpu-0-1g-18gb-0 and gpu-0-1g-18gb-1, a pool n2 of two slices,
// another driver's slice for pool n1. An allocation of a device the
// current slice of its pool lists is admitted; of one it does not list,
// or no longer lists after the slice is updated, refused (Forbidden)
// with a message that names the claim and the device. Admitted too: a
// device of the two-slice pool that only its other slice lists, another
// driver's device, a device of a pool without slices; and every write
// that does not allocate: the driver's status.devices and the
// scheduler's reservedFor on a claim whose device is no longer
// published, deallocation. With the webhook stopped, those writes are
// still admitted (the matchConditions do not send them: they cost
// nothing), while an allocation of the driver's device is refused
// (failure policy Fail) and another driver's is not.
func TestLayoutOnAPIServer(t *testing.T) {
	env := testenv.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	const ns, other = "default", "other.example.com"
	rs := env.Client.ResourceV1().ResourceSlices()
	n1 := layoutSlice("n1-layout", testDriver, "n1", 1, "gpu-0-1g-18gb-0", "gpu-0-1g-18gb-1")
	for _, s := range []*resourceapi.ResourceSlice{
		n1,
		layoutSlice("n2-0", testDriver, "n2", 2, "gpu-0"),
		layoutSlice("n2-1", testDriver, "n2", 2, "gpu-1"),
		layoutSlice("n1-other", other, "n1", 1, "dev-0"),
	} {
		if _, err := rs.Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	// The webhook, reached by URL, keeping its certificate in a Secret;
	// only the layout guard (no configuration validator).
	g, err := admission.NewLayoutGuard(env.Client, testDriver)
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	const cfgName, secret = "layout-gpu-example-com", "layout-gpu-example-com-webhook-tls"
	vwc := &admissionregv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: cfgName},
		Webhooks: []admissionregv1.ValidatingWebhook{admission.LayoutWebhook(testDriver,
			admissionregv1.WebhookClientConfig{URL: ptr.To("https://" + addr + admission.LayoutPath)}, admissionregv1.Fail)}}
	if _, err := env.Client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, vwc, metav1.CreateOptions{}); err != nil {
		t.Fatalf("register the webhook (its matchConditions must compile): %v", err)
	}
	self := admission.SelfSigned{Client: env.Client, Namespace: ns, Secret: secret, WebhookConfiguration: cfgName, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}
	stopWebhook := serve(t, ctx, nil, admission.WithAddress(addr), admission.WithSelfSignedCert(self), admission.WithLayoutGuard(g))
	if !g.HasSynced() {
		t.Fatal("the server started before its layout guard synced")
	}

	claims := env.Client.ResourceV1().ResourceClaims(ns)
	newClaim := func(name string) *resourceapi.ResourceClaim {
		t.Helper()
		c, err := claims.Create(ctx, &resourceapi.ResourceClaim{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec:       resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{exactly("gpu")}}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	dryRun := metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}}
	// untilStale waits until an allocation of device of pool n1 is
	// refused: the API server reads webhook configurations, and the guard
	// slices, through informers.
	probe := newClaim("probe")
	untilStale := func(device string) {
		t.Helper()
		var last error
		if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			_, last = claims.UpdateStatus(ctx, allocate(probe, testDriver, "n1", device), dryRun)
			return last != nil && strings.Contains(last.Error(), staleMessage(device, "n1")), nil
		}); err != nil {
			t.Fatalf("an allocation of %s: %v, want refused", device, last)
		}
	}
	refused := func(what string, err error, device, claim string) {
		t.Helper()
		switch {
		case err == nil:
			t.Errorf("%s: admitted", what)
		case !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), staleMessage(device, "n1")) || !strings.Contains(err.Error(), "claim "+ns+"/"+claim+":"):
			t.Errorf("%s: %v, want Forbidden naming claim %s/%s: %s", what, err, ns, claim, staleMessage(device, "n1"))
		default:
			t.Logf("%s: refused: %v", what, err)
		}
	}
	admitted := func(what string, c *resourceapi.ResourceClaim) *resourceapi.ResourceClaim {
		t.Helper()
		got, err := claims.UpdateStatus(ctx, c, metav1.UpdateOptions{})
		if err != nil {
			t.Errorf("%s: %v, want admitted", what, err)
			return c
		}
		return got
	}

	untilStale("gpu-0-1g-18gb-7")
	_, err = claims.UpdateStatus(ctx, allocate(newClaim("unlisted"), testDriver, "n1", "gpu-0-1g-18gb-7"), metav1.UpdateOptions{})
	refused("allocate a device the slice does not list", err, "gpu-0-1g-18gb-7", "unlisted")

	held := admitted("allocate a listed device", allocate(newClaim("listed"), testDriver, "n1", "gpu-0-1g-18gb-0"))
	admitted("allocate a device that only the other slice of a two-slice pool lists",
		allocate(newClaim("two-slices"), testDriver, "n2", "gpu-1"))
	admitted("allocate another driver's device", allocate(newClaim("other-driver"), other, "n1", "gone"))
	admitted("allocate a device of a pool without slices", allocate(newClaim("no-pool"), testDriver, "n3", "gpu-0"))

	// The driver re-lays the GPU out: gpu-0-1g-18gb-1 is withdrawn, and
	// gpu-0-1g-18gb-0 too, which the claim "listed" holds (a driver never
	// withdraws an allocated device; here the slice is written by hand to
	// show that writes that do not allocate are not checked).
	cur, err := rs.Get(ctx, n1.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cur.Spec.Devices = []resourceapi.Device{{Name: "gpu-0-2g-35gb-2"}}
	cur.Spec.Pool.Generation++
	if _, err := rs.Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	untilStale("gpu-0-1g-18gb-1")
	untilStale("gpu-0-1g-18gb-0")
	_, err = claims.UpdateStatus(ctx, allocate(newClaim("withdrawn"), testDriver, "n1", "gpu-0-1g-18gb-1"), metav1.UpdateOptions{})
	refused("allocate a device the slice no longer lists", err, "gpu-0-1g-18gb-1", "withdrawn")
	admitted("allocate a device of the new layout", allocate(newClaim("new-layout"), testDriver, "n1", "gpu-0-2g-35gb-2"))

	// Writes that do not allocate, with the webhook up and then down.
	held2 := admitted("allocate a listed device, for the webhook down", allocate(newClaim("listed-2"), testDriver, "n1", "gpu-0-2g-35gb-2"))
	notAllocating := func(when string, held *resourceapi.ResourceClaim, device string) {
		t.Helper()
		withStatus := held.DeepCopy()
		withStatus.Status.Devices = []resourceapi.AllocatedDeviceStatus{{
			Driver: testDriver, Pool: "n1", Device: device,
			Data: &runtime.RawExtension{Raw: []byte(`{"uuid":"MIG-1"}`)},
		}}
		held = admitted(when+": the driver's status.devices of a claim whose device is no longer published", withStatus)
		reserve := held.DeepCopy()
		reserve.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: "p", UID: "1234"}}
		held = admitted(when+": reserve a claim whose device is no longer published", reserve)
		// The resource claim controller drops the reservation of a pod
		// that does not exist, changing the claim meanwhile: deallocate
		// the claim as it is now, again on a conflict with it.
		var got *resourceapi.ResourceClaim
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			now, err := claims.Get(ctx, held.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			now.Status = resourceapi.ResourceClaimStatus{}
			got, err = claims.UpdateStatus(ctx, now, metav1.UpdateOptions{})
			return err
		})
		switch {
		case err != nil:
			t.Errorf("%s: deallocate: %v, want admitted", when, err)
		case got.Status.Allocation != nil:
			t.Errorf("%s: the deallocated claim has allocation %+v", when, got.Status.Allocation)
		}
	}
	notAllocating("webhook up", held, "gpu-0-1g-18gb-0")

	stopWebhook()
	cur, err = rs.Get(ctx, n1.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cur.Spec.Devices = []resourceapi.Device{{Name: "gpu-0-3g-71gb-4"}}
	cur.Spec.Pool.Generation++
	if _, err := rs.Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	notAllocating("webhook down", held2, "gpu-0-2g-35gb-2")
	admitted("webhook down: allocate another driver's device", allocate(newClaim("other-driver-down"), other, "n1", "gone"))
	_, err = claims.UpdateStatus(ctx, allocate(newClaim("listed-down"), testDriver, "n1", "gpu-0-3g-71gb-4"), metav1.UpdateOptions{})
	if err == nil || !strings.Contains(err.Error(), admission.LayoutWebhookName(testDriver)) {
		t.Errorf("webhook down: an allocation of the driver's device: %v, want refused by the failure policy (Fail)", err)
	} else {
		t.Logf("webhook down: an allocation of the driver's device: %v", err)
	}
}
