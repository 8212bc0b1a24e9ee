package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/client-go/kubernetes"
)

// benchProc is a driver process bench started.
type benchProc struct {
	cmd  *exec.Cmd
	log  string
	done chan struct{}
}

// startProc starts argv with env added to bench's environment, output
// to logFile. The process dies with bench.
func startProc(_ context.Context, logFile string, argv []string, env ...string) (*benchProc, error) {
	if len(argv) == 0 {
		return nil, errors.New("empty command line")
	}
	out, err := os.Create(logFile)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		out.Close()
		return nil, fmt.Errorf("start %s: %w", argv[0], err)
	}
	p := &benchProc{cmd: cmd, log: logFile, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); out.Close(); close(p.done) }()
	return p, nil
}

// startBenchChild starts this program as "drakit bench <sub> args...".
func startBenchChild(ctx context.Context, logFile, sub string, args ...string) (*benchProc, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	return startProc(ctx, logFile, append([]string{self, "bench", sub}, args...))
}

// stop ends the process by its PID: SIGTERM, then SIGKILL after 10 s.
func (p *benchProc) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// exited says whether the process has ended, with the tail of its log.
func (p *benchProc) exited() (bool, string) {
	select {
	case <-p.done:
		data, _ := os.ReadFile(p.log)
		if len(data) > 2000 {
			data = data[len(data)-2000:]
		}
		return true, string(data)
	default:
		return false, ""
	}
}

// waitSocket waits up to a minute for a driver to serve socket and
// returns the PID of the process serving it (0 when it is in another
// PID namespace). p, when set, is the process that should serve it.
func waitSocket(ctx context.Context, socket string, p *benchProc) (int, error) {
	deadline := time.Now().Add(time.Minute)
	for {
		pid, err := peerPID(socket)
		if err == nil {
			return pid, nil
		}
		if p != nil {
			if gone, log := p.exited(); gone {
				return 0, fmt.Errorf("driver process exited before serving %s; its log ends:\n%s", socket, log)
			}
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("no driver serves %s after a minute: %w", socket, err)
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// peerPID connects to a unix socket and returns the PID of the process
// that accepted (SO_PEERCRED).
func peerPID(socket string) (int, error) {
	conn, err := net.DialTimeout("unix", socket, time.Second)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	raw, err := conn.(*net.UnixConn).SyscallConn()
	if err != nil {
		return 0, err
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) { cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED) }); err != nil {
		return 0, err
	}
	if cerr != nil {
		return 0, fmt.Errorf("peer of %s: %w", socket, cerr)
	}
	return int(cred.Pid), nil
}

// clockTick is the unit of /proc/<pid>/stat's CPU times (USER_HZ, 100
// on every Linux architecture Kubernetes runs on).
const clockTick = 10 * time.Millisecond

// procCPU returns the user plus system CPU time of all threads of pid.
func procCPU(pid int) (time.Duration, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("read CPU time: %w", err)
	}
	// The command name (field 2) may hold spaces; fields after it start
	// with the state (field 3), so utime and stime (14, 15) are the
	// 12th and 13th after the closing parenthesis.
	i := bytes.LastIndexByte(data, ')')
	f := strings.Fields(string(data[i+1:]))
	if i < 0 || len(f) < 13 {
		return 0, fmt.Errorf("read CPU time: /proc/%d/stat: unexpected format", pid)
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("read CPU time: %w", err)
	}
	return time.Duration(utime+stime) * clockTick, nil
}

// procRSS returns the resident set size of pid.
func procRSS(pid int) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, fmt.Errorf("read RSS: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("read RSS: %w", err)
			}
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("read RSS: no VmRSS in /proc/%d/status", pid)
}

// apiRequests returns the API server's count of requests for
// ResourceClaims so far (apiserver_request_total, all verbs and codes).
// Between two calls only the driver under test reads claims, so the
// difference is its requests.
func apiRequests(ctx context.Context, client kubernetes.Interface) (float64, error) {
	data, err := client.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return 0, fmt.Errorf("read API server metrics: %w", err)
	}
	return sumMetric(data, "apiserver_request_total", `resource="resourceclaims"`), nil
}

// sumMetric adds the values of the Prometheus text-format samples of
// metric whose labels contain label.
func sumMetric(data []byte, metric, label string) float64 {
	var sum float64
	for line := range strings.Lines(string(data)) {
		rest, ok := strings.CutPrefix(line, metric+"{")
		if !ok || !strings.Contains(rest, label) {
			continue
		}
		f := strings.Fields(rest[strings.LastIndexByte(rest, '}')+1:])
		if len(f) == 0 {
			continue
		}
		if v, err := strconv.ParseFloat(f[0], 64); err == nil {
			sum += v
		}
	}
	return sum
}
