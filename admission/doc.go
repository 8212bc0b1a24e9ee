// Package admission refuses a ResourceClaim or ResourceClaimTemplate
// whose opaque configuration for a driver is bad when it is created
// (`kubectl apply`), with the message the driver's prepare would give on
// the node, instead of letting the claim be scheduled and fail there
// with its pod stuck in ContainerCreating.
//
// A vendor registers its configuration types once, in a
// [driver.ConfigScheme], and decodes with it in its Preparer
// ([driver.DecodeAs]); the webhook decodes with the same scheme:
//
//	scheme, err := driver.NewConfigScheme("gpu.example.com",
//		driver.NewConfigType("gpu.example.com/v1", "GpuConfig", (*GpuConfig).Validate))
//	v, err := admission.NewValidator(scheme)
//	srv, err := admission.NewServer(v, admission.WithSelfSignedCert(admission.SelfSigned{
//		Client: client, Namespace: ns, Secret: "gpu-webhook-tls",
//		WebhookConfiguration: "gpu-example-com",
//		DNSNames: []string{"gpu-webhook", "gpu-webhook." + ns, "gpu-webhook." + ns + ".svc"},
//	}))
//	err = srv.Run(ctx)
//
// and registers [Webhook] in a ValidatingWebhookConfiguration (the
// reference driver's chart, examples/nvidia/deploy, shows one).
//
// What is answered how:
//   - A configuration for the driver with an unknown field, a bad value
//     (its type's check), or an unknown apiVersion or kind: refused with
//     prepare's message ([driver.ConfigError]).
//   - A configuration for another driver: allowed (not this webhook's;
//     [MatchCondition] does not even send a claim that has none for the
//     driver).
//   - What only prepare can know: the DeviceClass's configurations, checks
//     that depend on the allocated device, which request the driver
//     serves. Allowed; prepare refuses with the same decoder.
//   - An update that leaves the spec alone (finalizers, status): allowed,
//     so that a claim made before the webhook stays deletable.
//
// TLS: [WithSelfSignedCert] keeps a certificate authority and serving
// certificate in a Secret and sets the webhook's caBundle itself (nothing
// else to install, works with `helm template` and GitOps, replicas share
// the Secret); [WithCertFiles] serves files something else renews, such
// as cert-manager's Certificate with its CA injector.
//
// Failure policy: see [Webhook]; the reference chart uses Ignore by
// default, because prepare checks the same anyway.
//
// # Allocations from an older layout
//
// A driver that publishes a layout (package partition/ledger: per node a
// pool "<node>/layout" listing the current layout, free devices replaced
// by overlapping ones as demand moves) needs every allocation of a
// layout device admitted against the node's layout ledger. A
// [LayoutGuard] does it, served by the same Server at [LayoutPath]:
//
//	g, err := admission.NewLayoutGuard(client, "gpu.example.com", "ledger-namespace")
//	srv, err := admission.NewServer(v, admission.WithLayoutGuard(g), admission.WithSelfSignedCert(...))
//
// (or the flags --layout-allocations and --layout-namespace of [Flags]),
// registered as [LayoutWebhook] with failure policy Fail. It admits an
// allocation only by moving its devices from Open to Held in the node's
// ledger by compare-and-swap, and refuses ([StaleAllocationError]) a
// device that is not Open. [LayoutMatchConditions] send it only the
// status updates that allocate a device of a layout pool, so every other
// write (and every other device of the driver) pays nothing and does not
// depend on the webhook. Run two replicas or more; [WithDrain] keeps a
// replica that is stopping serving while the API server moves to the
// other, and [WithReusePort] lets two replicas share a host port.
//
// A ValidatingAdmissionPolicy cannot write the ledger, and with the
// slices as params the API server evaluates it once per selected slice:
// at 500 slices an allocation write took 245x as long
// (docs/dynamic-mig-measurements.md, "The admission check").
package admission
