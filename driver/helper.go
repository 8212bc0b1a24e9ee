package driver

import (
	"crypto/sha256"
	"encoding/base64"
	"path/filepath"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	metadatav1beta1 "k8s.io/dynamic-resource-allocation/api/metadata/v1beta1"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
)

// pluginSocket is the file name of the DRA gRPC socket in the plugin data
// folder. The runtime names it, and tells the helper, so that liveness
// dials the socket the helper serves.
func (d *Runtime) pluginSocket() string {
	if d.o.rollingUpdateUID == "" {
		return "dra.sock"
	}
	// Two instances share the folder during a rolling update: a name per
	// pod, a hash of the UID where the UID would make the path longer
	// than a unix socket takes (as the helper names registration sockets).
	name := "dra-" + string(d.o.rollingUpdateUID) + ".sock"
	if len(filepath.Join(d.o.pluginDataDir, name)) > maxSocketPath {
		sum := sha256.Sum256([]byte(d.o.rollingUpdateUID))
		name = "dra-" + base64.RawURLEncoding.EncodeToString(sum[:8]) + ".sock"
	}
	return name
}

// maxSocketPath is the longest path of a unix socket on Linux: 108 bytes
// with the terminating NUL.
const maxSocketPath = 107

// namedHelperOption is a kubelet plugin helper option with the name of
// the kubeletplugin function that made it (for tests and logs).
type namedHelperOption struct {
	name string
	opt  kubeletplugin.Option
}

// runtimeHelperOptions are the helper settings the runtime relies on,
// each stated explicitly (also where it is the helper's default), so that
// no option given before them can change one. TestHelperOptionsCovered
// checks that every kubeletplugin option is either here or one of the
// vendor's knobs ([WithGRPCVerbosity], [WithGRPCInterceptor],
// [WithGRPCStreamInterceptor], [WithKubeletAPIVersions],
// [WithHealthService]).
func (d *Runtime) runtimeHelperOptions(client kubernetes.Interface) []namedHelperOption {
	var versions []schema.GroupVersion
	if d.o.deviceMetadata {
		versions = []schema.GroupVersion{metadatav1beta1.SchemeGroupVersion}
	}
	return []namedHelperOption{
		{"DriverName", kubeletplugin.DriverName(d.name)},
		{"KubeClient", kubeletplugin.KubeClient(client)},
		{"NodeName", kubeletplugin.NodeName(d.o.nodeName)},
		// Empty: the helper looks the Node up itself.
		{"NodeUID", kubeletplugin.NodeUID("")},
		{"RegistrarDirectoryPath", kubeletplugin.RegistrarDirectoryPath(d.o.registrarDir)},
		// Empty: the helper's name, which depends on rolling updates.
		{"RegistrarSocketFilename", kubeletplugin.RegistrarSocketFilename(d.o.registrarSocket)},
		{"PluginDataDirectoryPath", kubeletplugin.PluginDataDirectoryPath(d.o.pluginDataDir)},
		{"PluginSocket", kubeletplugin.PluginSocket(d.pluginSocket())},
		{"PluginListener", kubeletplugin.PluginListener(listenUnix)},
		{"RegistrarListener", kubeletplugin.RegistrarListener(listenUnix)},
		// Empty UID: no rolling update.
		{"RollingUpdate", kubeletplugin.RollingUpdate(d.o.rollingUpdateUID)},
		// The runtime serializes calls itself (see enterCall); the
		// helper's lock folder is stated anyway, for a helper that
		// takes a lock without serializing.
		{"Serialize", kubeletplugin.Serialize(false)},
		{"FlockDirectoryPath", kubeletplugin.FlockDirectoryPath(d.o.lockDir)},
		{"RegistrationService", kubeletplugin.RegistrationService(true)},
		{"DRAService", kubeletplugin.DRAService(true)},
		// Empty: slices carry spec.nodeName, which the runtime's
		// published-device guard and the scheduler's node filter use.
		{"ReconcilePoolWithName", kubeletplugin.ReconcilePoolWithName("")},
		{"EnableDeviceMetadata", kubeletplugin.EnableDeviceMetadata(d.o.deviceMetadata, versions)},
		{"CDIDirectory", kubeletplugin.CDIDirectory(d.o.cdiDir)},
		{"MetadataFileOps", kubeletplugin.MetadataFileOps(kubeletplugin.MetadataFileOperations{})},
	}
}

// helperOptions are the kubelet plugin helper's options: the vendor's
// knobs and the deprecated [WithHelperOptions] first, then every setting
// the runtime relies on, so that the runtime's win.
func (d *Runtime) helperOptions(client kubernetes.Interface) []kubeletplugin.Option {
	opts := append([]kubeletplugin.Option(nil), d.o.helperKnobs...)
	opts = append(opts, d.o.extraHelperOpts...)
	for _, n := range d.runtimeHelperOptions(client) {
		opts = append(opts, n.opt)
	}
	return opts
}
