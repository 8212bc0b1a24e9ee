package driver_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"k8s.io/client-go/rest"

	"github.com/drakit/drakit/cdi"
	"github.com/drakit/drakit/device"
	"github.com/drakit/drakit/driver"
)

// envPreparer gives each container an environment variable naming its
// device.
type envPreparer struct{}

func (envPreparer) PrepareDevice(_ context.Context, _ driver.Claim, dev driver.AllocatedDevice) (driver.PreparedDevice, error) {
	return driver.PreparedDevice{Edits: (&cdi.Edits{}).Env("EXAMPLE_DEVICE", dev.Device)}, nil
}

func (envPreparer) UnprepareDevice(context.Context, driver.ClaimRef, driver.AllocatedDevice, json.RawMessage) error {
	return nil
}

func Example() {
	inv := &device.Inventory{Driver: "gpu.example.com", Pools: []device.Pool{{
		Name:    "node-1",
		Devices: []*device.Device{device.New("gpu-0"), device.New("gpu-1")},
	}}}
	d, err := driver.New("gpu.example.com",
		driver.WithDiscoverer(device.StaticDiscoverer{Inv: inv}),
		driver.WithPreparer(envPreparer{}),
		driver.WithRESTConfig(&rest.Config{Host: "https://127.0.0.1:6443"}),
		driver.WithNodeName("node-1"),
		driver.WithHTTPAddress(":8080"))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(d.Name(), d.DRASocket())
	// A real driver now calls d.Run(ctx).

	// Output: gpu.example.com /var/lib/kubelet/plugins/gpu.example.com/dra.sock
}

func ExampleNew_missingOption() {
	_, err := driver.New("gpu.example.com", driver.WithPreparer(envPreparer{}))
	fmt.Println(err)
	// Output: new driver gpu.example.com: WithDiscoverer is required
}

func ExampleDecodeConfig() {
	dev := driver.AllocatedDevice{Request: "gpu", Config: []driver.OpaqueConfig{
		{FromClass: true, Parameters: json.RawMessage(`{"sharing":"none","timeSlice":10}`)},
		{Parameters: json.RawMessage(`{"sharing":"timeSliced"}`)},
	}}
	var cfg struct {
		Sharing   string `json:"sharing"`
		TimeSlice int    `json:"timeSlice"`
	}
	if err := driver.DecodeConfig(dev, &cfg); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(cfg.Sharing, cfg.TimeSlice)

	dev.Config = append(dev.Config, driver.OpaqueConfig{Parameters: json.RawMessage(`{"sharng":"x"}`)})
	fmt.Println(driver.DecodeConfig(dev, &cfg))
	// Output:
	// timeSliced 10
	// invalid opaque device configuration: request "gpu": claim config #2: json: unknown field "sharng"
}

// libsPreparer is envPreparer whose claims also get the vendor's user-space
// libraries, mounted once per container however many devices it gets.
type libsPreparer struct{ envPreparer }

func (libsPreparer) ClaimEdits(_ context.Context, claim driver.Claim, devs []driver.AllocatedDevice) (*cdi.Edits, error) {
	return (&cdi.Edits{}).
		Mount("/usr/lib/example-driver", "/usr/local/example/lib", "ro", "nosuid", "nodev", "bind").
		Env("EXAMPLE_DEVICE_COUNT", fmt.Sprint(len(devs))), nil
}

func ExampleClaimEditor() {
	var p driver.Preparer = libsPreparer{}
	_, ok := p.(driver.ClaimEditor)
	fmt.Println("claim-wide edits:", ok)
	// Output: claim-wide edits: true
}

// A second driver on the folders of a running one stops at once, before
// it reads or changes anything, and says who holds them.
func ExampleErrFoldersInUse() {
	dir, err := os.MkdirTemp("", "ex")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	newDriver := func() *driver.Runtime {
		d, err := driver.New("gpu.example.com",
			driver.WithDiscoverer(device.StaticDiscoverer{Inv: &device.Inventory{Driver: "gpu.example.com", Pools: []device.Pool{{Name: "node-1", Devices: []*device.Device{device.New("gpu-0")}}}}}),
			driver.WithPreparer(envPreparer{}),
			// No API server is needed to serve the kubelet.
			driver.WithRESTConfig(&rest.Config{Host: "https://127.0.0.1:1"}),
			driver.WithNodeName("node-1"),
			driver.WithPluginDataDir(filepath.Join(dir, "plugin")),
			driver.WithRegistrarDir(filepath.Join(dir, "registry")),
			driver.WithCDIDir(filepath.Join(dir, "cdi")))
		if err != nil {
			panic(err)
		}
		return d
	}
	ctx, cancel := context.WithCancel(context.Background())
	first := newDriver()
	done := make(chan error, 1)
	go func() { done <- first.Run(ctx) }()
	<-first.Ready()

	err = newDriver().Run(context.Background())
	fmt.Println("second driver refused:", errors.Is(err, driver.ErrFoldersInUse))
	cancel()
	fmt.Println("first driver stopped:", <-done)
	// Output:
	// second driver refused: true
	// first driver stopped: <nil>
}

// The per-claim CDI devices can have a kind of the vendor's own.
func ExampleWithCDIKind() {
	for _, kind := range []string{"acme.example.com/fpga", "acme.example.com"} {
		_, err := driver.New("fpga.acme.example.com",
			driver.WithDiscoverer(device.StaticDiscoverer{Inv: &device.Inventory{Driver: "fpga.acme.example.com"}}),
			driver.WithPreparer(envPreparer{}),
			driver.WithRESTConfig(&rest.Config{Host: "https://127.0.0.1:6443"}),
			driver.WithNodeName("node-1"),
			driver.WithCDIKind(kind))
		fmt.Printf("%s: %v\n", kind, err)
	}
	// Output:
	// acme.example.com/fpga: <nil>
	// acme.example.com: new driver fpga.acme.example.com: WithCDIKind: CDI kind "acme.example.com": must be <vendor>/<class>: invalid name
}

// A program with a Prometheus registry of its own puts the driver's
// metrics into it; its Go and process collectors stay its own.
func ExampleWithRegisterer() {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector())
	_, err := driver.New("gpu.example.com",
		driver.WithDiscoverer(device.StaticDiscoverer{Inv: &device.Inventory{}}),
		driver.WithPreparer(envPreparer{}),
		driver.WithRESTConfig(&rest.Config{Host: "https://127.0.0.1:6443"}),
		driver.WithNodeName("node-1"),
		driver.WithRegisterer(reg))
	if err != nil {
		fmt.Println(err)
		return
	}
	mfs, err := reg.Gather()
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, mf := range mfs {
		if strings.HasPrefix(mf.GetName(), "drakit_driver_prepared") {
			fmt.Println(mf.GetName())
		}
	}
	// Output: drakit_driver_prepared_claims
}

// The kubelet plugin helper's knobs are typed options; the runtime states
// every other helper setting itself.
func ExampleWithKubeletAPIVersions() {
	_, err := driver.New("gpu.example.com",
		driver.WithDiscoverer(device.StaticDiscoverer{Inv: &device.Inventory{}}),
		driver.WithPreparer(envPreparer{}),
		driver.WithRESTConfig(&rest.Config{Host: "https://127.0.0.1:6443"}),
		driver.WithNodeName("node-1"),
		driver.WithGRPCVerbosity(4),
		driver.WithKubeletAPIVersions(true, false), // kubelets 1.34 and newer only
		driver.WithHealthService(true, true, false))
	fmt.Println(err)
	// Output: <nil>
}
