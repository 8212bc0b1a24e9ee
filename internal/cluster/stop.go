package cluster

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Stop stops every process Start launched, by PID, undoes the kubelet's
// host changes and removes a temporary Dir. It is safe to call twice.
func (c *Cluster) Stop() error {
	if c == nil || c.c == nil {
		return nil
	}
	c.c.mu.Lock()
	defer c.c.mu.Unlock()
	return c.c.stop()
}

// StopDir stops a cluster from the state saved in dir by a Start in this
// or another process (drakit cluster down). A folder with no saved state
// is not an error.
func StopDir(dir string, log io.Writer) error { return stopDir(dir, log) }

func stopDir(dir string, log io.Writer) error {
	data, err := os.ReadFile(filepath.Join(dir, "state.json"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read cluster state: %w", err)
	}
	s := &state{}
	if err := json.Unmarshal(data, s); err != nil {
		return fmt.Errorf("decode cluster state %s: %w", filepath.Join(dir, "state.json"), err)
	}
	s.dir, s.log, s.KeepDir = dir, log, true
	return s.stop()
}

func (s *state) stop() error {
	var errs []error
	if s.Host != nil {
		errs = append(errs, s.stopNode())
	}
	for i := len(s.Procs) - 1; i >= 0; i-- {
		p := s.Procs[i]
		p.stop(10 * time.Second)
		if p.alive() {
			errs = append(errs, fmt.Errorf("%s (pid %d) did not stop", p.Name, p.PID))
		}
	}
	s.Procs = nil
	unmountUnder(s.dir)
	if s.nodeLock != nil {
		// The host is restored: another node may start now.
		s.nodeLock.Close()
		s.nodeLock = nil
	}
	if s.KeepDir {
		if _, err := os.Stat(s.dir); err == nil {
			errs = append(errs, s.save())
		}
	} else if err := os.RemoveAll(s.dir); err != nil {
		errs = append(errs, fmt.Errorf("remove cluster folder: %w", err))
	}
	s.logf("stopped")
	return errors.Join(errs...)
}

// stopNode stops the kubelet, the containers and containerd, then undoes
// the node's changes, and the host's if it is the last node. It holds the
// node's slot until stop returns, so that no other node starts in it
// before it is clean.
func (s *state) stopNode() error {
	if s.nodeLock == nil {
		s.nodeLock = s.adoptNodeLock()
	}
	if s.nodeLock == nil && !s.nodeRunning() {
		// A crashed node. If another node holds its slot now, that node
		// cleaned what this one left, and none of its slot may be touched.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		lock, err := lockSlot(ctx, s.NodeSlot)
		cancel()
		if err != nil {
			s.logf("another drakit node runs in node slot %d; its state is left alone (%v)",
				s.NodeSlot, err)
			s.Host = nil
			return nil
		}
		s.nodeLock = lock
	}
	var errs []error
	for _, p := range s.Procs {
		if p.Name == "kubelet" {
			p.stop(10 * time.Second)
		}
	}
	killCgroupProcs(slotCgroupDirs(s.NodeSlot))
	for _, p := range s.Procs {
		if p.Name == "containerd" {
			p.stop(10 * time.Second)
		}
	}
	killMatching(func(exe, cmdline string) bool {
		return strings.HasSuffix(exe, "/containerd-shim-runc-v2") &&
			strings.Contains(cmdline, s.dir+"/")
	})
	killCgroupProcs(slotCgroupDirs(s.NodeSlot))
	if s.nodeLock == nil {
		// The kernel would not hand over the running node's lock: take it
		// now that the node's processes are gone.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		lock, err := lockSlot(ctx, s.NodeSlot)
		cancel()
		if err != nil {
			errs = append(errs, err)
		}
		s.nodeLock = lock
	}
	removeCgroups(slotCgroupDirs(s.NodeSlot))
	unmountUnder(s.dir)
	// Links the kubelet made to our pods' logs.
	if ents, err := os.ReadDir("/var/log/containers"); err == nil {
		for _, e := range ents {
			p := filepath.Join("/var/log/containers", e.Name())
			if t, err := os.Readlink(p); err == nil && strings.HasPrefix(t, s.dir+"/") {
				_ = os.Remove(p)
			}
		}
	}
	errs = append(errs, leaveHost(s.NodeSlot, s.Host))
	s.Host = nil
	return errors.Join(errs...)
}

// nodeRunning reports whether this state's kubelet or containerd runs.
func (s *state) nodeRunning() bool {
	for _, p := range s.Procs {
		if (p.Name == "kubelet" || p.Name == "containerd") && p.alive() {
			return true
		}
	}
	return false
}

// cleanStaleNode removes what a crashed drakit node left in slot: its
// kubelet, containerd and shims (found by the cluster folder recorded in the
// slot's lock file), its pods and cgroups. It runs holding the slot, so
// that node is gone; other slots' nodes may run and are left alone. When
// no other slot is held, it also removes any node process and the kubepods
// cgroups of a node started before nodes had slots.
func (s *state) cleanStaleNode(binDir string, slot int, prev slotOwner) {
	isNodeBin := func(exe string) bool {
		return exe == filepath.Join(binDir, "kubelet") || exe == filepath.Join(binDir, "containerd") ||
			exe == filepath.Join(binDir, "containerd-shim-runc-v2")
	}
	n := 0
	if prev.Dir != "" && prev.Dir != "/" {
		n += killMatching(func(exe, cmdline string) bool {
			return isNodeBin(exe) && strings.Contains(cmdline, prev.Dir+"/")
		})
		unmountUnder(prev.Dir)
	}
	n += killCgroupProcs(slotCgroupDirs(slot))
	removeCgroups(slotCgroupDirs(slot))
	if !otherSlotsInUse(slot) {
		n += killMatching(func(exe, _ string) bool { return isNodeBin(exe) })
		n += killCgroupProcs(legacyKubepodsDirs())
		removeCgroups(legacyKubepodsDirs())
	}
	if n > 0 {
		s.logf("stopped %d processes left by a crashed drakit node in slot %d", n, slot)
	}
}

// killMatching SIGKILLs every process whose executable and command line
// match, and returns how many it killed.
func killMatching(match func(exe, cmdline string) bool) int {
	ents, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil || len(raw) == 0 {
			continue
		}
		args := strings.Split(strings.TrimRight(string(raw), "\x00"), "\x00")
		if match(args[0], strings.Join(args, " ")) {
			pids = append(pids, pid)
		}
	}
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	waitGone(pids)
	return len(pids)
}

