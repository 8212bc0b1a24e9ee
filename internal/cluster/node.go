package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
)

// hostState records what a kubelet changes on the host so that the last
// node to stop can undo it: the sysctls it sets, the iptables chains it
// creates, the host folders it creates; and the slots of the nodes that
// use the host now (only in the shared file, see hostStatePath).
type hostState struct {
	Sysctls     map[string]string `json:"sysctls"`
	Chains      []string          `json:"chains"` // "iptables|table|chain" present before the kubelet
	CreatedDirs []string          `json:"createdDirs"`
	Users       []int             `json:"users,omitempty"`
}

// The sysctls a kubelet sets at start.
var kubeletSysctls = []string{"kernel/panic", "kernel/panic_on_oops", "vm/overcommit_memory"}

// Host folders a kubelet creates whatever its root dir.
var kubeletHostDirs = []string{"/var/lib/kubelet", "/var/log/containers", "/var/log/pods"}

const (
	busyboxImage = "drakit.local/busybox:latest"
	pauseImage   = "registry.k8s.io/pause:3.10"
)

// nodeLockHeld, when set, are the locks of every node slot, which this
// process holds (a test that must see the host with no node running before
// and after its own); lockNode hands out a duplicate of slot 0's instead
// of waiting for itself.
var nodeLockHeld []*os.File

func dupFile(f *os.File) (*os.File, error) {
	fd, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("duplicate the held node lock: %w", err)
	}
	return os.NewFile(uintptr(fd), f.Name()), nil
}

