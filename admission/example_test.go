package admission_test

import (
	"fmt"

	admissionregv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/utils/ptr"

	"github.com/drakit/drakit/admission"
)

// The two webhooks of a driver's ValidatingWebhookConfiguration: the
// configuration check and, for a driver that publishes layouts, the
// check of allocations, both served by one Server.
func ExampleLayoutWebhook() {
	const drv = "gpu.example.com"
	svc := func(path string) admissionregv1.WebhookClientConfig {
		return admissionregv1.WebhookClientConfig{Service: &admissionregv1.ServiceReference{
			Namespace: "gpu-system", Name: "gpu-webhook", Path: ptr.To(path), Port: ptr.To[int32](443)}}
	}
	for _, w := range []admissionregv1.ValidatingWebhook{
		admission.Webhook(drv, svc(admission.Path), admissionregv1.Ignore),
		admission.LayoutWebhook(drv, svc(admission.LayoutPath), admissionregv1.Fail),
	} {
		fmt.Println(w.Name, *w.ClientConfig.Service.Path, w.Rules[0].Operations, w.Rules[0].Resources, *w.FailurePolicy)
		for _, c := range w.MatchConditions {
			fmt.Println("  if", c.Name)
		}
	}
	// Output:
	// config.gpu.example.com /validate-resource-claim-config [CREATE UPDATE] [resourceclaims resourceclaimtemplates] Ignore
	//   if has-driver-config
	// layout.gpu.example.com /validate-layout-allocation [UPDATE] [resourceclaims/status] Fail
	//   if allocates
	//   if this-driver
}
