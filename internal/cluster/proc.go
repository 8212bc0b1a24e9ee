package cluster

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// proc is one process the cluster started.
type proc struct {
	Name string `json:"name"`
	PID  int    `json:"pid"`
	// Exe is the first word of /proc/PID/cmdline while the PID is ours
	// (PIDs are reused).
	Exe string `json:"exe"`

	done chan struct{} // closed when the process exited (own processes only)
}

// startProc starts bin with args, stdout and stderr to logs/<name>.log, in
// its own process group. The process outlives the caller (drakit cluster
// up) until stopped by PID.
func (s *state) startProc(name, bin string, args []string, env []string) (*proc, error) {
	return s.startProcFiles(name, bin, args, env, nil)
}

// startProcFiles is startProc with extra open files handed to the child.
func (s *state) startProcFiles(name, bin string, args []string, env []string, files []*os.File) (*proc, error) {
	logPath := filepath.Join(s.dir, "logs", name+".log")
	if err := os.MkdirAll(filepath.Dir(logPath), 0o755); err != nil {
		return nil, fmt.Errorf("create log folder: %w", err)
	}
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open log of %s: %w", name, err)
	}
	defer logf.Close()
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = append(os.Environ(), env...)
	cmd.Dir = s.dir
	cmd.ExtraFiles = files
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if s.dieWithParent {
		// A test binary that dies takes its cluster with it.
		cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{Name: name, PID: cmd.Process.Pid, Exe: bin, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.done) }()
	s.Procs = append(s.Procs, p)
	if err := s.save(); err != nil {
		return p, err
	}
	s.logf("%s started (pid %d, log %s)", name, p.PID, logPath)
	return p, nil
}

// alive reports whether the process is still running and still ours.
func (p *proc) alive() bool {
	if p.done != nil {
		select {
		case <-p.done:
			return false
		default:
			return true
		}
	}
	return pidIsExe(p.PID, p.Exe)
}

// pidIsExe reports whether pid runs the program exe (and is not a zombie).
func pidIsExe(pid int, exe string) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	if i := strings.LastIndexByte(string(stat), ')'); i > 0 && len(stat) > i+2 && stat[i+2] == 'Z' {
		return false
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return false
	}
	first, _, _ := strings.Cut(string(cmdline), "\x00")
	return first == exe
}

// stop sends SIGTERM, waits up to grace, then SIGKILL, and waits for exit.
func (p *proc) stop(grace time.Duration) {
	if !p.alive() {
		return
	}
	_ = syscall.Kill(p.PID, syscall.SIGTERM)
	deadline := time.Now().Add(grace)
	for p.alive() && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if p.alive() {
		_ = syscall.Kill(p.PID, syscall.SIGKILL)
		// A process in uninterruptible sleep (disk I/O on a loaded
		// machine) dies only when that returns: seen above 10 s in CI.
		deadline = time.Now().Add(30 * time.Second)
		for p.alive() && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// freePorts returns n distinct free TCP ports on 127.0.0.1, taken below
// the kernel's ephemeral port range where there is room: a port of that
// range that is free now may be given to any outgoing connection (a test's
// API client, another cluster's) before the component binds it, which
// failed a kube-controller-manager start with "address already in use".
// The listeners are held until all n are chosen, so the n are distinct.
func freePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	lo, hi := portsBelowEphemeral()
	for tries := 0; len(ports) < n; tries++ {
		addr := "127.0.0.1:0" // the kernel's pick: no room below the range, or none free there
		if hi > lo && tries < 50*n {
			addr = "127.0.0.1:" + strconv.Itoa(lo+rand.IntN(hi-lo))
		}
		l, err := net.Listen("tcp", addr)
		if err != nil {
			if addr == "127.0.0.1:0" {
				return nil, fmt.Errorf("find a free port: %w", err)
			}
			continue // taken: try another
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// portsBelowEphemeral is the range [lo, hi) that freePorts draws from: from
// 10000 up to the first port of the kernel's ephemeral range
// (net.ipv4.ip_local_port_range); empty (lo == hi) when that leaves fewer
// than 1000 ports or the range cannot be read.
func portsBelowEphemeral() (lo, hi int) {
	const floor, least = 10000, 1000
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0, 0
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 0, 0
	}
	first, err := strconv.Atoi(f[0])
	if err != nil || first-floor < least {
		return 0, 0
	}
	return floor, first
}

// waitFor polls check until it returns nil, the process dies, or the
// timeout passes. The error names what did not come up and points at the
// log.
func (s *state) waitFor(ctx context.Context, what string, p *proc, timeout time.Duration, check func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last error
	for {
		if last = check(ctx); last == nil {
			s.logf("%s ready", what)
			return nil
		}
		if p != nil && !p.alive() {
			return fmt.Errorf("%s exited while starting: %v; see %s%s", p.Name, last, s.logPath(p.Name), s.logTail(p.Name))
		}
		select {
		case <-ctx.Done():
			name := what
			if p != nil {
				name = p.Name
			}
			return fmt.Errorf("%s not ready after %s: %v; see %s%s", what, timeout, last, s.logPath(name), s.logTail(name))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (s *state) logPath(name string) string { return filepath.Join(s.dir, "logs", name+".log") }

// logTail returns the last lines of a component's log, for error messages.
func (s *state) logTail(name string) string {
	data, err := os.ReadFile(s.logPath(name))
	if err != nil || len(data) == 0 {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > 8 {
		lines = lines[len(lines)-8:]
	}
	return "\nlast lines of " + name + " log:\n  " + strings.Join(lines, "\n  ")
}

func itoa(i int) string { return strconv.Itoa(i) }
