package admission

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"

	admissionv1 "k8s.io/api/admission/v1"
	resourceapi "k8s.io/api/resource/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/drakit/drakit/driver"
)

// Validator checks the opaque configuration for one driver in
// ResourceClaims and ResourceClaimTemplates with the driver's
// [driver.ConfigScheme], the decoder its prepare uses. It is an
// http.Handler of AdmissionReviews; [Server] serves it over TLS. It is
// safe for concurrent use.
type Validator struct {
	scheme *driver.ConfigScheme
}

// NewValidator returns the Validator of scheme's driver.
func NewValidator(scheme *driver.ConfigScheme) (*Validator, error) {
	if scheme == nil {
		return nil, errors.New("new validator: nil configuration scheme")
	}
	return &Validator{scheme: scheme}, nil
}

// Driver is the driver whose configurations are checked.
func (v *Validator) Driver() string { return v.scheme.Driver() }

// ValidateClaimSpec decodes, request by request in the claim's order,
// the claim's opaque configurations for the driver that apply to the
// request, as prepare does ([driver.ConfigScheme.Decode]), and returns
// the first error: a [*driver.ConfigError] whose message is the one
// prepare gives for the same claim when the driver prepares a device of
// that request. A request with firstAvailable alternatives is checked
// once per alternative ("request/alternative"), which prepare names when
// it is allocated. Configurations for other drivers are not looked at.
//
// What admission cannot see is left to prepare: the DeviceClass's own
// configurations (merged under the claim's at prepare), checks that
// depend on the allocated device, and which requests the driver serves
// (a configuration that applies to every request is checked under the
// first; prepare names the first request the driver allocated).
func (v *Validator) ValidateClaimSpec(spec *resourceapi.ResourceClaimSpec) error {
	for _, r := range spec.Devices.Requests {
		names := []string{r.Name}
		if len(r.FirstAvailable) > 0 {
			names = names[:0]
			for _, sub := range r.FirstAvailable {
				names = append(names, r.Name+"/"+sub.Name)
			}
		}
		for _, name := range names {
			dev := driver.AllocatedDevice{Request: name, Config: v.configsFor(spec.Devices.Config, r.Name, name)}
			if len(dev.Config) == 0 {
				continue
			}
			if _, err := v.scheme.Decode(dev); err != nil {
				return err
			}
		}
	}
	return nil
}

// configsFor are the claim's opaque configurations for the driver that
// apply to request name (base is its request without the alternative),
// in the claim's order.
func (v *Validator) configsFor(configs []resourceapi.DeviceClaimConfiguration, base, name string) []driver.OpaqueConfig {
	var out []driver.OpaqueConfig
	for _, c := range configs {
		if c.Opaque == nil || c.Opaque.Driver != v.scheme.Driver() {
			continue
		}
		if len(c.Requests) > 0 && !slices.Contains(c.Requests, base) && !slices.Contains(c.Requests, name) {
			continue
		}
		out = append(out, driver.OpaqueConfig{Parameters: json.RawMessage(c.Opaque.Parameters.Raw)})
	}
	return out
}

// The resources the Validator checks, in resource.k8s.io/v1.
const (
	ResourceClaims         = "resourceclaims"
	ResourceClaimTemplates = "resourceclaimtemplates"
)

// Review answers one admission request. It denies the creation of a
// ResourceClaim or ResourceClaimTemplate (resource.k8s.io/v1) whose
// configuration for the driver fails [Validator.ValidateClaimSpec],
// with that error's message, and an update that changes such a spec
// (an update that leaves the spec alone is allowed: a claim made before
// the webhook ran must stay deletable, its finalizer removable). It
// allows everything else: another resource, version or operation, with a
// warning when it was not checked.
func (v *Validator) Review(ctx context.Context, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	resp := &admissionv1.AdmissionResponse{UID: req.UID, Allowed: true}
	logger := klog.FromContext(ctx).WithValues("operation", req.Operation, "resource", req.Resource.Resource, "object", klog.KRef(req.Namespace, req.Name))
	if req.Resource.Group != resourceapi.GroupName || req.Resource.Version != "v1" ||
		(req.Resource.Resource != ResourceClaims && req.Resource.Resource != ResourceClaimTemplates) || req.SubResource != "" {
		resp.Warnings = []string{fmt.Sprintf("%s admission: %s %s not checked: only resource.k8s.io/v1 %s and %s are", v.Driver(), req.Resource.String(), req.SubResource, ResourceClaims, ResourceClaimTemplates)}
		return resp
	}
	if req.Operation != admissionv1.Create && req.Operation != admissionv1.Update {
		return resp
	}
	spec, err := claimSpec(req.Resource.Resource, req.Object.Raw)
	if err != nil {
		// The API server decoded the object before it called us: what
		// does not decode here is a webhook configured for something
		// else. Allow it, loudly.
		logger.Error(err, "Cannot decode the object; allowed unchecked")
		resp.Warnings = []string{fmt.Sprintf("%s admission: not checked: %v", v.Driver(), err)}
		return resp
	}
	if req.Operation == admissionv1.Update {
		old, err := claimSpec(req.Resource.Resource, req.OldObject.Raw)
		if err == nil && apiequality.Semantic.DeepEqual(old, spec) {
			return resp
		}
	}
	if err := v.ValidateClaimSpec(spec); err != nil {
		logger.V(2).Info("Refused", "reason", err.Error())
		resp.Allowed = false
		resp.Result = &metav1.Status{Status: metav1.StatusFailure, Message: err.Error(), Reason: metav1.StatusReasonInvalid, Code: http.StatusUnprocessableEntity}
		return resp
	}
	logger.V(5).Info("Allowed")
	return resp
}

// claimSpec decodes a claim's spec from a ResourceClaim or a template's
// from a ResourceClaimTemplate.
func claimSpec(resource string, raw []byte) (*resourceapi.ResourceClaimSpec, error) {
	if len(raw) == 0 {
		return nil, errors.New("no object")
	}
	if resource == ResourceClaims {
		var c resourceapi.ResourceClaim
		if err := json.Unmarshal(raw, &c); err != nil {
			return nil, fmt.Errorf("decode ResourceClaim: %w", err)
		}
		return &c.Spec, nil
	}
	var t resourceapi.ResourceClaimTemplate
	if err := json.Unmarshal(raw, &t); err != nil {
		return nil, fmt.Errorf("decode ResourceClaimTemplate: %w", err)
	}
	return &t.Spec.Spec, nil
}

// maxReview bounds a review's body: the API server's objects are at most
// 3 MiB, and a review holds the object and the old one.
const maxReview = 7 << 20

// ServeHTTP answers a POSTed AdmissionReview (admission.k8s.io/v1) with
// [Validator.Review]'s response. A body that is not one is answered with
// 400 and no review.
func (v *Validator) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	serveReview(w, r, v.Review)
}
