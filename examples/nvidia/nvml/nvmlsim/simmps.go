package nvmlsim

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// The stand-in for NVIDIA's MPS control daemon, nvidia-cuda-mps-control,
// on the simulated GPUs. It is a process of its own, as the real daemon
// is, and enforces what the real one does for its clients (simcuda.go): a
// client's allocations stay within its pinned device memory limit and
// all clients' within the GPU's memory. Its clients speak a line protocol
// of its own over <pipe folder>/control (the real daemon's pipe folder
// holds its own files there); a client is a simulated CUDA program
// (Sim.OpenCUDA), never a real one.

// EnvSimState names the variable that gives the stand-in daemon the
// simulator's state file (the daemon registers itself on its GPU there).
const EnvSimState = "NVMLSIM_STATE"

// The MPS variables: the daemon's folders and GPU, a client's limits.
const (
	EnvMPSPipeDir        = "CUDA_MPS_PIPE_DIRECTORY"
	EnvMPSLogDir         = "CUDA_MPS_LOG_DIRECTORY"
	EnvMPSPinnedMemLimit = "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"
	EnvMPSThreads        = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"
	EnvVisibleDevices    = "CUDA_VISIBLE_DEVICES"
)

// simMPS is the daemon registered on a GPU in the state.
type simMPS struct {
	PID     int    `json:"pid"`
	PipeDir string `json:"pipeDir"`
}

// MPSClient is one client of a stand-in daemon, as get_clients reports.
type MPSClient struct {
	PID      int   `json:"pid"`
	LimitMiB int64 `json:"limitMiB"`
	Threads  int   `json:"threads"`
	UsedMiB  int64 `json:"usedMiB"`
}

type mpsRequest struct {
	Op       string `json:"op"`
	PID      int    `json:"pid,omitempty"`
	LimitMiB int64  `json:"limitMiB,omitempty"`
	Threads  int    `json:"threads,omitempty"`
	MiB      int64  `json:"mib,omitempty"`
}

type mpsReply struct {
	Error   string      `json:"error,omitempty"`
	Server  int         `json:"server,omitempty"`
	UsedMiB int64       `json:"usedMiB,omitempty"`
	Clients []MPSClient `json:"clients,omitempty"`
}

// MPSControlMain runs the stand-in with the command line args (the
// program name left out) and returns its exit code. With -f (or -d,
// which stays in the foreground too: a supervisor owns the process) it
// is the control daemon of the one GPU CUDA_VISIBLE_DEVICES names (its
// UUID or index), serving the pipe folder CUDA_MPS_PIPE_DIRECTORY and
// logging to CUDA_MPS_LOG_DIRECTORY/control.log, until SIGTERM or a quit
// command; the simulator's state file is EnvSimState. Without arguments
// it is the control client: each line of stdin is a command to the
// daemon of CUDA_MPS_PIPE_DIRECTORY (quit, get_server_list, and the
// stand-in's get_clients), its answer on stdout.
func MPSControlMain(args []string, getenv func(string) string, stdin io.Reader, stdout,
	stderr io.Writer) int {
	if len(args) > 0 && (args[0] == "-f" || args[0] == "-d") {
		if err := runMPSDaemon(getenv, stderr); err != nil {
			fmt.Fprintln(stderr, "nvidia-cuda-mps-control (simulated):", err)
			return 1
		}
		return 0
	}
	if len(args) > 0 {
		fmt.Fprintf(stderr, "nvidia-cuda-mps-control (simulated): unknown arguments %q\n", args)
		return 2
	}
	if err := runMPSClient(pipeDir(getenv), stdin, stdout); err != nil {
		fmt.Fprintln(stderr, "nvidia-cuda-mps-control (simulated):", err)
		return 1
	}
	return 0
}

func pipeDir(getenv func(string) string) string {
	if p := getenv(EnvMPSPipeDir); p != "" {
		return p
	}
	return "/tmp/nvidia-mps" // the real daemon's default
}

// mpsDaemon is a running stand-in daemon.
type mpsDaemon struct {
	sim     *Sim
	gpu     int
	memMiB  int64
	pipe    string
	log     io.Writer
	quit    chan struct{}
	quitted sync.Once

	mu      sync.Mutex
	clients map[*mpsConn]*MPSClient
}

type mpsConn struct{ net.Conn }

