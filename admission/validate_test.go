package admission_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/drakit/drakit/admission"
	"github.com/drakit/drakit/driver"
)

const testDriver = "gpu.example.com"

// GpuConfig is the test driver's configuration.
type GpuConfig struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Interval   string `json:"interval,omitempty"`
}

func (c *GpuConfig) validate() error {
	switch c.Interval {
	case "", "Short", "Long":
		return nil
	}
	return fmt.Errorf("interval %q: want Short or Long", c.Interval)
}

func testScheme(t testing.TB) *driver.ConfigScheme {
	t.Helper()
	s, err := driver.NewConfigScheme(testDriver, driver.NewConfigType(testDriver+"/v1", "GpuConfig", (*GpuConfig).validate))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func testValidator(t testing.TB) *admission.Validator {
	t.Helper()
	v, err := admission.NewValidator(testScheme(t))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// opaque is a claim configuration for driver with parameters p.
func opaque(driverName, p string, requests ...string) resourceapi.DeviceClaimConfiguration {
	return resourceapi.DeviceClaimConfiguration{Requests: requests, DeviceConfiguration: resourceapi.DeviceConfiguration{
		Opaque: &resourceapi.OpaqueDeviceConfiguration{Driver: driverName, Parameters: runtime.RawExtension{Raw: []byte(p)}}}}
}

func exactly(name string) resourceapi.DeviceRequest {
	return resourceapi.DeviceRequest{Name: name, Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "gpu.example.com", AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1}}
}

// The cases every test of the package runs: what the validator answers
// for a claim with these configurations.
var cases = []struct {
	name    string
	config  []resourceapi.DeviceClaimConfiguration
	wantErr string // "" is allowed
}{
	{name: "correct", config: []resourceapi.DeviceClaimConfiguration{opaque(testDriver, `{"apiVersion":"gpu.example.com/v1","kind":"GpuConfig","interval":"Long"}`)}},
	{name: "unknown-field", config: []resourceapi.DeviceClaimConfiguration{opaque(testDriver, `{"apiVersion":"gpu.example.com/v1","kind":"GpuConfig","intervall":"Long"}`)},
		wantErr: `invalid opaque device configuration: request "gpu": GpuConfig (gpu.example.com/v1) from the claim: json: unknown field "intervall"`},
	{name: "bad-value", config: []resourceapi.DeviceClaimConfiguration{opaque(testDriver, `{"apiVersion":"gpu.example.com/v1","kind":"GpuConfig","interval":"Huge"}`)},
		wantErr: `invalid opaque device configuration: request "gpu": GpuConfig (gpu.example.com/v1): interval "Huge": want Short or Long`},
	{name: "unknown-kind", config: []resourceapi.DeviceClaimConfiguration{opaque(testDriver, `{"apiVersion":"gpu.example.com/v2","kind":"GpuConfig"}`)},
		wantErr: `invalid opaque device configuration: request "gpu": config from the claim: apiVersion "gpu.example.com/v2", kind "GpuConfig": not a configuration of driver gpu.example.com, which takes gpu.example.com/v1 GpuConfig`},
	{name: "other-driver", config: []resourceapi.DeviceClaimConfiguration{opaque("nic.example.com", `{"whatever":1}`)}},
}

func TestValidateClaimSpec(t *testing.T) {
	v := testValidator(t)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			spec := &resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{exactly("gpu")}, Config: tc.config}}
			checkErr(t, v.ValidateClaimSpec(spec), tc.wantErr)
		})
	}
	bad := `{"apiVersion":"gpu.example.com/v1","kind":"GpuConfig","interval":"Huge"}`
	good := `{"apiVersion":"gpu.example.com/v1","kind":"GpuConfig","interval":"Short"}`
	for _, tc := range []struct {
		name     string
		requests []resourceapi.DeviceRequest
		config   []resourceapi.DeviceClaimConfiguration
		wantErr  string
	}{
		{name: "the first request it applies to is named", requests: []resourceapi.DeviceRequest{exactly("a"), exactly("b")},
			config:  []resourceapi.DeviceClaimConfiguration{opaque(testDriver, bad, "b")},
			wantErr: `invalid opaque device configuration: request "b": GpuConfig (gpu.example.com/v1): interval "Huge": want Short or Long`},
		{name: "a later config overrides the value", requests: []resourceapi.DeviceRequest{exactly("a")},
			config: []resourceapi.DeviceClaimConfiguration{opaque(testDriver, bad), opaque(testDriver, good, "a")}},
		{name: "alternatives are named with the request", requests: []resourceapi.DeviceRequest{{Name: "a", FirstAvailable: []resourceapi.DeviceSubRequest{
			{Name: "big", DeviceClassName: "c", AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1},
			{Name: "small", DeviceClassName: "c", AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1}}}},
			config:  []resourceapi.DeviceClaimConfiguration{opaque(testDriver, bad, "a/small")},
			wantErr: `invalid opaque device configuration: request "a/small": GpuConfig (gpu.example.com/v1): interval "Huge": want Short or Long`},
		{name: "no requests, nothing applies", config: []resourceapi.DeviceClaimConfiguration{opaque(testDriver, bad)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := &resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: tc.requests, Config: tc.config}}
			checkErr(t, v.ValidateClaimSpec(spec), tc.wantErr)
		})
	}
}

func checkErr(t *testing.T, err error, want string) {
	t.Helper()
	switch {
	case want == "" && err != nil:
		t.Errorf("refused: %v; want allowed", err)
	case want != "" && (err == nil || err.Error() != want):
		t.Errorf("error\n%v\nwant\n%s", err, want)
	}
}

