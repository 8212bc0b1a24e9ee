package admission_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	admissionregv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/drakit/drakit/admission"
	"github.com/drakit/drakit/cdi"
	"github.com/drakit/drakit/device"
	"github.com/drakit/drakit/driver"
	"github.com/drakit/drakit/driver/drivertest"
	"github.com/drakit/drakit/testenv"
)

// preparer is the test driver's: it decodes each device's configuration
// with the scheme, as a vendor's does.
type preparer struct{ scheme *driver.ConfigScheme }

func (p preparer) PrepareDevice(_ context.Context, _ driver.Claim, dev driver.AllocatedDevice) (driver.PreparedDevice, error) {
	cfg, err := driver.DecodeAs[GpuConfig](p.scheme, dev)
	if err != nil {
		return driver.PreparedDevice{}, err
	}
	interval := "Default"
	if cfg != nil && cfg.Interval != "" {
		interval = cfg.Interval
	}
	return driver.PreparedDevice{Edits: (&cdi.Edits{}).Env("INTERVAL_"+strings.ToUpper(strings.ReplaceAll(dev.Device, "-", "_")), interval)}, nil
}

func (preparer) UnprepareDevice(context.Context, driver.ClaimRef, driver.AllocatedDevice, json.RawMessage) error {
	return nil
}

// freePort is a port nothing listens on now.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// denied is the webhook's message in the API server's refusal, "" when
// err is not a webhook's refusal.
func denied(err error) string {
	const mark = " denied the request: "
	if err == nil {
		return ""
	}
	_, msg, ok := strings.Cut(err.Error(), mark)
	if !ok {
		return ""
	}
	return msg
}

