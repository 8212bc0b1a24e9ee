package allocstate

import (
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/utils/ptr"
)

func TestAdd(t *testing.T) {
	share := types.UID("11111111-2222-3333-4444-555555555555")
	results := []resourceapi.DeviceRequestAllocationResult{
		{Driver: "d", Pool: "p", Device: "whole"},
		{Driver: "d", Pool: "p", Device: "admin", AdminAccess: ptr.To(true)},
		{Driver: "d", Pool: "p", Device: "shared", ShareID: &share},
	}
	st := New()
	var held []structured.DeviceID
	Add(st, results, func(id structured.DeviceID) { held = append(held, id) })

	whole := structured.MakeDeviceID("d", "p", "whole")
	admin := structured.MakeDeviceID("d", "p", "admin")
	shared := structured.MakeDeviceID("d", "p", "shared")
	if !st.AllocatedDevices.Has(whole) || st.AllocatedDevices.Len() != 1 {
		t.Errorf("exclusive devices = %v, want only %v", st.AllocatedDevices.UnsortedList(), whole)
	}
	if !st.AllocatedSharedDeviceIDs.Has(structured.MakeSharedDeviceID(shared, &share)) || st.AllocatedSharedDeviceIDs.Len() != 1 {
		t.Errorf("shared devices = %v, want only the share of %v", st.AllocatedSharedDeviceIDs.UnsortedList(), shared)
	}
	if len(held) != 2 || held[0] != whole || held[1] != shared {
		t.Errorf("held = %v, want [%v %v] (admin access %v holds nothing)", held, whole, shared, admin)
	}
}