func claimJSON(t *testing.T, config ...resourceapi.DeviceClaimConfiguration) []byte {
	t.Helper()
	c := resourceapi.ResourceClaim{TypeMeta: metav1.TypeMeta{APIVersion: "resource.k8s.io/v1", Kind: "ResourceClaim"}, ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "ns"},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{exactly("gpu")}, Config: config}}}
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestReview(t *testing.T) {
	v := testValidator(t)
	bad := opaque(testDriver, `{"apiVersion":"gpu.example.com/v1","kind":"GpuConfig","interval":"Huge"}`)
	good := opaque(testDriver, `{"apiVersion":"gpu.example.com/v1","kind":"GpuConfig"}`)
	tmpl := resourceapi.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Name: "t", Namespace: "ns"},
		Spec: resourceapi.ResourceClaimTemplateSpec{Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{exactly("gpu")}, Config: []resourceapi.DeviceClaimConfiguration{bad}}}}}
	tmplJSON, _ := json.Marshal(tmpl)
	claims := admissionv1.AdmissionRequest{UID: "u", Resource: metav1.GroupVersionResource{Group: "resource.k8s.io", Version: "v1", Resource: "resourceclaims"}}
	with := func(r admissionv1.AdmissionRequest, f func(*admissionv1.AdmissionRequest)) *admissionv1.AdmissionRequest {
		f(&r)
		return &r
	}
	for _, tc := range []struct {
		name        string
		req         *admissionv1.AdmissionRequest
		allowed     bool
		wantWarning bool
	}{
		{name: "create bad", req: with(claims, func(r *admissionv1.AdmissionRequest) {
			r.Operation, r.Object.Raw = admissionv1.Create, claimJSON(t, bad)
		})},
		{name: "create good", allowed: true, req: with(claims, func(r *admissionv1.AdmissionRequest) {
			r.Operation, r.Object.Raw = admissionv1.Create, claimJSON(t, good)
		})},
		{name: "template bad", req: with(claims, func(r *admissionv1.AdmissionRequest) {
			r.Resource.Resource, r.Operation, r.Object.Raw = "resourceclaimtemplates", admissionv1.Create, tmplJSON
		})},
		{name: "update, spec unchanged (a finalizer goes)", allowed: true, req: with(claims, func(r *admissionv1.AdmissionRequest) {
			r.Operation, r.Object.Raw, r.OldObject.Raw = admissionv1.Update, claimJSON(t, bad), claimJSON(t, bad)
		})},
		{name: "update to a bad spec", req: with(claims, func(r *admissionv1.AdmissionRequest) {
			r.Operation, r.Object.Raw, r.OldObject.Raw = admissionv1.Update, claimJSON(t, bad), claimJSON(t, good)
		})},
		{name: "delete", allowed: true, req: with(claims, func(r *admissionv1.AdmissionRequest) {
			r.Operation, r.OldObject.Raw = admissionv1.Delete, claimJSON(t, bad)
		})},
		{name: "another version", allowed: true, wantWarning: true, req: with(claims, func(r *admissionv1.AdmissionRequest) {
			r.Resource.Version, r.Operation, r.Object.Raw = "v1beta2", admissionv1.Create, claimJSON(t, bad)
		})},
		{name: "not a claim", allowed: true, wantWarning: true, req: with(claims, func(r *admissionv1.AdmissionRequest) {
			r.Operation, r.Object.Raw = admissionv1.Create, []byte(`[]`)
		})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := v.Review(context.Background(), tc.req)
			if resp.UID != tc.req.UID || resp.Allowed != tc.allowed || (len(resp.Warnings) > 0) != tc.wantWarning {
				t.Fatalf("response %+v: want UID %s, allowed %v, a warning %v", resp, tc.req.UID, tc.allowed, tc.wantWarning)
			}
			if !tc.allowed && (resp.Result == nil || resp.Result.Code != http.StatusUnprocessableEntity ||
				resp.Result.Message != `invalid opaque device configuration: request "gpu": GpuConfig (gpu.example.com/v1): interval "Huge": want Short or Long`) {
				t.Errorf("refusal %+v: want 422 with prepare's message", resp.Result)
			}
		})
	}
}

func TestServeHTTP(t *testing.T) {
	srv := httptest.NewServer(testValidator(t))
	defer srv.Close()
	review := admissionv1.AdmissionReview{TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{UID: "abc", Operation: admissionv1.Create,
			Resource: metav1.GroupVersionResource{Group: "resource.k8s.io", Version: "v1", Resource: "resourceclaims"},
			Object:   runtime.RawExtension{Raw: claimJSON(t, opaque(testDriver, `{"apiVersion":"gpu.example.com/v1","kind":"GpuConfig","x":1}`))}}}
	body, _ := json.Marshal(review)
	resp, err := http.Post(srv.URL, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out admissionv1.AdmissionReview
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	if out.Kind != "AdmissionReview" || out.Response == nil || out.Response.UID != "abc" || out.Response.Allowed || !strings.Contains(out.Response.Result.Message, `unknown field "x"`) {
		t.Errorf("answer %+v", out)
	}
	for name, body := range map[string]string{"not JSON": "{", "no request": `{"kind":"AdmissionReview"}`} {
		resp, err := http.Post(srv.URL, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("%s: status %d, want 400", name, resp.StatusCode)
		}
	}
	resp, err = http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET: status %d, want 405", resp.StatusCode)
	}
}
