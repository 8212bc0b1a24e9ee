package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// A host runs up to nodeSlots() real nodes at once. Each node takes a slot:
// a lock file (drakit-node.<slot>.lock in the temporary folder) that the
// starting process, its kubelet and its containerd hold for as long as any
// of them runs, and a cgroup root of its own (/drakit-node-<slot> in every
// hierarchy) under which its kubelet puts its pods. Everything else a node
// uses is under its cluster folder or on ports chosen free at start. What a
// kubelet changes on the whole host (sysctls, iptables chains, host
// folders) is recorded once, by the first node, in drakit-node.host.json
// with the slots that use it, and restored by the last one to stop.

// DefaultNodeSlots is how many real nodes run at once on a host unless
// $DRAKIT_NODE_SLOTS says otherwise (at least 1).
const DefaultNodeSlots = 2

// nodeSlots is $DRAKIT_NODE_SLOTS, else DefaultNodeSlots.
func nodeSlots() int {
	if n, err := strconv.Atoi(os.Getenv("DRAKIT_NODE_SLOTS")); err == nil && n >= 1 {
		return n
	}
	return DefaultNodeSlots
}

func slotLockPath(slot int) string {
	return filepath.Join(os.TempDir(), fmt.Sprintf("drakit-node.%d.lock", slot))
}

// slotCgroup is the cgroup root of a slot's kubelet, relative to every
// hierarchy's mount point.
func slotCgroup(slot int) string { return fmt.Sprintf("drakit-node-%d", slot) }

// hostLockPath guards the host state file: it is held for the moments a
// node records, joins or restores the host state, never while a node runs.
func hostLockPath() string { return filepath.Join(os.TempDir(), "drakit-node.host.lock") }

// tryLock takes path's lock without waiting; it returns nil if another
// open file holds it.
func tryLock(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open lock %s: %w", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, nil
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return f, nil
}

// slotInUse reports whether a node (or a test holding the slots) holds the
// slot's lock now.
func slotInUse(slot int) bool {
	f, err := tryLock(slotLockPath(slot))
	if err != nil || f == nil {
		return err == nil
	}
	f.Close()
	return false
}

// legacyLockPath is the one node lock of drakit before node slots: a node
// of an older drakit (drakit cluster up) holds it while it runs.
func legacyLockPath() string { return filepath.Join(os.TempDir(), "drakit-node.lock") }

// otherSlotsInUse reports whether a slot other than own is held, or a node
// of an older drakit runs.
func otherSlotsInUse(own int) bool {
	for i := 0; i < nodeSlots(); i++ {
		if i != own && slotInUse(i) {
			return true
		}
	}
	f, err := tryLock(legacyLockPath())
	if f != nil {
		f.Close()
	}
	return err == nil && f == nil
}

// slotOwner is what a slot's lock file says about the node that last took
// it: its cluster folder and the PID of the process that started it.
type slotOwner struct {
	Dir string `json:"dir"`
	PID int    `json:"pid"`
}

// claimSlot records the new owner in the slot's lock file, which the
// caller holds, and returns the previous one (zero if none was recorded).
func (s *state) claimSlot(f *os.File) slotOwner {
	var prev slotOwner
	if data, err := os.ReadFile(f.Name()); err == nil {
		_ = json.Unmarshal(data, &prev)
	}
	data, _ := json.Marshal(slotOwner{Dir: s.dir, PID: os.Getpid()})
	_ = f.Truncate(0)
	_, _ = f.WriteAt(append(data, '\n'), 0)
	return prev
}

