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
package admission