func (s *state) startNode(ctx context.Context, c *Cluster, o *options) error {
	lockCtx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	lock, slot, prev, err := s.lockNode(lockCtx)
	cancel()
	if err != nil {
		return err
	}
	s.nodeLock = lock // released by stop, after the node's changes are undone
	s.NodeSlot = slot
	// The slot is ours: whatever a crashed node left in it (processes,
	// pods, cgroups, mounts) goes now.
	s.cleanStaleNode(o.binDir, slot, prev)

	s.Node = o.nodeName
	host, err := joinHost(slot)
	if err != nil {
		return err
	}
	s.Host = host
	if err := s.save(); err != nil {
		return err
	}
	if err := createSlotCgroups(slot); err != nil {
		return err
	}
	s.logf("node slot %d of %d (cgroup root /%s)", slot, nodeSlots(), slotCgroup(slot))

	ctrDir := filepath.Join(s.dir, "containerd")
	c.CDIDir = filepath.Join(s.dir, "cdi")
	kubeletRoot := filepath.Join(s.dir, "kubelet")
	c.PluginRegistryDir = filepath.Join(kubeletRoot, "plugins_registry")
	c.PluginsDir = filepath.Join(kubeletRoot, "plugins")
	c.NodeName = o.nodeName
	c.Images = Images{Busybox: busyboxImage, Pause: pauseImage}
	for _, d := range []string{ctrDir, c.CDIDir, filepath.Join(s.dir, "cni"), kubeletRoot, c.PluginRegistryDir, c.PluginsDir, filepath.Join(s.dir, "pod-logs")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("create node folder: %w", err)
		}
	}
	runc, err := lookPath("runc")
	if err != nil {
		return err
	}
	sock := filepath.Join(ctrDir, "containerd.sock")
	ctrConfig := fmt.Sprintf(`version = 3
root = %[1]q
state = %[2]q

[grpc]
  address = %[3]q

[ttrpc]
  address = %[4]q

[plugins.'io.containerd.cri.v1.runtime']
  cdi_spec_dirs = [%[5]q]
  restrict_oom_score_adj = true

  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = 'runc'

    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = 'io.containerd.runc.v2'

      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        BinaryName = %[6]q
        Root = %[7]q
        SystemdCgroup = false

  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = [%[8]q]
    conf_dir = %[9]q

[plugins.'io.containerd.cri.v1.images'.pinned_images]
  sandbox = %[10]q

[plugins.'io.containerd.grpc.v1.cri']
  stream_server_address = '127.0.0.1'
  stream_server_port = '0'

[plugins.'io.containerd.nri.v1.nri']
  disable = true
`, filepath.Join(ctrDir, "root"), filepath.Join(ctrDir, "state"), sock, sock+".ttrpc", c.CDIDir,
		runc, filepath.Join(ctrDir, "runc"), cniBinDir, filepath.Join(s.dir, "cni"), pauseImage)
	if err := os.WriteFile(filepath.Join(ctrDir, "config.toml"), []byte(ctrConfig), 0o644); err != nil {
		return fmt.Errorf("write containerd config: %w", err)
	}
	cni := `{"cniVersion": "1.0.0", "name": "drakit-loopback", "plugins": [{"type": "loopback"}]}`
	if err := os.WriteFile(filepath.Join(s.dir, "cni", "10-loopback.conflist"), []byte(cni), 0o644); err != nil {
		return fmt.Errorf("write CNI config: %w", err)
	}
	pathEnv := "PATH=" + o.binDir + ":/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	ctr, err := s.startProcLocked("containerd", filepath.Join(o.binDir, "containerd"),
		[]string{"--config", filepath.Join(ctrDir, "config.toml")}, []string{pathEnv}, lock)
	if err != nil {
		return err
	}
	ctrCmd := func(ctx context.Context, args ...string) error {
		full := append([]string{"--address", sock, "--namespace", "k8s.io"}, args...)
		out, err := exec.CommandContext(ctx, filepath.Join(o.binDir, "ctr"), full...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("ctr %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
		}
		return nil
	}
	if err := s.waitFor(ctx, "containerd", ctr, 30*time.Second, func(ctx context.Context) error { return ctrCmd(ctx, "version") }); err != nil {
		return err
	}
	c.ctr, c.ctrSock = filepath.Join(o.binDir, "ctr"), sock
	for _, img := range []string{"pause.tar", "busybox.tar"} {
		if err := c.ImportImage(ctx, filepath.Join(o.imageDir, img)); err != nil {
			return fmt.Errorf("load image %s: %w", img, err)
		}
	}

	p := s.pki
	if err := p.issue("kubelet", "system:node:"+o.nodeName, []string{"system:nodes"}, true, nil, []string{o.nodeName, "localhost"}); err != nil {
		return err
	}
	server := fmt.Sprintf("https://127.0.0.1:%d", s.Ports.APIServer)
	kubeconfig := filepath.Join(s.dir, "kubelet.kubeconfig")
	if err := writeKubeconfig(kubeconfig, server, p, "kubelet"); err != nil {
		return err
	}
	gates := ""
	if len(o.featureGates) > 0 {
		gates = "featureGates:\n"
		for k, v := range o.featureGates {
			gates += fmt.Sprintf("  %s: %t\n", k, v)
		}
	}
	kcfg := fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: /%s
address: 127.0.0.1
port: %d
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: %d
containerRuntimeEndpoint: unix://%s
oomScoreAdj: 0
failSwapOn: false
podLogsDir: %s
resolvConf: ""
serializeImagePulls: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: "1Mi"
  nodefs.available: "1%%"
  nodefs.inodesFree: "1%%"
  imagefs.available: "1%%"
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: false
  x509:
    clientCAFile: %s
authorization:
  mode: AlwaysAllow
syncFrequency: 5s
fileCheckFrequency: 5s
nodeStatusUpdateFrequency: 5s
%s`, slotCgroup(slot), s.Ports.Kubelet, s.Ports.KubeletHealthz, sock,
		filepath.Join(s.dir, "pod-logs"), p.path("ca.crt"), gates)
	kcfgPath := filepath.Join(s.dir, "kubelet-config.yaml")
	if err := os.WriteFile(kcfgPath, []byte(kcfg), 0o644); err != nil {
		return fmt.Errorf("write kubelet config: %w", err)
	}
	kubelet, err := s.startProcLocked("kubelet", filepath.Join(o.binDir, "kubelet"), []string{
		"--config=" + kcfgPath, "--kubeconfig=" + kubeconfig, "--root-dir=" + kubeletRoot,
		"--hostname-override=" + o.nodeName, "--node-ip=127.0.0.1", "--v=1",
	}, []string{pathEnv}, lock)
	if err != nil {
		return err
	}
	if err := s.waitFor(ctx, "node "+o.nodeName, kubelet, 90*time.Second, func(ctx context.Context) error {
		n, err := c.Client.CoreV1().Nodes().Get(ctx, o.nodeName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, cond := range n.Status.Conditions {
			if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
				return nil
			}
		}
		return fmt.Errorf("node %s not Ready yet", o.nodeName)
	}); err != nil {
		return err
	}
	// With the node lifecycle controller off nothing removes the taint the
	// kubelet registers with; the node is Ready, so remove it here.
	if err := untaintNotReady(ctx, c, o.nodeName); err != nil {
		return err
	}
	return setLoopbackAddress(ctx, c, o.nodeName)
}

// ImportImage loads a container image tarball (an OCI image layout or a
// docker-archive, as `ctr images import` reads them) into the real node's
// containerd, in the k8s.io namespace the kubelet uses, and unpacks it:
// pods then run it with imagePullPolicy Never or IfNotPresent under the
// name the tarball gives it. It fails on a cluster without a real node.
func (c *Cluster) ImportImage(ctx context.Context, tarball string) error {
	if c.ctr == "" {
		return errors.New("import image: the cluster has no real node (WithNode)")
	}
	out, err := exec.CommandContext(ctx, c.ctr, "--address", c.ctrSock, "--namespace", "k8s.io",
		"images", "import", "--no-unpack=false", tarball).CombinedOutput()
	if err != nil {
		return fmt.Errorf("import image %s: %w: %s", tarball, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// setLoopbackAddress gives the node the address 127.0.0.1, where its
// kubelet serves, so that the API server reaches it for logs and exec. The
// kubelet refuses a loopback node IP and leaves the field alone, so the
// address stays.
func setLoopbackAddress(ctx context.Context, c *Cluster, name string) error {
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := c.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		n.Status.Addresses = []corev1.NodeAddress{
			{Type: corev1.NodeInternalIP, Address: "127.0.0.1"},
			{Type: corev1.NodeHostName, Address: name},
		}
		_, err = c.Client.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("set address of node %s: %w", name, err)
	}
	return nil
}

func untaintNotReady(ctx context.Context, c *Cluster, name string) error {
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := c.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		var keep []corev1.Taint
		for _, t := range n.Spec.Taints {
			if t.Key != corev1.TaintNodeNotReady {
				keep = append(keep, t)
			}
		}
		if len(keep) == len(n.Spec.Taints) {
			return nil
		}
		n.Spec.Taints = keep
		_, err = c.Client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("remove not-ready taint of node %s: %w", name, err)
	}
	return nil
}

// startProcLocked starts a process that inherits the node slot's lock.
func (s *state) startProcLocked(name, bin string, args, env []string, lock *os.File) (*proc, error) {
	return s.startProcFiles(name, bin, args, env, []*os.File{lock})
}

// adoptNodeLock returns a descriptor of the node slot's lock that this
// state's kubelet or containerd holds, taken from the running process
// (pidfd_getfd: the same lock, not a new one), so that a stop from another
// process (drakit cluster down) keeps the slot taken until its changes are
// undone. It returns nil when neither process runs or the kernel refuses.
func (s *state) adoptNodeLock() *os.File {
	for _, p := range s.Procs {
		if (p.Name != "kubelet" && p.Name != "containerd") || !p.alive() {
			continue
		}
		if f := takeFD(p.PID, slotLockPath(s.NodeSlot)); f != nil {
			return f
		}
	}
	return nil
}

// takeFD duplicates into this process the descriptor that process pid has
// open on path, or returns nil.
func takeFD(pid int, path string) *os.File {
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	for _, e := range ents {
		if target, err := os.Readlink(filepath.Join(dir, e.Name())); err != nil || target != path {
			continue
		}
		n, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		pidfd, err := unix.PidfdOpen(pid, 0)
		if err != nil {
			return nil
		}
		fd, err := unix.PidfdGetfd(pidfd, n, 0)
		unix.Close(pidfd)
		if err != nil {
			return nil
		}
		return os.NewFile(uintptr(fd), path)
	}
	return nil
}