// lockNode takes a free node slot, waiting until one is free. The lock's
// file is handed to the kubelet and containerd, so the slot stays held for
// as long as either runs, even after the starting process exits (drakit
// cluster up); the starting process keeps it too, so that a Stop undoes the
// node's changes before the slot is taken again. nodeLockHeld (a test that
// holds every slot) hands out slot 0 instead.
func (s *state) lockNode(ctx context.Context) (*os.File, int, slotOwner, error) {
	if nodeLockHeld != nil {
		f, err := dupFile(nodeLockHeld[0])
		return f, 0, slotOwner{}, err
	}
	announced := false
	for {
		for slot := 0; slot < nodeSlots(); slot++ {
			f, err := tryLock(slotLockPath(slot))
			if err != nil {
				return nil, 0, slotOwner{}, err
			}
			if f != nil {
				return f, slot, s.claimSlot(f), nil
			}
		}
		if !announced {
			s.logf("waiting for one of the %d drakit nodes running on this host to stop "+
				"(DRAKIT_NODE_SLOTS); a cluster left by `drakit cluster up` stops with "+
				"`drakit cluster down`", nodeSlots())
			announced = true
		}
		select {
		case <-ctx.Done():
			return nil, 0, slotOwner{}, fmt.Errorf("wait for a free node slot: %w", ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// lockSlot takes one given slot, waiting until ctx is done.
func lockSlot(ctx context.Context, slot int) (*os.File, error) {
	for {
		f, err := tryLock(slotLockPath(slot))
		if err != nil || f != nil {
			return f, err
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("wait for node slot %d: %w", slot, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// withHostLock runs fn while holding the host state's lock.
func withHostLock(fn func() error) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for {
		f, err := tryLock(hostLockPath())
		if err != nil {
			return err
		}
		if f != nil {
			defer f.Close()
			return fn()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for the host state lock %s: %w", hostLockPath(), ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// hostStatePath holds the host's state from before the first drakit node
// changed it, and the slots of the nodes that use it. The last node to stop
// restores it and removes the file; a node that finds it with no live user
// knows that a crashed node (a killed test binary) left the host changed,
// and keeps the values in it.
func hostStatePath() string { return filepath.Join(os.TempDir(), "drakit-node.host.json") }

func readHostFile() (*hostState, error) {
	data, err := os.ReadFile(hostStatePath())
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read host state: %w", err)
	}
	var h hostState
	if err := json.Unmarshal(data, &h); err != nil {
		return nil, nil // torn by a crash before the atomic write existed: record anew
	}
	return &h, nil
}

func writeHostFile(h *hostState) error {
	data, err := json.Marshal(h)
	if err != nil {
		return fmt.Errorf("encode host state: %w", err)
	}
	tmp := hostStatePath() + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return fmt.Errorf("save host state: %w", err)
	}
	if err := os.Rename(tmp, hostStatePath()); err != nil {
		return fmt.Errorf("save host state: %w", err)
	}
	return nil
}

// liveUsers drops the users whose slot is free (their node is gone) and
// own, which the caller adds or removes itself.
func liveUsers(users []int, own int) []int {
	var live []int
	for _, u := range users {
		if u != own && slotInUse(u) {
			live = append(live, u)
		}
	}
	return live
}

// joinHost returns the host's original state and records slot as one of
// its users: the state saved by a running or crashed node, else the
// current one, which it saves. Call it holding the slot.
func joinHost(slot int) (*hostState, error) {
	var out *hostState
	err := withHostLock(func() error {
		h, err := readHostFile()
		if err != nil {
			return err
		}
		if h == nil {
			h = currentHost()
		}
		h.Users = append(liveUsers(h.Users, slot), slot)
		sort.Ints(h.Users)
		out = h
		return writeHostFile(h)
	})
	return out, err
}

// leaveHost removes slot from the host state's users. The last user
// restores the host to the recorded state (fallback: what this node saved
// in its own state, if the shared file is gone) and removes the file.
func leaveHost(slot int, own *hostState) error {
	return withHostLock(func() error {
		h, err := readHostFile()
		if err != nil {
			return err
		}
		if h == nil {
			if otherSlotsInUse(slot) {
				return nil // the file is gone and another node runs: leave the host to it
			}
			h = own
		}
		h.Users = liveUsers(h.Users, slot)
		if len(h.Users) > 0 {
			return writeHostFile(h)
		}
		if err := restoreHost(h); err != nil {
			return err
		}
		if err := os.Remove(hostStatePath()); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("remove host state: %w", err)
		}
		return nil
	})
}

// currentHost reads what a kubelet will change on the host.
func currentHost() *hostState {
	h := &hostState{Sysctls: map[string]string{}}
	for _, k := range kubeletSysctls {
		if v, err := os.ReadFile("/proc/sys/" + k); err == nil {
			h.Sysctls[k] = strings.TrimSpace(string(v))
		}
	}
	h.Chains = listChains()
	for _, d := range kubeletHostDirs {
		if _, err := os.Stat(d); os.IsNotExist(err) {
			h.CreatedDirs = append(h.CreatedDirs, d)
		}
	}
	return h
}

// restoreHost puts back the sysctls, removes the iptables chains and the
// host folders the kubelets created.
func restoreHost(h *hostState) error {
	var errs []error
	for k, v := range h.Sysctls {
		if err := os.WriteFile("/proc/sys/"+k, []byte(v), 0o644); err != nil {
			errs = append(errs, fmt.Errorf("restore sysctl %s: %w", k, err))
		}
	}
	removeNewChains(h.Chains)
	for _, d := range h.CreatedDirs {
		unmountUnder(d)
		if err := os.RemoveAll(d); err != nil {
			errs = append(errs, fmt.Errorf("remove %s: %w", d, err))
		}
	}
	return errors.Join(errs...)
}

// cgroupHierarchies lists the folders under /sys/fs/cgroup where cgroups
// are made: /sys/fs/cgroup itself on a cgroup v2 host, else every mounted
// v1 hierarchy (and the v2 one of a hybrid host).
func cgroupHierarchies() []string {
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		return []string{"/sys/fs/cgroup"}
	}
	var dirs []string
	ents, _ := os.ReadDir("/sys/fs/cgroup")
	for _, e := range ents {
		d := filepath.Join("/sys/fs/cgroup", e.Name())
		if st, err := os.Stat(d); err == nil && st.IsDir() {
			if _, err := os.Stat(filepath.Join(d, "cgroup.procs")); err == nil {
				dirs = append(dirs, d)
			}
		}
	}
	return dirs
}

// createSlotCgroups makes the slot's cgroup root in every hierarchy (the
// kubelet refuses a cgroup root that does not exist); a new cpuset cgroup
// gets its parent's CPUs and memory nodes.
func createSlotCgroups(slot int) error {
	for _, h := range cgroupHierarchies() {
		d := filepath.Join(h, slotCgroup(slot))
		if err := os.Mkdir(d, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("create cgroup %s: %w", d, err)
		}
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			cur, err := os.ReadFile(filepath.Join(d, f))
			if err != nil || strings.TrimSpace(string(cur)) != "" {
				continue
			}
			v, err := os.ReadFile(filepath.Join(h, f))
			if err != nil {
				continue
			}
			if err := os.WriteFile(filepath.Join(d, f), v, 0o644); err != nil {
				return fmt.Errorf("set %s of cgroup %s: %w", f, d, err)
			}
		}
	}
	return nil
}

// slotCgroupDirs lists the slot's cgroup roots that exist.
func slotCgroupDirs(slot int) []string {
	var dirs []string
	for _, h := range cgroupHierarchies() {
		if d := filepath.Join(h, slotCgroup(slot)); isDir(d) {
			dirs = append(dirs, d)
		}
	}
	return dirs
}

// legacyKubepodsDirs lists the kubepods cgroups of a node started before
// nodes had slots (cgroup root /).
func legacyKubepodsDirs() []string {
	var dirs []string
	for _, h := range cgroupHierarchies() {
		if d := filepath.Join(h, "kubepods"); isDir(d) {
			dirs = append(dirs, d)
		}
	}
	return dirs
}

func isDir(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
}