func waitGone(pids []int) {
	deadline := time.Now().Add(5 * time.Second)
	for _, pid := range pids {
		for time.Now().Before(deadline) {
			if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err != nil {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// killCgroupProcs SIGKILLs every process in the cgroups at or below
// roots (a node's pods) and returns how many it killed.
func killCgroupProcs(roots []string) int {
	seen := map[int]bool{}
	for _, root := range roots {
		_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
				return nil
			}
			data, _ := os.ReadFile(p)
			for _, f := range strings.Fields(string(data)) {
				if pid, err := strconv.Atoi(f); err == nil {
					seen[pid] = true
				}
			}
			return nil
		})
	}
	var pids []int
	for pid := range seen {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		pids = append(pids, pid)
	}
	waitGone(pids)
	return len(pids)
}

// removeCgroups removes the cgroup folders at or below roots, deepest
// first.
func removeCgroups(roots []string) {
	for _, root := range roots {
		var dirs []string
		_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		sort.Slice(dirs, func(i, j int) bool { return len(dirs[i]) > len(dirs[j]) })
		for _, d := range dirs {
			_ = syscall.Rmdir(d)
		}
	}
}

// unmountUnder detaches every mount at or below dir, deepest first.
func unmountUnder(dir string) {
	if dir == "" {
		return
	}
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return
	}
	defer f.Close()
	var mounts []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		mp := unescapeMount(fields[4])
		if mp == dir || strings.HasPrefix(mp, dir+"/") {
			mounts = append(mounts, mp)
		}
	}
	sort.Slice(mounts, func(i, j int) bool { return len(mounts[i]) > len(mounts[j]) })
	for _, m := range mounts {
		_ = syscall.Unmount(m, syscall.MNT_DETACH)
	}
}

func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

var iptablesTables = []string{"filter", "nat", "mangle"}

// forEachIPTable calls fn with the rules (iptables -S, split into words)
// of every table of iptables and ip6tables that can be read.
func forEachIPTable(fn func(bin, tool, table string, rules [][]string)) {
	for _, tool := range []string{"iptables", "ip6tables"} {
		bin, err := lookPath(tool)
		if err != nil {
			continue
		}
		for _, t := range iptablesTables {
			data, err := exec.Command(bin, "-w", "-t", t, "-S").Output()
			if err != nil {
				continue
			}
			var rules [][]string
			for _, line := range strings.Split(string(data), "\n") {
				if f := strings.Fields(line); len(f) >= 2 {
					rules = append(rules, f)
				}
			}
			fn(bin, tool, t, rules)
		}
	}
}

// listChains returns "tool|table|chain" for every chain now present.
func listChains() []string {
	var out []string
	forEachIPTable(func(_, tool, t string, rules [][]string) {
		for _, f := range rules {
			if f[0] == "-N" || f[0] == "-P" {
				out = append(out, tool+"|"+t+"|"+f[1])
			}
		}
	})
	return out
}

// removeNewChains deletes the KUBE-* chains that were not there before
// (and the rules that jump to them).
func removeNewChains(before []string) {
	had := map[string]bool{}
	for _, c := range before {
		had[c] = true
	}
	forEachIPTable(func(bin, tool, t string, all [][]string) {
		var newChains []string
		var rules [][]string
		for _, f := range all {
			if f[0] == "-N" && strings.HasPrefix(f[1], "KUBE-") && !had[tool+"|"+t+"|"+f[1]] {
				newChains = append(newChains, f[1])
			}
			if f[0] == "-A" {
				rules = append(rules, f)
			}
		}
		isNew := map[string]bool{}
		for _, c := range newChains {
			isNew[c] = true
		}
		for _, r := range rules {
			for i := 0; i+1 < len(r); i++ {
				if (r[i] == "-j" || r[i] == "-g") && isNew[r[i+1]] && !isNew[r[1]] {
					args := append([]string{"-w", "-t", t, "-D"}, r[1:]...)
					_ = exec.Command(bin, args...).Run()
					break
				}
			}
		}
		for _, c := range newChains {
			_ = exec.Command(bin, "-w", "-t", t, "-F", c).Run()
		}
		for _, c := range newChains {
			_ = exec.Command(bin, "-w", "-t", t, "-X", c).Run()
		}
	})
}
