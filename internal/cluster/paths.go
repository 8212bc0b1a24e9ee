package cluster

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Version is the Kubernetes version the cluster runs.
const Version = "v1.37.2"

// CacheDir is where drakit setup puts what it builds: $DRAKIT_CACHE, else
// $XDG_CACHE_HOME/drakit, else ~/.cache/drakit.
func CacheDir() string {
	if d := os.Getenv("DRAKIT_CACHE"); d != "" {
		return d
	}
	if d := os.Getenv("XDG_CACHE_HOME"); d != "" {
		return filepath.Join(d, "drakit")
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return filepath.Join(os.TempDir(), "drakit-cache")
	}
	return filepath.Join(home, ".cache", "drakit")
}

// BinDir is the folder with the component binaries.
func BinDir() string { return filepath.Join(CacheDir(), "k8s-"+Version, "bin") }

// ImageDir is the folder with the pause and busybox image tarballs.
func ImageDir() string { return filepath.Join(CacheDir(), "k8s-"+Version, "images") }

// HelmVersion is the Helm release drakit setup builds (helm.sh/helm/v4,
// from the Go module proxy) for chart tests and the demo.
const HelmVersion = "v4.3.2"

// HelmBinary is the path of the helm binary drakit setup builds. It is not
// a cluster prerequisite: only what installs Helm charts needs it.
func HelmBinary() string { return filepath.Join(BinDir(), "helm") }

var controlPlaneBinaries = []string{"etcd", "kube-apiserver", "kube-scheduler", "kube-controller-manager"}
var nodeBinaries = []string{"kubelet", "containerd", "ctr", "containerd-shim-runc-v2"}

// nodeHostTools are the host programs a node needs (Debian packages).
var nodeHostTools = map[string]string{
	"runc":     "runc",
	"iptables": "iptables",
}

// SetupCommand installs what a cluster needs (the component binaries,
// images and Debian packages), from any module that requires drakit.
const SetupCommand = "go run github.com/drakit/drakit/cmd/drakit setup"

// ErrMissing reports a missing prerequisite; its message says how to get it.
type ErrMissing struct {
	What []string
	Hint string
}

func (e *ErrMissing) Error() string {
	return fmt.Sprintf("missing %s; %s", strings.Join(e.What, ", "), e.Hint)
}

func checkPrereqs(binDir, imageDir string, node bool) error {
	want := controlPlaneBinaries
	if node {
		want = append(append([]string{}, want...), nodeBinaries...)
	}
	var missing []string
	for _, b := range want {
		if st, err := os.Stat(filepath.Join(binDir, b)); err != nil || st.Mode()&0o111 == 0 {
			missing = append(missing, filepath.Join(binDir, b))
		}
	}
	if node {
		for _, img := range []string{"pause.tar", "busybox.tar"} {
			if _, err := os.Stat(filepath.Join(imageDir, img)); err != nil {
				missing = append(missing, filepath.Join(imageDir, img))
			}
		}
		for tool, pkg := range nodeHostTools {
			if _, err := lookPath(tool); err != nil {
				missing = append(missing, tool+" (Debian package "+pkg+")")
			}
		}
		if _, err := os.Stat(cniBinDir + "/loopback"); err != nil {
			missing = append(missing, cniBinDir+"/loopback (Debian package containernetworking-plugins)")
		}
	}
	if len(missing) > 0 {
		return &ErrMissing{What: missing, Hint: "install them with: " + SetupCommand + " (as root: it also installs the Debian packages; in a drakit checkout hack/setup.sh runs it)"}
	}
	return nil
}

const cniBinDir = "/usr/lib/cni"

func lookPath(name string) (string, error) {
	for _, d := range []string{"/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"} {
		p := filepath.Join(d, name)
		if st, err := os.Stat(p); err == nil && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found", name)
}
