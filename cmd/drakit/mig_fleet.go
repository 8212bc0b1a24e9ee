package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"k8s.io/apimachinery/pkg/types"

	"github.com/drakit/drakit/device"
	kit "github.com/drakit/drakit/driver"
	nvdriver "github.com/drakit/drakit/examples/nvidia/driver"
	"github.com/drakit/drakit/examples/nvidia/nvml/nvmlsim"
	"github.com/drakit/drakit/mig"
	"github.com/drakit/drakit/mig/bench"
)

// shippedFleetModel is the fleet benchmark's row for the reference
// driver's own slices as shipped: for each node state, the driver with its
// default options on a simulated server of the product, every GPU
// dynamic, the state's in-use instances made through the driver's own
// prepare, and its Inventory published as it is.
func shippedFleetModel(p *mig.Product) (bench.FleetModel, error) {
	server := ""
	for _, s := range nvmlsim.Servers() {
		if s.Product == p.Name {
			server = s.Name
		}
	}
	if server == "" {
		return bench.FleetModel{}, fmt.Errorf("the NVML simulator has no server of %s GPUs", p.Name)
	}
	return bench.FleetModel{
		Name:            "nvidia driver as shipped",
		ClassPerProfile: true,
		Publish: func(p *mig.Product, name string, st []mig.FleetGPU) (*device.Inventory, error) {
			return shippedInventory(server, name, st)
		},
	}, nil
}

// shippedInventory runs the reference driver on a fresh simulated server
// with every GPU in MIG mode, prepares one claim for st's in-use
// instances, and returns the driver's inventory.
func shippedInventory(server, node string, st []mig.FleetGPU) (*device.Inventory, error) {
	dir, err := os.MkdirTemp("", "drakit-fleet-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	sim, err := nvmlsim.Open(filepath.Join(dir, "gpus.json"), nvmlsim.WithServer(server), nvmlsim.WithMIGEnabled(true))
	if err != nil {
		return nil, err
	}
	defer sim.Close()
	dynamic, err := allGPUs(sim)
	if err != nil {
		return nil, err
	}
	d, err := nvdriver.New(sim, node, nvdriver.WithStateDir(filepath.Join(dir, "state")), nvdriver.WithDynamicGPUs(dynamic...))
	if err != nil {
		return nil, err
	}
	ctx := context.Background()
	inv, err := d.Inventory(ctx)
	if err != nil {
		return nil, err
	}
	pool := map[string]string{}
	for _, pl := range inv.Pools {
		for _, dev := range pl.Devices {
			pool[dev.Name()] = pl.Name
		}
	}
	var devs []kit.AllocatedDevice
	for _, f := range st {
		for _, in := range f.Layout {
			if !in.InUse {
				continue
			}
			name := mig.DeviceRef{GPU: f.Index, Profile: in.Profile, Start: in.Start}.String()
			devs = append(devs, kit.AllocatedDevice{Request: fmt.Sprintf("r%d", len(devs)), Pool: pool[name], Device: name})
		}
	}
	if len(devs) > 0 {
		claim := kit.Claim{ClaimRef: kit.ClaimRef{UID: types.UID("fleet-" + node), Namespace: "default", Name: "fleet"}}
		if err := d.PrepareClaim(ctx, claim, devs); err != nil {
			return nil, fmt.Errorf("make the in-use MIG devices: %w", err)
		}
	}
	return d.Inventory(ctx)
}

// allGPUs names every GPU of the simulator by index: the dynamic MIG GPUs
// of a node whose GPUs are all dynamic (-dynamic-mig-gpus).
func allGPUs(sim *nvmlsim.Sim) ([]string, error) {
	gpus, err := sim.GPUs()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, g := range gpus {
		out = append(out, fmt.Sprint(g.Index))
	}
	return out, nil
}
