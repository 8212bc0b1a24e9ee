package admission

import (
	"fmt"

	admissionregv1 "k8s.io/api/admissionregistration/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/utils/ptr"
)

// Path is where [Server] serves the [Validator].
const Path = "/validate-resource-claim-config"

// WebhookName is the name of driverName's webhook in a
// ValidatingWebhookConfiguration: "config." and the driver's name.
func WebhookName(driverName string) string { return "config." + driverName }

// MatchCondition is the CEL expression of the webhook's matchCondition:
// only a claim or template with an opaque configuration for driverName is
// sent, so that a webhook that is down or slow touches no other claim.
func MatchCondition(driverName string) string {
	return fmt.Sprintf(`(request.resource.resource == %q ? (has(object.spec.devices) && has(object.spec.devices.config) ? object.spec.devices.config : []) : (has(object.spec.spec) && has(object.spec.spec.devices) && has(object.spec.spec.devices.config) ? object.spec.spec.devices.config : [])).exists(c, has(c.opaque) && c.opaque.driver == %q)`,
		ResourceClaims, driverName)
}

// Webhook returns driverName's ValidatingWebhook, to put in a
// ValidatingWebhookConfiguration (the reference driver's chart renders
// the same, TestChartWebhookMatchesSDK): CREATE and UPDATE of
// resource.k8s.io resourceclaims and resourceclaimtemplates, matchPolicy
// Equivalent (a request in another served version is converted to v1,
// the version the Validator reads), only objects with a configuration
// for the driver ([MatchCondition]), no side effects (server-side dry
// runs are checked too), a 5 s timeout and the given failure policy.
//
// Failure policy: prepare decodes with the same scheme, so a claim the
// webhook did not see fails there with the same message; Ignore keeps
// claims flowing while the webhook is down (pods' claims are made from
// templates by the ResourceClaim controller: Fail would stop those pods
// too), at the cost of finding a bad configuration at prepare for that
// time. Fail refuses every claim with the driver's configuration while
// no webhook answers.
func Webhook(driverName string, client admissionregv1.WebhookClientConfig, failure admissionregv1.FailurePolicyType) admissionregv1.ValidatingWebhook {
	return admissionregv1.ValidatingWebhook{
		Name:         WebhookName(driverName),
		ClientConfig: client,
		Rules: []admissionregv1.RuleWithOperations{{
			Operations: []admissionregv1.OperationType{admissionregv1.Create, admissionregv1.Update},
			Rule: admissionregv1.Rule{
				APIGroups:   []string{resourceapi.GroupName},
				APIVersions: []string{"v1"},
				Resources:   []string{ResourceClaims, ResourceClaimTemplates},
				Scope:       ptr.To(admissionregv1.NamespacedScope),
			},
		}},
		FailurePolicy:           ptr.To(failure),
		MatchPolicy:             ptr.To(admissionregv1.Equivalent),
		SideEffects:             ptr.To(admissionregv1.SideEffectClassNone),
		TimeoutSeconds:          ptr.To[int32](5),
		AdmissionReviewVersions: []string{"v1"},
		MatchConditions:         []admissionregv1.MatchCondition{{Name: "has-driver-config", Expression: MatchCondition(driverName)}},
	}
}
