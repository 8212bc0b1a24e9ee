package admission

import (
	"fmt"

	admissionregv1 "k8s.io/api/admissionregistration/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/utils/ptr"

	"github.com/drakit/drakit/partition/ledger"
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

// LayoutPath is where [Server] serves a [LayoutGuard] ([WithLayoutGuard]).
const LayoutPath = "/validate-layout-allocation"

// LayoutWebhookName is the name of driverName's layout webhook in a
// ValidatingWebhookConfiguration: "layout." and the driver's name.
func LayoutWebhookName(driverName string) string { return "layout." + driverName }

// LayoutMatchConditions are the CEL matchConditions of the layout
// webhook: only an update of a claim's status that allocates it (it had
// no status.allocation and gets one) with at least one device of
// driverName in a layout pool (package ledger's "<node>/layout" and its
// groups) is sent. Every other write (the driver's status.devices,
// reservedFor, deallocation, other drivers' claims, the driver's whole
// GPUs of static nodes and an administrator's MIG devices) is decided by
// the API server without calling the webhook: it costs nothing and is
// never refused, also while the webhook is down.
func LayoutMatchConditions(driverName string) []admissionregv1.MatchCondition {
	return []admissionregv1.MatchCondition{
		{Name: "allocates", Expression: `has(object.status) && has(object.status.allocation) && !(has(oldObject.status) && has(oldObject.status.allocation))`},
		{Name: "this-driver", Expression: fmt.Sprintf(`has(object.status) && has(object.status.allocation) && has(object.status.allocation.devices) && has(object.status.allocation.devices.results) && object.status.allocation.devices.results.exists(r, r.driver == %q && (r.pool.endsWith(%q) || r.pool.contains(%q)))`, driverName, ledger.PoolSuffix, ledger.PoolSuffix+"/")},
	}
}

// LayoutWebhook returns driverName's layout ValidatingWebhook, to put in
// a ValidatingWebhookConfiguration beside [Webhook] (the reference
// driver's chart renders the same with migPublication=layout,
// TestChartLayoutPublication): UPDATE of resource.k8s.io
// resourceclaims/status, matchPolicy Equivalent, only writes that
// allocate a device of the driver ([LayoutMatchConditions]), no side
// effects, a 5 s timeout and the given failure policy. client's path
// (or URL) must end in [LayoutPath].
//
// Failure policy: Fail is required for the layout's safety. While no
// webhook answers, the scheduler's allocation writes of the driver's
// layout devices (only those) are refused; PreBind fails and the pods are
// scheduled again with backoff, so the outage delays them and corrupts
// nothing. Run two replicas or more (the reference chart's default, with
// a PodDisruptionBudget). Ignore would admit, silently, allocations that
// no ledger records: the node's agent could then open a device over
// them. The webhook's own pods use no claims, so Fail cannot keep it from
// starting.
func LayoutWebhook(driverName string, client admissionregv1.WebhookClientConfig, failure admissionregv1.FailurePolicyType) admissionregv1.ValidatingWebhook {
	return admissionregv1.ValidatingWebhook{
		Name:         LayoutWebhookName(driverName),
		ClientConfig: client,
		Rules: []admissionregv1.RuleWithOperations{{
			Operations: []admissionregv1.OperationType{admissionregv1.Update},
			Rule: admissionregv1.Rule{
				APIGroups:   []string{resourceapi.GroupName},
				APIVersions: []string{"v1"},
				Resources:   []string{ResourceClaims + "/status"},
				Scope:       ptr.To(admissionregv1.NamespacedScope),
			},
		}},
		FailurePolicy:           ptr.To(failure),
		MatchPolicy:             ptr.To(admissionregv1.Equivalent),
		SideEffects:             ptr.To(admissionregv1.SideEffectClassNone),
		TimeoutSeconds:          ptr.To[int32](5),
		AdmissionReviewVersions: []string{"v1"},
		MatchConditions:         LayoutMatchConditions(driverName),
	}
}
