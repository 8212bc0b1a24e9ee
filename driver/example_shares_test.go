package driver_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"

	"github.com/drakit/drakit/cdi"
	"github.com/drakit/drakit/device"
	"github.com/drakit/drakit/driver"
)

// sharePreparer prepares shares of a shareable device: each share's
// container gets its memory in a variable named after the share, so that
// two shares in one container keep both values.
type sharePreparer struct{ shares *device.Shares }

func (p sharePreparer) PrepareDevice(_ context.Context, _ driver.Claim,
	dev driver.AllocatedDevice) (driver.PreparedDevice, error) {
	sh, err := p.shares.Of(dev.ConsumedCapacity)
	if err != nil {
		return driver.PreparedDevice{}, err
	}
	mem := sh["memory"]
	name := strings.ToUpper(strings.ReplaceAll(dev.ShareName(), "-", "_"))
	return driver.PreparedDevice{Edits: (&cdi.Edits{}).Env("EXAMPLE_MEMORY_"+name,
		mem.String())}, nil
}

func (sharePreparer) UnprepareDevice(context.Context, driver.ClaimRef, driver.AllocatedDevice,
	json.RawMessage) error {
	return nil
}

// A preparer of shares reads each share's amounts from its consumed
// capacity (the model's default where the allocation names none) and
// names what it sets after AllocatedDevice.ShareName.
func ExampleAllocatedDevice_ShareName() {
	gib := resource.MustParse("1Gi")
	shares, err := device.NewShares(device.ShareCapacity{Name: "memory",
		Capacity: resource.MustParse("80Gi"), Default: resource.MustParse("4Gi"),
		Min: &gib, Step: &gib})
	if err != nil {
		panic(err)
	}
	id := types.UID("5d2f6a1b-0c3e-4f7a-9b8d-1e2f3a4b5c6d")
	took := map[resourceapi.QualifiedName]resource.Quantity{"memory": resource.MustParse("12Gi")}
	dev := driver.AllocatedDevice{Request: "model", Pool: "node-1", Device: "gpu-0", ShareID: &id,
		ConsumedCapacity: took}
	out, err := sharePreparer{shares}.PrepareDevice(context.Background(), driver.Claim{}, dev)
	if err != nil {
		panic(err)
	}
	fmt.Println(dev.ShareName())
	fmt.Println(out.Edits.EnvNames())
	// Output:
	// gpu-0-5d2f6a1b-0c3e-4f7a-9b8d-1e2f3a4b5c6d
	// [EXAMPLE_MEMORY_GPU_0_5D2F6A1B_0C3E_4F7A_9B8D_1E2F3A4B5C6D]
}
