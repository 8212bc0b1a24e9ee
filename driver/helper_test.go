package driver_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"k8s.io/client-go/rest"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/drakit/drakit/device"
	"github.com/drakit/drakit/driver"
	"github.com/drakit/drakit/driver/drivertest"
)

// vendorHelperKnobs are the kubeletplugin options a vendor may set, each
// through a typed drakit option; the runtime states every other one.
var vendorHelperKnobs = map[string]string{
	"GRPCVerbosity":         "WithGRPCVerbosity",
	"GRPCInterceptor":       "WithGRPCInterceptor",
	"GRPCStreamInterceptor": "WithGRPCStreamInterceptor",
	"NodeV1":                "WithKubeletAPIVersions",
	"NodeV1beta1":           "WithKubeletAPIVersions",
	"HealthService":         "WithHealthService",
	"HealthV1":              "WithHealthService",
	"HealthV1alpha1":        "WithHealthService",
}

// TestHelperOptionsCovered reads the kubeletplugin package's source and
// fails for any function returning an Option that is neither a vendor
// knob with a typed drakit option nor stated by the runtime after the
// vendor's options: a new kubeletplugin option must be classified when
// the library is bumped (before, options were policed by the names the
// compiler gives closures, which let ReconcilePoolWithName and
// RegistrationService(false) through).
func TestHelperOptionsCovered(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", "{{.Dir}}", "k8s.io/dynamic-resource-allocation/kubeletplugin").Output()
	if err != nil {
		t.Fatalf("go list kubeletplugin: %v", err)
	}
	dir := strings.TrimSpace(string(out))
	pkgs, err := parser.ParseDir(token.NewFileSet(), dir, func(fi fs.FileInfo) bool {
		return !strings.HasSuffix(fi.Name(), "_test.go")
	}, 0)
	if err != nil {
		t.Fatal(err)
	}
	var options []string
	for _, f := range pkgs["kubeletplugin"].Files {
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Recv != nil || !fn.Name.IsExported() || fn.Type.Results == nil || len(fn.Type.Results.List) != 1 {
				continue
			}
			if id, ok := fn.Type.Results.List[0].Type.(*ast.Ident); ok && id.Name == "Option" {
				options = append(options, fn.Name.Name)
			}
		}
	}
	if len(options) < 20 {
		t.Fatalf("found only %d kubeletplugin options (%v): is the parse right?", len(options), options)
	}
	d, err := driver.New(testDriver, driver.WithDiscoverer(device.StaticDiscoverer{Inv: testInventory(1)}),
		driver.WithPreparer(envPreparer{}), driver.WithRESTConfig(&rest.Config{Host: "https://127.0.0.1:1"}), driver.WithNodeName(testNode))
	if err != nil {
		t.Fatal(err)
	}
	stated := driver.RuntimeHelperOptionNames(d)
	for _, name := range options {
		_, knob := vendorHelperKnobs[name]
		runtime := slices.Contains(stated, name)
		switch {
		case knob && runtime:
			t.Errorf("kubeletplugin.%s is both a vendor knob and stated by the runtime", name)
		case !knob && !runtime:
			t.Errorf("kubeletplugin.%s is neither a vendor knob nor stated by the runtime: classify it", name)
		}
	}
	for _, name := range stated {
		if !slices.Contains(options, name) {
			t.Errorf("the runtime states kubeletplugin.%s, which the package does not have", name)
		}
	}
}

// TestHelperOptionsCannotBreakRuntime: kubeletplugin options passed
// through the deprecated WithHelperOptions cannot change what the runtime
// relies on: with ReconcilePoolWithName (which drops spec.nodeName),
// RegistrationService(false), DRAService(false) and another socket name,
// the driver still publishes node-local slices and serves prepare on its
// socket. (Before, ReconcilePoolWithName and RegistrationService passed
// the name-based policing and broke the driver.)
func TestHelperOptionsCannotBreakRuntime(t *testing.T) {
	c, ctx, ns, d, hw := setupE2E(t)
	startDriver(ctx, t, c, d, device.StaticDiscoverer{Inv: testInventory(2)}, hw,
		driver.WithHelperOptions(kubeletplugin.ReconcilePoolWithName("elsewhere"), kubeletplugin.RegistrationService(false),
			kubeletplugin.DRAService(false), kubeletplugin.PluginSocket("other.sock"), kubeletplugin.Serialize(true)))
	waitForDevices(ctx, t, c, 2)
	slices, err := slicesOfNode(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range slices {
		if s.Spec.NodeName == nil || *s.Spec.NodeName != testNode {
			t.Errorf("slice %s: nodeName %v, want %s", s.Name, s.Spec.NodeName, testNode)
		}
	}
	k, err := drivertest.Dial(d.draSocket())
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	claim := createClaim(ctx, t, c, ns, "helper-options", drivertest.Device{Device: "dev-0"})
	if _, err := k.Prepare(ctx, claim); err != nil {
		t.Fatalf("prepare: %v", err)
	}
	if err := k.Unprepare(ctx, claim); err != nil {
		t.Fatal(err)
	}
}
