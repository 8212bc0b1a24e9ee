package admission_test

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
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
	"github.com/drakit/drakit/partition/ledger"
	"github.com/drakit/drakit/testenv"
)

// allocate sets c's allocation to one device, as the scheduler's PreBind
// writes it.
func allocate(
	c *resourceapi.ResourceClaim,
	driver, pool, device string,
) *resourceapi.ResourceClaim {
	c = c.DeepCopy()
	c.Status.Allocation = &resourceapi.AllocationResult{
		Devices: resourceapi.DeviceAllocationResult{
			Results: []resourceapi.DeviceRequestAllocationResult{{
				Request: "gpu", Driver: driver, Pool: pool, Device: device,
			}},
		},
		AllocationTimestamp: ptr.To(metav1.Now()),
	}
	return c
}

// TestLayoutOnAPIServer registers the layout webhook (admission.LayoutWebhook,
// failure policy Fail) on a real API server, served by a Server with a
// LayoutGuard, and writes allocations as the scheduler's PreBind does.
// Node n1 has a seeded ledger with two open 1g devices; node n3 has none.
// An allocation of an open device is admitted and held by the claim, at
// the claim's resourceVersion the write compared; a retried write of the
// same claim is admitted again; the same device for another claim, a
// device that is not open, a device the node's agent closed after the
// guard cached the ledger (no wait: the compare-and-swap reads the API
// server's version), and a device of a node without a ledger are refused
// (Forbidden, naming the claim and the device). Admitted without a call:
// another driver's device, the driver's device of a pool that is not a
// layout pool (a static node's whole GPU), and every write that does not
// allocate. With the webhook stopped, those are still admitted while an
// allocation of a layout device is refused (failure policy Fail).
func TestLayoutOnAPIServer(t *testing.T) {
	env := testenv.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	const ns, other, ledgers = "default", "other.example.com", "kube-system"
	const pool = "n1/layout"
	store, err := ledger.NewStore(env.Client, ledgers, testDriver)
	if err != nil {
		t.Fatal(err)
	}
	open := []ledger.Device{
		{Pool: pool, Name: "gpu-0-1g-18gb-0"},
		{Pool: pool, Name: "gpu-0-1g-18gb-1"},
	}
	if _, err := store.Update(ctx, "n1", true, func(l *ledger.Ledger) error {
		l.Seeded, l.Open = true, open
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	// The webhook, reached by URL, keeping its certificate in a Secret;
	// only the layout guard (no configuration validator).
	g, err := admission.NewLayoutGuard(env.Client, testDriver, ledgers)
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	const cfgName, secret = "layout-gpu-example-com", "layout-gpu-example-com-webhook-tls"
	vwc := &admissionregv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: cfgName},
		Webhooks: []admissionregv1.ValidatingWebhook{admission.LayoutWebhook(
			testDriver,
			admissionregv1.WebhookClientConfig{
				URL: ptr.To("https://" + addr + admission.LayoutPath),
			},
			admissionregv1.Fail,
		)},
	}
	if _, err := env.Client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, vwc, metav1.CreateOptions{}); err != nil {
		t.Fatalf("register the webhook (its matchConditions must compile): %v", err)
	}
	self := admission.SelfSigned{
		Client:               env.Client,
		Namespace:            ns,
		Secret:               secret,
		WebhookConfiguration: cfgName,
		IPAddresses:          []net.IP{net.ParseIP("127.0.0.1")},
	}
	stopWebhook := serve(
		t,
		ctx,
		nil,
		admission.WithAddress(addr),
		admission.WithSelfSignedCert(self),
		admission.WithLayoutGuard(g),
		admission.WithDrain(time.Second),
		admission.WithReusePort(),
	)
	if !g.HasSynced() {
		t.Fatal("the server started before its layout guard synced")
	}

	claims := env.Client.ResourceV1().ResourceClaims(ns)
	newClaim := func(name string) *resourceapi.ResourceClaim {
		t.Helper()
		c, err := claims.Create(ctx, &resourceapi.ResourceClaim{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: resourceapi.ResourceClaimSpec{
				Devices: resourceapi.DeviceClaim{
					Requests: []resourceapi.DeviceRequest{exactly("gpu")},
				},
			},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	dryRun := metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}}
	// The API server reads webhook configurations through an informer:
	// wait until an allocation of a closed device is refused.
	probe := newClaim("probe")
	var last error
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, last = claims.UpdateStatus(ctx, allocate(probe, testDriver, pool, "gpu-0-1g-18gb-7"), dryRun)
		return last != nil && apierrors.IsForbidden(last), nil
	}); err != nil {
		t.Fatalf("an allocation of a device that is not open: %v, want refused", last)
	}
	refused := func(what string, err error, device, claim string) {
		t.Helper()
		switch {
		case err == nil:
			t.Errorf("%s: admitted", what)
		case !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), device) || !strings.Contains(err.Error(), "claim "+ns+"/"+claim+":"):
			t.Errorf(
				"%s: %v, want Forbidden naming claim %s/%s and %s",
				what,
				err,
				ns,
				claim,
				device,
			)
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

	_, err = claims.UpdateStatus(
		ctx,
		allocate(newClaim("unlisted"), testDriver, pool, "gpu-0-1g-18gb-7"),
		metav1.UpdateOptions{},
	)
	refused("allocate a device that is not open", err, "gpu-0-1g-18gb-7", "unlisted")

	first := newClaim("first")
	held := admitted(
		"allocate an open device",
		allocate(first, testDriver, pool, "gpu-0-1g-18gb-0"),
	)
	l, _, err := store.Get(ctx, "n1")
	if err != nil {
		t.Fatal(err)
	}
	if got := l.Holder(open[0]); len(got) != 1 || got[0].UID != first.UID || l.IsOpen(open[0]) ||
		l.Held[0].ResourceVersion != first.ResourceVersion {
		t.Errorf(
			"after the allocation: held %+v, open %v; want %s held by %s at resourceVersion %s",
			l.Held,
			l.Open,
			open[0],
			first.UID,
			first.ResourceVersion,
		)
	}
	_, err = claims.UpdateStatus(
		ctx,
		allocate(newClaim("second"), testDriver, pool, "gpu-0-1g-18gb-0"),
		metav1.UpdateOptions{},
	)
	refused("allocate a device another claim holds", err, "gpu-0-1g-18gb-0", "second")
	if _, err := claims.UpdateStatus(ctx, allocate(first, testDriver, pool, "gpu-0-1g-18gb-0"), dryRun); err != nil &&
		!apierrors.IsConflict(err) {
		t.Errorf("a retried write of the same claim: %v", err)
	}
	admitted(
		"allocate another driver's device",
		allocate(newClaim("other-driver"), other, pool, "gone"),
	)
	admitted("allocate the driver's device of a pool that is not a layout pool",
		allocate(newClaim("static"), testDriver, "n1", "gpu-3"))
	_, err = claims.UpdateStatus(
		ctx,
		allocate(newClaim("no-ledger"), testDriver, "n3/layout", "gpu-0"),
		metav1.UpdateOptions{},
	)
	refused("allocate a device of a node without a ledger", err, "gpu-0", "no-ledger")

	// The node's agent lays the GPU out again: gpu-0-1g-18gb-1 is closed
	// and a 2g opened; the guard's cache may still have the old version.
	if _, err := store.Update(ctx, "n1", false, func(l *ledger.Ledger) error {
		l.Open = []ledger.Device{{Pool: pool, Name: "gpu-0-2g-35gb-2"}}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	_, err = claims.UpdateStatus(
		ctx,
		allocate(newClaim("closed"), testDriver, pool, "gpu-0-1g-18gb-1"),
		metav1.UpdateOptions{},
	)
	refused("allocate a device closed a moment ago", err, "gpu-0-1g-18gb-1", "closed")
	admitted(
		"allocate a device of the new layout",
		allocate(newClaim("new-layout"), testDriver, pool, "gpu-0-2g-35gb-2"),
	)

	// Writes that do not allocate, with the webhook up and then down.
	notAllocating := func(when string, held *resourceapi.ResourceClaim, device string) {
		t.Helper()
		withStatus := held.DeepCopy()
		withStatus.Status.Devices = []resourceapi.AllocatedDeviceStatus{{
			Driver: testDriver, Pool: pool, Device: device,
			Data: &runtime.RawExtension{Raw: []byte(`{"uuid":"MIG-1"}`)},
		}}
		held = admitted(when+": the driver's status.devices", withStatus)
		reserve := held.DeepCopy()
		reserve.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{
			{Resource: "pods", Name: "p", UID: "1234"},
		}
		held = admitted(when+": reserve the claim", reserve)
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
	held2, err := claims.Get(ctx, "new-layout", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}

	// A second replica on the same port; the first one stops during a
	// burst of 40 allocations: none is refused.
	const burst = 40
	var many []ledger.Device
	for i := 0; i < burst; i++ {
		many = append(many, ledger.Device{Pool: "n2/layout", Name: fmt.Sprintf("gpu-%d", i)})
	}
	if _, err := store.Update(ctx, "n2", true, func(l *ledger.Ledger) error {
		l.Seeded, l.Open = true, many
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	g2, err := admission.NewLayoutGuard(env.Client, testDriver, ledgers)
	if err != nil {
		t.Fatal(err)
	}
	stop2 := serve(t, ctx, nil, admission.WithAddress(addr), admission.WithSelfSignedCert(self),
		admission.WithLayoutGuard(g2), admission.WithDrain(time.Second), admission.WithReusePort())
	var wg sync.WaitGroup
	errs := make(chan error, burst)
	for i := 0; i < burst; i++ {
		c := newClaim(fmt.Sprintf("burst-%d", i))
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			time.Sleep(time.Duration(i) * 50 * time.Millisecond)
			if _, err := claims.UpdateStatus(ctx, allocate(c, testDriver, "n2/layout", many[i].Name), metav1.UpdateOptions{}); err != nil {
				errs <- fmt.Errorf("burst-%d: %w", i, err)
			}
		}(i)
	}
	time.Sleep(500 * time.Millisecond)
	stopWebhook() // drains for a second, then finishes what is in flight
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("a replica stopped during a burst: %v", err)
	}

	stop2()
	notAllocating("webhook down", held2, "gpu-0-2g-35gb-2")
	admitted(
		"webhook down: allocate another driver's device",
		allocate(newClaim("other-driver-down"), other, pool, "gone"),
	)
	admitted("webhook down: allocate the driver's device of a pool that is not a layout pool",
		allocate(newClaim("static-down"), testDriver, "n1", "gpu-3"))
	_, err = claims.UpdateStatus(
		ctx,
		allocate(newClaim("layout-down"), testDriver, pool, "gpu-0-1g-18gb-1"),
		metav1.UpdateOptions{},
	)
	if err == nil || !strings.Contains(err.Error(), admission.LayoutWebhookName(testDriver)) {
		t.Errorf(
			"webhook down: an allocation of a layout device: %v, want refused by the failure policy (Fail)",
			err,
		)
	} else {
		t.Logf("webhook down: an allocation of a layout device: %v", err)
	}
}
