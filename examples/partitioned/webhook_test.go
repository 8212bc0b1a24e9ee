package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	admissionregv1 "k8s.io/api/admissionregistration/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	"github.com/drakit/drakit/admission"
	"github.com/drakit/drakit/driver/drivertest"
	"github.com/drakit/drakit/testenv"
)

// TestWebhook runs the driver and its admission webhook against a real
// API server and scheduler: a claim with a bad clock is prepared with an
// error before the webhook is registered, and refused with the same
// message once it is; a good one is accepted, allocated and prepared,
// and its container gets the clock.
func TestWebhook(t *testing.T) {
	env := testenv.Start(t)
	ctx := context.Background()
	cfg := machine(t)
	d, err := New(env.NodeName, cfg, env.DriverOptions(DriverName)...)
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- d.Run(rctx) }()
	defer func() { cancel(); <-done }()
	<-d.Ready()
	createClass(t, env)
	kubelet, err := drivertest.Dial(d.DRASocket())
	if err != nil {
		t.Fatal(err)
	}
	defer kubelet.Close()
	claims := env.Client.ResourceV1().ResourceClaims("default")
	claim := func(name, clock string) *resourceapi.ResourceClaim {
		raw := fmt.Appendf(nil, `{"apiVersion":%q,"kind":%q,"clock":%q}`,
			ConfigAPIVersion, ConfigKind, clock)
		cfg := resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{
			Driver: DriverName, Parameters: runtime.RawExtension{Raw: raw}}}
		req := &resourceapi.ExactDeviceRequest{DeviceClassName: "cards"}
		return &resourceapi.ResourceClaim{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
			Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
				Requests: []resourceapi.DeviceRequest{{Name: "card", Exactly: req}},
				Config:   []resourceapi.DeviceClaimConfiguration{{DeviceConfiguration: cfg}},
			}}}
	}
	// prepare allocates the claim for a pod on the (fake) node and
	// prepares it as the kubelet would.
	prepare := func(c *resourceapi.ResourceClaim) (string, error) {
		createPod(t, env, c.Name, c.Name)
		poll(t, "claim "+c.Name+" allocated", func(ctx context.Context) (bool, error) {
			got, err := claims.Get(ctx, c.Name, metav1.GetOptions{})
			c = got
			return err == nil && got.Status.Allocation != nil, err
		})
		resp, err := kubelet.Prepare(ctx, c)
		return fmt.Sprint(resp[string(c.UID)]), err
	}

	bad, err := claims.Create(ctx, claim("bad", "Turbo"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, prepErr := prepare(bad)
	const want = `invalid opaque device configuration: request "card": ` +
		`CardConfig (partitioned.drakit.dev/v1): clock "Turbo": want Base or Boost`
	if prepErr == nil || !strings.HasSuffix(prepErr.Error(), ": "+want) {
		t.Fatalf("prepare of a bad clock: %v, want it to end with %s", prepErr, want)
	}

	v, err := admission.NewValidator(Scheme)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	client := admissionregv1.WebhookClientConfig{URL: ptr.To("https://" + addr + admission.Path)}
	hook := admission.Webhook(DriverName, client, admissionregv1.Fail)
	vwc := &admissionregv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "partitioned"},
		Webhooks:   []admissionregv1.ValidatingWebhook{hook}}
	vwcs := env.Client.AdmissionregistrationV1().ValidatingWebhookConfigurations()
	if _, err := vwcs.Create(ctx, vwc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cert := admission.SelfSigned{Client: env.Client, Namespace: "default",
		Secret: "partitioned-webhook", WebhookConfiguration: "partitioned",
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}
	srv, err := admission.NewServer(v, admission.WithAddress(addr),
		admission.WithSelfSignedCert(cert))
	if err != nil {
		t.Fatal(err)
	}
	sctx, scancel := context.WithCancel(ctx)
	sdone := make(chan error, 1)
	go func() { sdone <- srv.Run(sctx) }()
	defer func() { scancel(); <-sdone }()
	<-srv.Started()
	var refusal error
	poll(t, "the API server calls the webhook", func(ctx context.Context) (bool, error) {
		_, refusal = claims.Create(ctx, claim("refused", "Turbo"), metav1.CreateOptions{})
		return refusal != nil && strings.Contains(refusal.Error(), "denied the request"), nil
	})
	if !strings.HasSuffix(refusal.Error(), "denied the request: "+want) {
		t.Errorf("refusal %v, want prepare's message %s", refusal, want)
	}

	good, err := claims.Create(ctx, claim("good", "Boost"), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("a good claim is refused: %v", err)
	}
	out, err := prepare(good)
	if err != nil {
		t.Fatal(err)
	}
	specs, err := os.ReadDir(env.CDIDir)
	if err != nil {
		t.Fatal(err)
	}
	var all string
	for _, f := range specs {
		b, _ := os.ReadFile(filepath.Join(env.CDIDir, f.Name()))
		all += string(b)
	}
	if !strings.Contains(all, ClockEnvVar+"_CARD_0_B=Boost") {
		t.Errorf("the good claim (%s): its CDI spec lacks %s_CARD_0_B=Boost:\n%s",
			out, ClockEnvVar, all)
	}
}
