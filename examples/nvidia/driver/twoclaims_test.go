package driver

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	oci "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/drakit/drakit/cdi"
	kit "github.com/drakit/drakit/driver"
)

// nullNodeEditor gives each device one device node that a CDI runtime
// can inject on a host without GPUs (/dev/null at a path named by the
// device's UUID), and no common edits.
type nullNodeEditor struct{}

func (nullNodeEditor) DeviceEdits(dev ContainerDevice) (*cdi.Edits, error) {
	return (&cdi.Edits{}).DeviceNode(
		cdi.DeviceNode{Path: "/dev/drakit-test/" + dev.UUID, HostPath: "/dev/null"},
	), nil
}

func (nullNodeEditor) CommonEdits() (*cdi.Edits, error) { return nil, nil }

// container is what a container got from CDI devices: its environment
// (one value per variable, as a runtime leaves it), mounts by container
// path and device node paths.
type container struct {
	env    map[string]string
	mounts map[string]string
	nodes  map[string]bool
}

// inject applies the CDI devices ids of the specs in dir to a new
// container with the real CDI library, as a container runtime does.
func inject(t *testing.T, dir string, ids []string) container {
	t.Helper()
	spec := &oci.Spec{Process: &oci.Process{}}
	if err := cdi.Inject(spec, []string{dir}, ids...); err != nil {
		t.Fatal(err)
	}
	c := container{env: map[string]string{}, mounts: map[string]string{}, nodes: map[string]bool{}}
	for _, kv := range spec.Process.Env {
		k, v, _ := strings.Cut(kv, "=")
		if _, dup := c.env[k]; dup {
			t.Fatalf("the container's environment has %s twice: %v", k, spec.Process.Env)
		}
		c.env[k] = v
	}
	for _, m := range spec.Mounts {
		c.mounts[m.Destination] = m.Source
	}
	if spec.Linux != nil {
		for _, n := range spec.Linux.Devices {
			c.nodes[n.Path] = true
		}
	}
	return c
}

// A container with two claims sees every device of both: every variable,
// mount and device node that each claim gives a container alone, with the
// same value, and every device's UUID. Each claim is prepared on its own
// and gets its own CDI spec, as the runtime writes it; the real CDI
// library injects both into one container. NVIDIA_VISIBLE_DEVICES is
// "void" in both (the devices come from CDI, not from the legacy hook).
func TestTwoClaimsInOneContainer(t *testing.T) {
	for _, real := range []bool{false, true} {
		name := "simulated"
		opts := []Option{}
		if real {
			name = "real"
			opts = append(
				opts,
				WithSimulatedContainers(false),
				WithContainerEditor(nullNodeEditor{}),
			)
		}
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			f := newFixture(t, opts...)
			if _, err := f.d.Inventory(ctx); err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			w, err := cdi.NewWriter(dir, DriverName, "claim")
			if err != nil {
				t.Fatal(err)
			}
			claims := []struct {
				claim kit.Claim
				devs  []kit.AllocatedDevice
				ids   []string
			}{
				{claim: claim("a"), devs: []kit.AllocatedDevice{alloc("gpu-0")}},
				// A static MIG device, and a dynamic one whose UUID is
				// born at prepare.
				{
					claim: claim("b"),
					devs: []kit.AllocatedDevice{
						alloc("gpu-2-3g-71gb-4"),
						alloc("gpu-5-1g-18gb-3"),
					},
				},
			}
			claims[1].devs[1].Request = "mig"
			var all []string
			uuids := map[string]string{} // env name -> UUID
			for i, c := range claims {
				if err := f.d.PrepareClaim(ctx, c.claim, c.devs); err != nil {
					t.Fatal(err)
				}
				cc := cdi.Claim{UID: c.claim.UID, Namespace: c.claim.Namespace, Name: c.claim.Name}
				for _, dev := range c.devs {
					pd, err := f.d.PrepareDevice(ctx, c.claim, dev)
					if err != nil {
						t.Fatal(err)
					}
					cc.Devices = append(cc.Devices, cdi.Device{Name: dev.Device, Edits: pd.Edits})
					var data preparedData
					if err := json.Unmarshal(pd.Data, &data); err != nil {
						t.Fatal(err)
					}
					uuids[EnvDevicePrefix+envSuffix(dev.Device)] = data.UUID
				}
				if cc.Common, err = f.d.ClaimEdits(ctx, c.claim, c.devs); err != nil {
					t.Fatal(err)
				}
				if claims[i].ids, err = w.Write(ctx, cc); err != nil {
					t.Fatal(err)
				}
				all = append(all, claims[i].ids...)
			}

			both := inject(t, dir, all)
			for _, c := range claims {
				alone := inject(t, dir, c.ids)
				for k, v := range alone.env {
					if got, ok := both.env[k]; !ok || got != v {
						t.Errorf(
							"claim %s alone gives its container %s=%s; with both claims the "+
								"container has %s=%q",
							c.claim.Name,
							k,
							v,
							k,
							got,
						)
					}
				}
				for dst, src := range alone.mounts {
					if both.mounts[dst] != src {
						t.Errorf(
							"claim %s alone mounts %s at %s; with both claims the container has "+
								"%q there",
							c.claim.Name,
							src,
							dst,
							both.mounts[dst],
						)
					}
				}
				for n := range alone.nodes {
					if !both.nodes[n] {
						t.Errorf(
							"claim %s alone gives its container device node %s; with both claims "+
								"the container lacks it",
							c.claim.Name,
							n,
						)
					}
				}
			}
			for k, u := range uuids {
				if u == "" || both.env[k] != u {
					t.Errorf(
						"the container with both claims has %s=%q, want the device's UUID %q",
						k,
						both.env[k],
						u,
					)
				}
				if real && !both.nodes["/dev/drakit-test/"+u] {
					t.Errorf(
						"the container with both claims lacks the device node of %s (%s)",
						k,
						u,
					)
				}
			}
			if v := both.env[EnvVisibleDevices]; v != VisibleDevicesVoid {
				t.Errorf(
					"the container has %s=%q, want %q: the devices come from CDI",
					EnvVisibleDevices,
					v,
					VisibleDevicesVoid,
				)
			}
			// Both claims' devices files, in the folder the
			// environment names, each naming its claim.
			for _, c := range claims {
				in := filepath.Join(
					both.env[EnvClaimFileDir],
					c.claim.Namespace+"_"+c.claim.Name+".json",
				)
				b, err := os.ReadFile(both.mounts[in])
				if err != nil {
					t.Errorf(
						"claim %s's devices file at %s in the container: %v",
						c.claim.Name,
						in,
						err,
					)
					continue
				}
				var file ClaimFile
				if err := json.Unmarshal(b, &file); err != nil || file.UID != string(c.claim.UID) ||
					len(file.Devices) != len(c.devs) {
					t.Errorf("claim %s's devices file at %s: %s (%v)", c.claim.Name, in, b, err)
				}
			}
		})
	}
}
