package driver

import (
	"reflect"
	"runtime"
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	metadatav1beta1 "k8s.io/dynamic-resource-allocation/api/metadata/v1beta1"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
)

// pluginSocket is the file name of the DRA gRPC socket in the plugin data
// folder. The runtime names it, and tells the helper, so that liveness
// dials the socket the helper serves.
func (d *Driver) pluginSocket() string {
	if d.o.rollingUpdateUID != "" {
		// Two instances share the folder during a rolling update.
		return "dra-" + string(d.o.rollingUpdateUID) + ".sock"
	}
	return "dra.sock"
}

// helperOptions are the kubelet plugin helper's options: every setting
// the runtime relies on is stated here, from drakit's options, then the
// vendor's extra options (which cannot override them, see
// [WithHelperOptions]).
func (d *Driver) helperOptions(client kubernetes.Interface) []kubeletplugin.Option {
	opts := []kubeletplugin.Option{
		kubeletplugin.DriverName(d.name),
		kubeletplugin.KubeClient(client),
		kubeletplugin.NodeName(d.o.nodeName),
		kubeletplugin.RegistrarDirectoryPath(d.o.registrarDir),
		kubeletplugin.PluginDataDirectoryPath(d.o.pluginDataDir),
		kubeletplugin.PluginSocket(d.pluginSocket()),
		kubeletplugin.PluginListener(listenUnix),
		kubeletplugin.RegistrarListener(listenUnix),
		// The runtime serializes calls itself (see enterCall); the
		// helper's lock folder is stated anyway, for a helper that
		// takes a lock without serializing.
		kubeletplugin.Serialize(false),
		kubeletplugin.FlockDirectoryPath(d.o.lockDir),
		kubeletplugin.DRAService(true),
	}
	if d.o.rollingUpdateUID != "" {
		opts = append(opts, kubeletplugin.RollingUpdate(d.o.rollingUpdateUID))
	}
	if d.o.deviceMetadata {
		opts = append(opts,
			kubeletplugin.EnableDeviceMetadata(true, []schema.GroupVersion{metadatav1beta1.SchemeGroupVersion}),
			kubeletplugin.CDIDirectory(d.o.cdiDir))
	}
	return append(opts, d.o.extraHelperOpts...)
}

// ownedHelperOptions are the kubeletplugin functions whose options set
// what the runtime sets itself, each with what to use instead.
var ownedHelperOptions = map[string]string{
	"DriverName":              "the name given to driver.New",
	"KubeClient":              "WithKubeClient or WithRESTConfig",
	"NodeName":                "WithNodeName",
	"RegistrarDirectoryPath":  "WithRegistrarDir",
	"PluginDataDirectoryPath": "WithPluginDataDir",
	"PluginSocket":            "the socket the runtime names (Driver.DRASocket), which liveness checks",
	"PluginListener":          "the runtime's listener (socket mode 0600)",
	"RegistrarListener":       "the runtime's listener (socket mode 0600)",
	"RollingUpdate":           "WithRollingUpdate",
	"Serialize":               "WithSerializedCalls (the runtime serializes calls itself)",
	"FlockDirectoryPath":      "WithLockDir",
	"EnableDeviceMetadata":    "WithDeviceMetadata",
	"CDIDirectory":            "WithCDIDir",
	"DRAService":              "the DRA service, which the runtime is",
}

// runtimeOwnedHelperOption says whether opt was made by one of the
// kubeletplugin functions in ownedHelperOptions, and which. A closure's
// symbol is "<function that made it>.func<N>", prefixed by the package
// path, or, when that function was inlined into a caller, by the caller's
// symbol ("k8s.io/.../kubeletplugin.Serialize.func1",
// "example.com/vendor.main.Serialize.func3"): the element before the
// last "func<N>" names the function.
func runtimeOwnedHelperOption(opt kubeletplugin.Option) (name, use string, owned bool) {
	f := runtime.FuncForPC(reflect.ValueOf(opt).Pointer())
	if f == nil {
		return "", "", false
	}
	sym := f.Name()
	sym = sym[strings.LastIndexByte(sym, '/')+1:]
	parts := strings.Split(sym, ".")
	for i := len(parts) - 1; i > 0; i-- {
		if isClosureSuffix(parts[i]) {
			use, owned = ownedHelperOptions[parts[i-1]]
			return parts[i-1], use, owned
		}
	}
	return "", "", false
}

// isClosureSuffix says whether s is "func<N>".
func isClosureSuffix(s string) bool {
	n, ok := strings.CutPrefix(s, "func")
	if !ok || n == "" {
		return false
	}
	for _, c := range n {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}