// TestOnAPIServer checks the webhook on a real API server and scheduler
// with the driver's runtime: for each case, the message prepare gives
// (the claim allocated by the scheduler for a pod, prepared through the
// driver's kubelet socket, before the webhook is registered) and the
// answer of the API server to creating the claim with the webhook
// registered: refused with exactly prepare's message, or allowed where
// prepare succeeds. The webhook keeps its own certificate in a Secret and
// sets the caBundle; claims made before the webhook stay deletable.
func TestOnAPIServer(t *testing.T) {
	env := testenv.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	scheme := testScheme(t)

	inv := &device.Inventory{Driver: testDriver, Pools: []device.Pool{{Name: env.NodeName}}}
	for i := range 8 {
		inv.Pools[0].Devices = append(inv.Pools[0].Devices, device.New(fmt.Sprintf("dev-%d", i)))
	}
	rt, err := driver.New(testDriver, append(env.DriverOptions(testDriver),
		driver.WithDiscoverer(device.StaticDiscoverer{Inv: inv}), driver.WithPreparer(preparer{scheme}))...)
	if err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- rt.Run(rctx) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("driver: %v", err)
		}
	}()
	select {
	case <-rt.Ready():
	case err := <-done:
		t.Fatalf("driver stopped: %v", err)
	}
	class := &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: testDriver}, Spec: resourceapi.DeviceClassSpec{
		Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: fmt.Sprintf("device.driver == %q", testDriver)}}}}}
	if _, err := env.Client.ResourceV1().DeviceClasses().Create(ctx, class, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	kubelet, err := drivertest.Dial(rt.DRASocket())
	if err != nil {
		t.Fatal(err)
	}
	defer kubelet.Close()
	const ns = "default"
	claims := env.Client.ResourceV1().ResourceClaims(ns)
	claimOf := func(name string, config []resourceapi.DeviceClaimConfiguration) *resourceapi.ResourceClaim {
		return &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{exactly("gpu")}, Config: config}}}
	}

	// What prepare says, with no webhook.
	prepared := map[string]error{}
	for _, tc := range cases {
		claim, err := claims.Create(ctx, claimOf("prepare-"+tc.name, tc.config), metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("%s: create without the webhook: %v", tc.name, err)
		}
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "prepare-" + tc.name, Namespace: ns}, Spec: corev1.PodSpec{
			Containers:     []corev1.Container{{Name: "c", Image: "registry.example/none:1", Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "gpu"}}}}},
			ResourceClaims: []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr.To(claim.Name)}},
		}}
		if _, err := env.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			claim, err = claims.Get(ctx, claim.Name, metav1.GetOptions{})
			return err == nil && claim.Status.Allocation != nil, err
		}); err != nil {
			t.Fatalf("%s: the scheduler did not allocate the claim: %v", tc.name, err)
		}
		_, prepared[tc.name] = kubelet.Prepare(ctx, claim)
		if (prepared[tc.name] == nil) != (tc.wantErr == "") {
			t.Errorf("%s: prepare: %v; want an error %v", tc.name, prepared[tc.name], tc.wantErr != "")
		}
		if prepared[tc.name] == nil {
			if err := kubelet.Unprepare(ctx, claim); err != nil {
				t.Fatal(err)
			}
		}
	}

	// The webhook, reached by URL (the local cluster has no service
	// proxy), keeping its certificate in a Secret.
	v, err := admission.NewValidator(scheme)
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	const cfgName, secret = "gpu-example-com", "gpu-example-com-webhook-tls"
	vwc := &admissionregv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: cfgName},
		Webhooks: []admissionregv1.ValidatingWebhook{admission.Webhook(testDriver,
			admissionregv1.WebhookClientConfig{URL: ptr.To("https://" + addr + admission.Path)}, admissionregv1.Fail)}}
	if _, err := env.Client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, vwc, metav1.CreateOptions{}); err != nil {
		t.Fatalf("register the webhook (its matchCondition must compile): %v", err)
	}
	self := admission.SelfSigned{Client: env.Client, Namespace: ns, Secret: secret, WebhookConfiguration: cfgName, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}
	stopWebhook := serve(t, ctx, v, admission.WithAddress(addr), admission.WithSelfSignedCert(self))
	// The API server reads webhook configurations from an informer: wait
	// until it calls the webhook (a server-side dry run is checked too).
	probe := cases[1]
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := claims.Create(ctx, claimOf("probe", probe.config), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return denied(err) != "", nil
	}); err != nil {
		t.Fatalf("the API server does not call the webhook: %v", err)
	}

	for _, tc := range cases {
		_, err := claims.Create(ctx, claimOf("admit-"+tc.name, tc.config), metav1.CreateOptions{})
		msg := denied(err)
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("%s: refused: %v; want allowed (prepare succeeded)", tc.name, err)
		case tc.wantErr == "":
		case msg == "" || !apierrors.IsInvalid(err):
			t.Errorf("%s: %v; want refused by the webhook as Invalid", tc.name, err)
		case msg != tc.wantErr:
			t.Errorf("%s: refused with\n%s\nwant\n%s", tc.name, msg, tc.wantErr)
		case !strings.HasSuffix(prepared[tc.name].Error(), ": "+msg):
			t.Errorf("%s: prepare said\n%v\nthe webhook\n%s", tc.name, prepared[tc.name], msg)
		}
		// A template with the same configuration is answered the same.
		tmpl := &resourceapi.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Name: "admit-" + tc.name, Namespace: ns},
			Spec: resourceapi.ResourceClaimTemplateSpec{Spec: claimOf("", tc.config).Spec}}
		_, err = env.Client.ResourceV1().ResourceClaimTemplates(ns).Create(ctx, tmpl, metav1.CreateOptions{})
		if got := denied(err); got != msg || (err != nil) != (tc.wantErr != "") {
			t.Errorf("%s: template answered %v; the claim %q", tc.name, err, msg)
		}
	}

	// A bad claim made before the webhook stays deletable: its pod goes,
	// the controller removes its reservation and finalizer (updates that
	// leave the spec alone), and it is gone.
	old := "prepare-" + cases[1].name
	if err := env.Client.CoreV1().Pods(ns).Delete(ctx, old, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	if err := claims.Delete(ctx, old, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	patch := []byte(`{"metadata":{"labels":{"touched":"yes"}}}`)
	if _, err := claims.Patch(ctx, "prepare-"+cases[2].name, "application/merge-patch+json", patch, metav1.PatchOptions{}); err != nil {
		t.Errorf("label a bad claim made before the webhook: %v; want allowed (its spec did not change)", err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := claims.Get(ctx, old, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	}); err != nil {
		t.Errorf("claim %s made before the webhook is not gone after its pod: %v", old, err)
	}

	// The Secret holds the certificates; a restarted webhook (a second
	// replica) keeps them and the caBundle.
	s1, err := env.Client.CoreV1().Secrets(ns).Get(ctx, secret, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	stopWebhook()
	serve(t, ctx, v, admission.WithAddress(addr), admission.WithSelfSignedCert(self))
	s2, err := env.Client.CoreV1().Secrets(ns).Get(ctx, secret, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if s2.ResourceVersion != s1.ResourceVersion {
		t.Errorf("a restarted webhook changed its Secret (resourceVersion %s -> %s)", s1.ResourceVersion, s2.ResourceVersion)
	}
	if _, err := claims.Create(ctx, claimOf("after-restart", cases[2].config), metav1.CreateOptions{}); denied(err) != cases[2].wantErr {
		t.Errorf("after a restart: %v; want refused with %s", err, cases[2].wantErr)
	}
}

// serve runs a webhook Server of v until the test ends or the returned
// stop is called, and waits until it serves.
func serve(t *testing.T, ctx context.Context, v *admission.Validator, opts ...admission.Option) (stop func()) {
	t.Helper()
	srv, err := admission.NewServer(v, opts...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("webhook: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	select {
	case <-srv.Started():
	case err := <-done:
		t.Fatalf("webhook stopped: %v", err)
	case <-ctx.Done():
		t.Fatal("the webhook did not start")
	}
	return stop
}
