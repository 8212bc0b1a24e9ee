package cluster

import (
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// Cluster is a running local cluster. Its fields are valid until Stop.
type Cluster struct {
	// Dir holds everything of this cluster: PKI, etcd data, logs, the
	// kubelet's root folder. Logs are in Dir/logs/<component>.log.
	Dir string
	// Kubeconfig is the path of an admin kubeconfig.
	Kubeconfig string
	// RESTConfig is the admin REST config (QPS and burst raised for tests).
	RESTConfig *rest.Config
	// Client is an admin clientset.
	Client kubernetes.Interface
	// NodeName is the name of the real node when WithNode was given,
	// else empty.
	NodeName string
	// PluginRegistryDir is the kubelet's plugin registry folder, where a
	// DRA driver puts its registration socket.
	PluginRegistryDir string
	// PluginsDir is the kubelet's plugins folder; a DRA driver's own
	// sockets go under PluginsDir/<driver name>/.
	PluginsDir string
	// CDIDir is the folder containerd reads CDI specs from.
	CDIDir string
	// Images names the locally loaded images pods can use with
	// imagePullPolicy Never.
	Images Images

	c *state
	// ctr and ctrSock run containerd's client against the node's
	// containerd (set with WithNode).
	ctr, ctrSock string
}

// Images are the container images loaded into the node's containerd.
type Images struct {
	// Busybox is a busybox image (sh, env, cat, sleep, ...).
	Busybox string
	// Pause is the sandbox image.
	Pause string
}
