// Package allocstate builds the structured allocator's view of devices
// that claims already hold, the way kube-scheduler's DRA plugin does, for
// the programs in this module that play the scheduler (the conformance
// suite, drakit explain).
package allocstate

import (
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/structured"
)

// New returns an empty AllocatedState with every set ready for Add.
func New() structured.AllocatedState {
	return structured.AllocatedState{
		AllocatedDevices:         sets.New[structured.DeviceID](),
		AllocatedSharedDeviceIDs: sets.New[structured.SharedDeviceID](),
		AggregatedCapacity:       structured.NewConsumedCapacityCollection(),
	}
}

// Add records one claim's allocation results in st: a result with admin
// access holds nothing; a result with a share ID holds that share and its
// consumed capacity; any other result holds its device exclusively. held,
// if not nil, is called with the device of every result that holds
// something (shares included). st must come from New.
func Add(st structured.AllocatedState, results []resourceapi.DeviceRequestAllocationResult, held func(structured.DeviceID)) {
	for _, r := range results {
		if r.AdminAccess != nil && *r.AdminAccess {
			continue
		}
		id := structured.MakeDeviceID(r.Driver, r.Pool, r.Device)
		if held != nil {
			held(id)
		}
		if r.ShareID != nil {
			st.AllocatedSharedDeviceIDs.Insert(structured.MakeSharedDeviceID(id, r.ShareID))
			if r.ConsumedCapacity != nil {
				st.AggregatedCapacity.Insert(structured.NewDeviceConsumedCapacity(id, r.ConsumedCapacity))
			}
			continue
		}
		st.AllocatedDevices.Insert(id)
	}
}
