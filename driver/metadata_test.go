package driver_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/utils/ptr"

	"github.com/drakit/drakit/device"
	"github.com/drakit/drakit/driver"
	"github.com/drakit/drakit/driver/drivertest"
	"github.com/drakit/drakit/driver/internal/fakehw"
)

// metadataHW is the fake hardware with device metadata: a serial number
// known only once the device is prepared.
type metadataHW struct{ *fakehw.HW }

func (h metadataHW) PrepareDevice(ctx context.Context, claim driver.Claim, dev driver.AllocatedDevice) (driver.PreparedDevice, error) {
	out, err := h.HW.PrepareDevice(ctx, claim, dev)
	if err != nil {
		return out, err
	}
	out.Metadata = &driver.DeviceMetadata{Attributes: map[string]resourceapi.DeviceAttribute{
		"serial": {StringValue: ptr.To("sn-" + dev.Device)},
	}}
	return out, nil
}

// TestDeviceMetadata: with WithDeviceMetadata, the metadata a preparer
// returns reaches the file the helper mounts into containers, through a
// CDI ID in the prepare result; it survives a restart (a repeated prepare
// returns the same) and is gone after unprepare.
func TestDeviceMetadata(t *testing.T) {
	c, ctx, ns, d, fake := setupE2E(t)
	hw := metadataHW{fake}
	disc := device.StaticDiscoverer{Inv: testInventory(1)}
	r := startDriver(ctx, t, c, d, disc, hw.HW, driver.WithPreparer(hw), driver.WithDeviceMetadata())
	claim := createClaim(ctx, t, c, ns, "meta", drivertest.Device{Request: "gpu", Device: "dev-0"})
	k, err := drivertest.Dial(d.draSocket())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { k.Close() }()
	first, err := k.Prepare(ctx, claim)
	if err != nil {
		t.Fatal(err)
	}
	res := first[string(claim.UID)]
	if res.GetError() != "" || len(res.GetDevices()) != 1 {
		t.Fatalf("prepare: %v", res)
	}
	metaID := testDriver + "/metadata=" + string(claim.UID) + "_gpu"
	if ids := res.GetDevices()[0].GetCdiDeviceIds(); !slices.Contains(ids, metaID) {
		t.Errorf("CDI IDs %v lack the metadata device %s", ids, metaID)
	}
	file := filepath.Join(d.PluginData, "dra-device-metadata", ns+"_meta", "gpu", "metadata.json")
	serialIn := func() string {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatalf("metadata file: %v", err)
		}
		// A JSON stream, newest version first; the first object is enough.
		var obj struct {
			Requests []struct {
				Devices []struct {
					Name       string `json:"name"`
					Attributes map[string]struct {
						String *string `json:"string"`
					} `json:"attributes"`
				} `json:"devices"`
			} `json:"requests"`
		}
		if err := json.NewDecoder(strings.NewReader(string(data))).Decode(&obj); err != nil {
			t.Fatalf("decode %s: %v\n%s", file, err, data)
		}
		for _, rq := range obj.Requests {
			for _, dev := range rq.Devices {
				if a, ok := dev.Attributes["serial"]; ok && a.String != nil {
					return *a.String
				}
			}
		}
		t.Fatalf("no serial attribute in %s:\n%s", file, data)
		return ""
	}
	if got := serialIn(); got != "sn-dev-0" {
		t.Errorf("serial in the metadata file = %q, want sn-dev-0", got)
	}

	// After a restart the result, metadata included, comes from the
	// checkpoint.
	r.stop(t)
	startDriver(ctx, t, c, d, disc, hw.HW, driver.WithPreparer(hw), driver.WithDeviceMetadata())
	// A new connection, as the kubelet makes when the plugin registers
	// again: the old one ended with the first process (reusing it made
	// the first call fail with Unavailable when the restart was quick).
	k.Close()
	if k, err = drivertest.Dial(d.draSocket()); err != nil {
		t.Fatal(err)
	}
	again, err := k.Prepare(ctx, claim)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(res.String(), again[string(claim.UID)].String()); diff != "" {
		t.Errorf("prepare after restart differs:\n%s", diff)
	}
	if got := serialIn(); got != "sn-dev-0" {
		t.Errorf("serial after restart = %q, want sn-dev-0", got)
	}

	if err := k.Unprepare(ctx, claim); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(file); !os.IsNotExist(err) {
		t.Errorf("metadata file still there after unprepare: %v", err)
	}
	if n := d.specCount(t); n != 0 {
		t.Errorf("%d CDI specs left after unprepare", n)
	}
}
