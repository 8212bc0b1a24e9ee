package device_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/drakit/drakit/device"
	"github.com/drakit/drakit/internal/cluster/clustertest"
)

var classCases = []struct {
	name    string
	class   device.Class
	wantErr string // "" means valid
}{
	{"plain", device.Class{Name: "gpu.example.com", Driver: "gpu.example.com"}, ""},
	{"selector and extended resource", device.Class{Name: "half.gpu.example.com", Driver: "gpu.example.com",
		Selectors:            []string{`device.attributes["gpu.example.com"].type == "half"`},
		ExtendedResourceName: "example.com/gpu-half"}, ""},
	{"bad name", device.Class{Name: "Half_GPU", Driver: "gpu.example.com"}, "name"},
	{"bad driver", device.Class{Name: "gpu.example.com", Driver: "GPU"}, "driver"},
	{"unqualified extended resource", device.Class{Name: "a.example.com", Driver: "gpu.example.com", ExtendedResourceName: "gpu"}, "extendedResourceName"},
	{"native domain", device.Class{Name: "b.example.com", Driver: "gpu.example.com", ExtendedResourceName: "kubernetes.io/gpu"}, "extendedResourceName"},
	{"requests prefix", device.Class{Name: "c.example.com", Driver: "gpu.example.com", ExtendedResourceName: "requests.example.com/gpu"}, "extendedResourceName"},
	{"plus sign", device.Class{Name: "d.example.com", Driver: "gpu.example.com", ExtendedResourceName: "nvidia.com/mig-1g.18gb+me"}, "extendedResourceName"},
	{"empty selector", device.Class{Name: "e.example.com", Driver: "gpu.example.com", Selectors: []string{" "}}, "selectors[0]"},
}

func TestClass(t *testing.T) {
	for _, tc := range classCases {
		t.Run(tc.name, func(t *testing.T) {
			dc, err := tc.class.DeviceClass()
			if tc.wantErr != "" {
				if !errors.Is(err, device.ErrInvalidClass) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want ErrInvalidClass naming %s", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got, want := dc.Spec.Selectors[0].CEL.Expression, fmt.Sprintf("device.driver == %q", tc.class.Driver); got != want {
				t.Errorf("first selector %q, want %q", got, want)
			}
			if len(dc.Spec.Selectors) != 1+len(tc.class.Selectors) {
				t.Errorf("%d selectors, want %d", len(dc.Spec.Selectors), 1+len(tc.class.Selectors))
			}
			if (dc.Spec.ExtendedResourceName != nil) != (tc.class.ExtendedResourceName != "") {
				t.Errorf("extendedResourceName %v, want %q", dc.Spec.ExtendedResourceName, tc.class.ExtendedResourceName)
			}
		})
	}
}

// TestClassAgainstAPIServer: every class DeviceClass accepts, a real
// kube-apiserver accepts too, and every class it refuses for a name, the
// API server refuses as well (dry run, nothing stored).
func TestClassAgainstAPIServer(t *testing.T) {
	c := clustertest.Start(t)
	ctx := context.Background()
	for _, tc := range classCases {
		switch tc.wantErr {
		case "selectors[0]":
			continue // an empty CEL expression: refused here, compiled there
		case "driver":
			continue // the driver name is a string inside CEL there; a driver's name must be a DNS subdomain (it only warns on case)
		}
		t.Run(tc.name, func(t *testing.T) {
			dc, err := tc.class.DeviceClass()
			if err != nil {
				// Build what the API server would get without the check.
				dc = rawClass(tc.class)
			}
			_, apiErr := c.Client.ResourceV1().DeviceClasses().Create(ctx, dc, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			switch {
			case tc.wantErr == "" && apiErr != nil:
				t.Errorf("DeviceClass accepts it, the API server refuses: %v", apiErr)
			case tc.wantErr != "" && apiErr == nil:
				t.Errorf("DeviceClass refuses it (%v), the API server accepts it", err)
			case tc.wantErr != "" && !apierrors.IsInvalid(apiErr):
				t.Errorf("API server error %v, want Invalid", apiErr)
			}
		})
	}
}

// rawClass is the object Class.DeviceClass would build, without checks.
func rawClass(c device.Class) *resourceapi.DeviceClass {
	ok := device.Class{Name: "x.example.com", Driver: "x.example.com"}
	dc, _ := ok.DeviceClass()
	dc.Name = c.Name
	dc.Spec.Selectors[0].CEL.Expression = fmt.Sprintf("device.driver == %q", c.Driver)
	if c.ExtendedResourceName != "" {
		n := c.ExtendedResourceName
		dc.Spec.ExtendedResourceName = &n
	}
	return dc
}