func runMPSDaemon(getenv func(string) string, stderr io.Writer) error {
	state := getenv(EnvSimState)
	if state == "" {
		return fmt.Errorf("%s is not set: the stand-in serves the simulated GPUs of a state file",
			EnvSimState)
	}
	sim, err := Open(state)
	if err != nil {
		return err
	}
	defer sim.Close()
	gpu, memMiB, err := mpsGPU(sim, getenv(EnvVisibleDevices))
	if err != nil {
		return err
	}
	pipe := pipeDir(getenv)
	logDir := getenv(EnvMPSLogDir)
	if logDir == "" {
		logDir = "/var/log/nvidia-mps"
	}
	for _, dir := range []string{pipe, logDir} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	logFile, err := os.OpenFile(filepath.Join(logDir, "control.log"),
		os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer logFile.Close()
	// One daemon per pipe folder, as the real daemon's control_lock.
	lock, err := os.OpenFile(filepath.Join(pipe, "control_lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		return fmt.Errorf("another MPS control daemon serves %s", pipe)
	}
	sock := filepath.Join(pipe, "control")
	_ = os.Remove(sock)
	ln, err := net.Listen("unix", sock)
	if err != nil {
		return err
	}
	d := &mpsDaemon{sim: sim, gpu: gpu, memMiB: memMiB, pipe: pipe, log: logFile,
		quit: make(chan struct{}), clients: map[*mpsConn]*MPSClient{}}
	if err := d.register(true); err != nil {
		ln.Close()
		return err
	}
	d.logf("Control daemon started (pid %d) on GPU %d", os.Getpid(), gpu)
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sigs)
	go func() {
		select {
		case <-sigs:
			d.stop()
		case <-d.quit:
		}
		ln.Close()
	}()
	for {
		c, err := ln.Accept()
		if err != nil {
			break
		}
		go d.serve(&mpsConn{c})
	}
	_ = os.Remove(sock)
	d.logf("Control daemon exiting")
	return d.register(false)
}

// mpsGPU is the GPU a daemon serves and its memory.
func mpsGPU(sim *Sim, visible string) (int, int64, error) {
	if visible == "" || strings.Contains(visible, ",") {
		return 0, 0, fmt.Errorf("%s=%q: the stand-in serves exactly one GPU", EnvVisibleDevices,
			visible)
	}
	gpus, err := sim.GPUs()
	if err != nil {
		return 0, 0, err
	}
	for _, g := range gpus {
		if g.UUID == visible || strconv.Itoa(g.Index) == visible {
			if g.Err != nil {
				return 0, 0, g.Err
			}
			return g.Index, g.MemoryMiB, nil
		}
	}
	return 0, 0, fmt.Errorf("%s=%q names no GPU of the simulated server", EnvVisibleDevices,
		visible)
}

// register records the daemon on its GPU (or drops its own record).
func (d *mpsDaemon) register(on bool) error {
	return d.sim.change(func(st *simState) (bool, error) {
		g, err := st.gpu("register MPS daemon", d.gpu)
		if err != nil {
			return false, err
		}
		if !on {
			if g.MPS == nil || g.MPS.PID != os.Getpid() {
				return false, nil
			}
			g.MPS = nil
			return true, nil
		}
		g.MPS = &simMPS{PID: os.Getpid(), PipeDir: d.pipe}
		return true, nil
	})
}

func (d *mpsDaemon) logf(format string, args ...any) {
	fmt.Fprintf(d.log, "[%s] %s\n", time.Now().Format(time.RFC3339), fmt.Sprintf(format, args...))
}

func (d *mpsDaemon) stop() { d.quitted.Do(func() { close(d.quit) }) }

// serve answers one connection: a control command, or a client's
// connect and allocations until it hangs up (its memory is then free).
func (d *mpsDaemon) serve(c *mpsConn) {
	defer func() {
		d.mu.Lock()
		if cl, ok := d.clients[c]; ok {
			d.logf("Client %d disconnected", cl.PID)
		}
		delete(d.clients, c)
		d.mu.Unlock()
		c.Close()
	}()
	r := bufio.NewScanner(c)
	enc := json.NewEncoder(c)
	for r.Scan() {
		var req mpsRequest
		if err := json.Unmarshal(r.Bytes(), &req); err != nil {
			_ = enc.Encode(mpsReply{Error: "bad request: " + err.Error()})
			return
		}
		rep := d.handle(c, req)
		if err := enc.Encode(rep); err != nil {
			return
		}
		if req.Op == "quit" {
			d.stop()
			return
		}
	}
}

func (d *mpsDaemon) handle(c *mpsConn, req mpsRequest) mpsReply {
	d.mu.Lock()
	defer d.mu.Unlock()
	switch req.Op {
	case "quit":
		return mpsReply{}
	case "get_server_list":
		return mpsReply{Server: os.Getpid()}
	case "get_clients":
		var out []MPSClient
		for _, cl := range d.clients {
			out = append(out, *cl)
		}
		return mpsReply{Clients: out}
	case "connect":
		if req.Threads < 0 || req.Threads > 100 {
			return mpsReply{Error: fmt.Sprintf("%s=%d is not a percentage", EnvMPSThreads,
				req.Threads)}
		}
		if req.Threads == 0 {
			req.Threads = 100
		}
		d.clients[c] = &MPSClient{PID: req.PID, LimitMiB: req.LimitMiB, Threads: req.Threads}
		d.logf("Client %d connected (pinned memory limit %d MiB, %d%% threads)", req.PID,
			req.LimitMiB, req.Threads)
		return mpsReply{Server: os.Getpid()}
	case "alloc":
		cl := d.clients[c]
		if cl == nil {
			return mpsReply{Error: "not connected"}
		}
		if cl.LimitMiB > 0 && cl.UsedMiB+req.MiB > cl.LimitMiB {
			return mpsReply{Error: fmt.Sprintf("%s: client %d would hold %d MiB, over its pinned "+
				"device "+
				"memory limit of %d MiB",
				ErrCUDAOutOfMemory, cl.PID, cl.UsedMiB+req.MiB, cl.LimitMiB)}
		}
		var total int64
		for _, o := range d.clients {
			total += o.UsedMiB
		}
		if total+req.MiB > d.memMiB {
			return mpsReply{Error: fmt.Sprintf("%s: the GPU has %d MiB free", ErrCUDAOutOfMemory,
				d.memMiB-total)}
		}
		cl.UsedMiB += req.MiB
		return mpsReply{UsedMiB: cl.UsedMiB}
	}
	return mpsReply{Error: fmt.Sprintf("unknown command %q", req.Op)}
}

// runMPSClient sends each line of in to the daemon of pipe.
func runMPSClient(pipe string, in io.Reader, out io.Writer) error {
	c, err := dialMPS(context.Background(), pipe)
	if err != nil {
		return err
	}
	defer c.Close()
	lines := bufio.NewScanner(in)
	for lines.Scan() {
		cmd := strings.TrimSpace(lines.Text())
		if cmd == "" {
			continue
		}
		var rep mpsReply
		if err := c.call(mpsRequest{Op: cmd}, &rep); err != nil {
			return err
		}
		if rep.Error != "" {
			return errors.New(rep.Error)
		}
		switch cmd {
		case "get_server_list":
			fmt.Fprintln(out, rep.Server)
		case "get_clients":
			b, _ := json.Marshal(rep.Clients)
			fmt.Fprintln(out, string(b))
		}
	}
	return lines.Err()
}

// mpsClientConn is a connection to a daemon.
type mpsClientConn struct {
	net.Conn
	r *bufio.Scanner
}

func dialMPS(ctx context.Context, pipe string) (*mpsClientConn, error) {
	var dl net.Dialer
	c, err := dl.DialContext(ctx, "unix", filepath.Join(pipe, "control"))
	if err != nil {
		return nil, fmt.Errorf("%w: no MPS control daemon answers in %s: %v", ErrMPSConnection,
			pipe, err)
	}
	return &mpsClientConn{Conn: c, r: bufio.NewScanner(c)}, nil
}

func (c *mpsClientConn) call(req mpsRequest, rep *mpsReply) error {
	b, _ := json.Marshal(req)
	if _, err := c.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("%w: %v", ErrMPSConnection, err)
	}
	if !c.r.Scan() {
		return fmt.Errorf("%w: the daemon hung up", ErrMPSConnection)
	}
	return json.Unmarshal(c.r.Bytes(), rep)
}

// MPSClients returns the clients of the daemon serving pipe.
func MPSClients(ctx context.Context, pipe string) ([]MPSClient, error) {
	c, err := dialMPS(ctx, pipe)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	var rep mpsReply
	if err := c.call(mpsRequest{Op: "get_clients"}, &rep); err != nil {
		return nil, err
	}
	return rep.Clients, nil
}
