package drivertest

import (
	"context"
	"errors"
	"fmt"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// Device is one device to allocate to a claim.
type Device struct {
	// Request names the claim request; "req/sub" makes the request a
	// firstAvailable list whose subrequest sub was chosen. Default
	// "req-<index>".
	Request string
	Pool    string
	Device  string
	// AdminAccess requests admin access for the request.
	AdminAccess bool
	// ShareID, when set, makes the allocation a share of a device that
	// allows multiple allocations (consumable capacity), with
	// ConsumedCapacity what the share took (the bare capacity name for
	// the driver's own domain).
	ShareID          types.UID
	ConsumedCapacity map[string]string
}

// ClaimSpec is an allocated claim to create.
type ClaimSpec struct {
	Namespace, Name string
	Driver          string
	// DeviceClass is the class name put into the requests (it need not
	// exist: nothing allocates these claims but the caller). Default
	// "drivertest".
	DeviceClass string
	Devices     []Device
}

// CreateAllocatedClaim creates a ResourceClaim with one request per device
// and writes its status.allocation as the scheduler would, so that a
// driver's kubelet plugin helper accepts it. It returns the claim as
// stored.
func CreateAllocatedClaim(ctx context.Context, client kubernetes.Interface, spec ClaimSpec) (*resourceapi.ResourceClaim, error) {
	if spec.Namespace == "" || spec.Name == "" || spec.Driver == "" {
		return nil, errors.New("create allocated claim: namespace, name and driver must be set")
	}
	class := spec.DeviceClass
	if class == "" {
		class = "drivertest"
	}
	claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: spec.Namespace, Name: spec.Name}}
	alloc := &resourceapi.AllocationResult{}
	seen := map[string]int{}
	for i, d := range spec.Devices {
		req := d.Request
		if req == "" {
			req = fmt.Sprintf("req-%d", i)
		}
		base, sub := req, ""
		for j := range req {
			if req[j] == '/' {
				base, sub = req[:j], req[j+1:]
				break
			}
		}
		if _, ok := seen[base]; !ok {
			seen[base] = len(claim.Spec.Devices.Requests)
			r := resourceapi.DeviceRequest{Name: base}
			if sub != "" {
				r.FirstAvailable = []resourceapi.DeviceSubRequest{{Name: sub, DeviceClassName: class, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1}}
			} else {
				r.Exactly = &resourceapi.ExactDeviceRequest{DeviceClassName: class, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1}
				if d.AdminAccess {
					t := true
					r.Exactly.AdminAccess = &t
				}
			}
			claim.Spec.Devices.Requests = append(claim.Spec.Devices.Requests, r)
		} else {
			r := &claim.Spec.Devices.Requests[seen[base]]
			if r.Exactly != nil {
				r.Exactly.Count++
			} else {
				r.FirstAvailable[0].Count++
			}
		}
		res := resourceapi.DeviceRequestAllocationResult{Request: req, Driver: spec.Driver, Pool: d.Pool, Device: d.Device}
		if d.AdminAccess {
			t := true
			res.AdminAccess = &t
		}
		if d.ShareID != "" {
			id := d.ShareID
			res.ShareID = &id
		}
		for name, v := range d.ConsumedCapacity {
			q, err := resource.ParseQuantity(v)
			if err != nil {
				return nil, fmt.Errorf("create allocated claim %s/%s: consumed capacity %s: %w",
					spec.Namespace, spec.Name, name, err)
			}
			if res.ConsumedCapacity == nil {
				res.ConsumedCapacity = map[resourceapi.QualifiedName]resource.Quantity{}
			}
			res.ConsumedCapacity[resourceapi.QualifiedName(name)] = q
		}
		alloc.Devices.Results = append(alloc.Devices.Results, res)
	}
	created, err := client.ResourceV1().ResourceClaims(spec.Namespace).Create(ctx, claim, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("create claim %s/%s: %w", spec.Namespace, spec.Name, err)
	}
	created.Status.Allocation = alloc
	updated, err := client.ResourceV1().ResourceClaims(spec.Namespace).UpdateStatus(ctx, created, metav1.UpdateOptions{})
	if err != nil {
		return nil, fmt.Errorf("allocate claim %s/%s: %w", spec.Namespace, spec.Name, err)
	}
	return updated, nil
}
