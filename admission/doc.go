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
// A driver that publishes each pool as one ResourceSlice listing a
// current layout, and replaces free devices by overlapping ones after a
// fence (docs/dynamic-mig-publication.md, "What it guarantees", rule 3),
// needs the API server to refuse an allocation the scheduler made from
// an older version of the slice. A [LayoutGuard] does it, served by the
// same Server at [LayoutPath]:
//
//	g, err := admission.NewLayoutGuard(client, "gpu.example.com")
//	srv, err := admission.NewServer(v, admission.WithLayoutGuard(g), admission.WithSelfSignedCert(...))
//
// (or the flag --layout-allocations of [Flags]), registered as
// [LayoutWebhook]. It keeps the driver's slices in an informer (field
// selector spec.driver; the webhook's account needs get, list and watch
// on resourceslices) and answers from an index: a request costs a map
// lookup per allocated device, whatever the number of slices.
// [LayoutMatchConditions] send it only the status updates that allocate
// a device of the driver, so every other write pays nothing. It refuses
// ([StaleAllocationError]) an allocation of a device that its pool's
// only slice does not list; it admits other drivers' devices, pools of
// several slices, pools without a slice, and writes that do not
// allocate. It answers only once its informer has synced; Fail is its
// recommended failure policy (see [LayoutWebhook]).
//
// A ValidatingAdmissionPolicy with the slices as params can express the
// same check, but the API server evaluates it once per selected slice
// and the driver's slices carry no label to select them by: at 500
// slices an allocation write took 245x as long (docs, "The admission
// check").
package admission
