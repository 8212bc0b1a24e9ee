package driver

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/klog/v2"

	kit "github.com/drakit/drakit/driver"
	"github.com/drakit/drakit/examples/nvidia/nvml"
	"github.com/drakit/drakit/statefile"
)

// The MPS control daemons the driver runs, one per shared GPU: started
// for the GPU's first share, reused by the next, stopped with the last,
// restarted when it dies, found again by a driver that was killed. What
// the driver owns is recorded, never inferred: a GPU's record (its
// folder in <state>/mps/<GPU UUID>/) names the shares and whole-GPU
// claims that hold it and the daemon it started, by PID and by a nonce
// the daemon carries in its environment, so a PID reused by another
// process is never taken for the daemon.

// MPSControl is how the driver runs NVIDIA's MPS control program:
// Command is the program and its first arguments, to which the driver
// adds "-f" to run the daemon in the foreground (it supervises it) and
// nothing to run the control client (it sends "quit"); Env is added to
// the environment (the simulator's state file for its stand-in).
type MPSControl struct {
	Command []string
	Env     []string
}

// DefaultMPSControl runs nvidia-cuda-mps-control from the PATH.
var DefaultMPSControl = MPSControl{Command: []string{"nvidia-cuda-mps-control"}}

// mpsMarker is the environment variable that names a daemon's GPU folder
// and nonce: the proof that a process is the daemon a record names.
const mpsMarker = "DRAKIT_MPS_DAEMON"

// mpsRecord is what the driver owns on one GPU.
type mpsRecord struct {
	GPU string `json:"gpu"`
	// Shares are the shares that hold the GPU, "<claim UID>/<share ID>".
	Shares []string `json:"shares,omitempty"`
	// Whole are the claims that hold the GPU whole (its shares wait).
	Whole []string `json:"whole,omitempty"`
	// Nonce is the daemon's marker, recorded before it is started; PID
	// its process once started.
	Nonce string `json:"nonce,omitempty"`
	PID   int    `json:"pid,omitempty"`
}

// mpsManager runs the daemons. Its methods take its lock, in the
// process and across the two processes of a rolling update (a file
// lock), so every decision is made on the records as they are.
type mpsManager struct {
	dir     string
	ctl     MPSControl
	modes   nvml.ComputeModeSetter // nil: the backend has no compute modes
	index   func(uuid string) (int, bool)
	poll    time.Duration
	timeout time.Duration // for a daemon to start or quit

	mu       sync.Mutex
	reaped   map[int]chan struct{} // daemons this process started, closed when reaped
	restarts int
}

func newMPSManager(dir string, ctl MPSControl, nv nvml.Interface, index func(string) (int,
	bool)) (*mpsManager, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("MPS state folder: %w", err)
	}
	m := &mpsManager{dir: dir, ctl: ctl, index: index, poll: time.Second, timeout: 10 * time.Second,
		reaped: map[int]chan struct{}{}}
	if cm, ok := nv.(nvml.ComputeModeSetter); ok {
		m.modes = cm
	}
	return m, nil
}

// locked runs fn under the manager's locks.
func (m *mpsManager) locked(fn func() error) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	l, err := statefile.Acquire(filepath.Join(m.dir, "lock"))
	if err != nil {
		return fmt.Errorf("MPS state lock: %w", err)
	}
	defer l.Release()
	return fn()
}

// gpuDir is GPU uuid's folder, named by the first 8 hex digits of its
// UUID (the record names the GPU in full): the daemon's control socket
// under it must fit a unix socket's 108 bytes.
func (m *mpsManager) gpuDir(uuid string) string {
	id := strings.TrimPrefix(uuid, "GPU-")
	if len(id) > 8 {
		id = id[:8]
	}
	return filepath.Join(m.dir, id)
}

func (m *mpsManager) pipeDir(uuid string) string { return filepath.Join(m.gpuDir(uuid), "pipe") }
func (m *mpsManager) logDir(uuid string) string  { return filepath.Join(m.gpuDir(uuid), "log") }

func (m *mpsManager) read(uuid string) (*mpsRecord, error) {
	b, err := os.ReadFile(filepath.Join(m.gpuDir(uuid), "record.json"))
	if errors.Is(err, os.ErrNotExist) {
		return &mpsRecord{GPU: uuid}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read MPS record of GPU %s: %w", uuid, err)
	}
	var r mpsRecord
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("read MPS record of GPU %s: %w", uuid, err)
	}
	if r.GPU != uuid {
		return nil, fmt.Errorf("read MPS record of GPU %s: its folder holds GPU %s's", uuid, r.GPU)
	}
	return &r, nil
}

// write keeps r; a record that holds nothing and runs nothing is removed
// with its folder.
func (m *mpsManager) write(r *mpsRecord) error {
	if len(r.Shares) == 0 && len(r.Whole) == 0 && r.Nonce == "" {
		if err := os.RemoveAll(m.gpuDir(r.GPU)); err != nil {
			return fmt.Errorf("remove MPS folder of GPU %s: %w", r.GPU, err)
		}
		return nil
	}
	if err := os.MkdirAll(m.gpuDir(r.GPU), 0o755); err != nil {
		return err
	}
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	if err := statefile.WriteFile(filepath.Join(m.gpuDir(r.GPU), "record.json"), b); err != nil {
		return fmt.Errorf("write MPS record of GPU %s: %w", r.GPU, err)
	}
	return nil
}

// records reads every GPU's record.
func (m *mpsManager) records() ([]*mpsRecord, error) {
	entries, err := os.ReadDir(m.dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []*mpsRecord
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(m.dir, e.Name(), "record.json"))
		if errors.Is(err, os.ErrNotExist) {
			continue // a folder whose record was lost: reconcile kills what runs there
		}
		var r mpsRecord
		if err == nil {
			err = json.Unmarshal(b, &r)
		}
		if err != nil {
			return nil, fmt.Errorf("read MPS record %s: %w", e.Name(), err)
		}
		out = append(out, &r)
	}
	return out, nil
}

// has says whether GPU uuid has a record (shares, whole claims or a
// daemon).
func (m *mpsManager) has(uuid string) bool {
	_, err := os.Stat(filepath.Join(m.gpuDir(uuid), "record.json"))
	return err == nil
}

// shareKey names a share in the records.
func shareKey(claim kit.ClaimRef, dev kit.AllocatedDevice) string {
	id := ""
	if dev.ShareID != nil {
		id = string(*dev.ShareID)
	}
	return string(claim.UID) + "/" + id
}

// acquireShare records that share key holds GPU uuid and makes sure its
// daemon runs; it returns the daemon's pipe folder. A GPU a claim holds
// whole is refused. Recording first makes a crash at any point leave a
// record that the next process reconciles.
func (m *mpsManager) acquireShare(ctx context.Context, uuid, key string) (string, error) {
	err := m.locked(func() error {
		r, err := m.read(uuid)
		if err != nil {
			return err
		}
		if len(r.Whole) > 0 {
			return fmt.Errorf("GPU %s is held whole by claim %s: its shares wait until it is "+
				"released",
				uuid, r.Whole[0])
		}
		if !slices.Contains(r.Shares, key) {
			r.Shares = append(r.Shares, key)
			slices.Sort(r.Shares)
			if err := m.write(r); err != nil {
				return err
			}
		}
		return m.ensure(ctx, r)
	})
	return m.pipeDir(uuid), err
}

// releaseShare drops share key from GPU uuid and stops its daemon with
// the last share. It is idempotent.
func (m *mpsManager) releaseShare(ctx context.Context, uuid, key string) error {
	if !m.has(uuid) {
		// Nothing recorded: the share was never acquired (the runtime
		// serializes the calls of one claim, so it is not being).
		return nil
	}
	return m.locked(func() error {
		r, err := m.read(uuid)
		if err != nil {
			return err
		}
		r.Shares = slices.DeleteFunc(r.Shares, func(s string) bool { return s == key })
		return m.settle(ctx, r)
	})
}

// holdWhole records that claim holds GPU uuid whole; refused while
// shares hold it.
func (m *mpsManager) holdWhole(uuid, claim string) error {
	return m.locked(func() error {
		r, err := m.read(uuid)
		if err != nil {
			return err
		}
		if len(r.Shares) > 0 {
			return fmt.Errorf("GPU %s is shared (%d MPS shares hold it): it is not handed out "+
				"whole "+
				"until they go", uuid, len(r.Shares))
		}
		if slices.Contains(r.Whole, claim) {
			return nil
		}
		r.Whole = append(r.Whole, claim)
		slices.Sort(r.Whole)
		return m.write(r)
	})
}

// releaseWhole drops claim from every GPU it holds whole; idempotent.
func (m *mpsManager) releaseWhole(ctx context.Context, claim string) error {
	if rs, err := m.records(); err == nil && !slices.ContainsFunc(rs, func(r *mpsRecord) bool {
		return slices.Contains(r.Whole, claim)
	}) {
		// The claim holds no GPU whole (the runtime serializes the calls
		// of one claim, so it is not taking one now).
		return nil
	}
	return m.locked(func() error {
		rs, err := m.records()
		if err != nil {
			return err
		}
		for _, r := range rs {
			if !slices.Contains(r.Whole, claim) {
				continue
			}
			r.Whole = slices.DeleteFunc(r.Whole, func(s string) bool { return s == claim })
			if err := m.settle(ctx, r); err != nil {
				return err
			}
		}
		return nil
	})
}

// settle writes r after a release: with shares left its daemon keeps
// running, without it is stopped and the GPU given back.
func (m *mpsManager) settle(ctx context.Context, r *mpsRecord) error {
	if len(r.Shares) > 0 {
		return m.write(r)
	}
	if err := m.stop(ctx, r); err != nil {
		return err
	}
	return m.write(r)
}

// alive says whether r's daemon runs: its PID's environment carries r's
// marker (a zombie's has none).
func (m *mpsManager) alive(r *mpsRecord) bool {
	if r.PID <= 0 || r.Nonce == "" {
		return false
	}
	env, err := os.ReadFile("/proc/" + strconv.Itoa(r.PID) + "/environ")
	if err != nil {
		return false
	}
	want := []byte(mpsMarker + "=" + m.gpuDir(r.GPU) + "#" + r.Nonce)
	return slices.ContainsFunc(bytes.Split(env, []byte{0}),
		func(kv []byte) bool { return bytes.Equal(kv, want) })
}

// ensure starts r's daemon unless it runs: the nonce is recorded first,
// the GPU set to ExclusiveProcess, the daemon started in a session of
// its own (it outlives this process) and its PID recorded; it is ready
// once its pipe folder has its control file.
func (m *mpsManager) ensure(ctx context.Context, r *mpsRecord) error {
	if m.alive(r) {
		return nil
	}
	if done, ok := m.reaped[r.PID]; ok {
		select {
		case <-done: // the daemon this process started died and was reaped
			delete(m.reaped, r.PID)
		default:
		}
	}
	logger := klog.FromContext(ctx)
	gpu, ok := m.index(r.GPU)
	if !ok {
		return fmt.Errorf("GPU %s is gone: no MPS daemon for it", r.GPU)
	}
	var nonce [8]byte
	if _, err := rand.Read(nonce[:]); err != nil {
		return err
	}
	r.Nonce, r.PID = hex.EncodeToString(nonce[:]), 0
	if err := m.write(r); err != nil {
		return err
	}
	pipe, logDir := m.pipeDir(r.GPU), m.logDir(r.GPU)
	for _, dir := range []string{pipe, logDir} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("MPS folders of GPU %d: %w", gpu, err)
		}
	}
	// The control file of a daemon that died is stale: the new one
	// makes its own.
	_ = os.Remove(filepath.Join(pipe, "control"))
	if m.modes != nil {
		if err := m.modes.SetComputeMode(gpu, nvml.ComputeModeExclusiveProcess); err != nil {
			return fmt.Errorf("set GPU %d to ExclusiveProcess for MPS: %w", gpu, err)
		}
	}
	if len(m.ctl.Command) == 0 {
		return errors.New("no MPS control program (WithMPSControl)")
	}
	out, err := os.OpenFile(filepath.Join(logDir, "daemon.out"),
		os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer out.Close()
	cmd := exec.Command(m.ctl.Command[0], append(slices.Clone(m.ctl.Command[1:]), "-f")...)
	cmd.Env = append(append(os.Environ(), m.ctl.Env...),
		"CUDA_VISIBLE_DEVICES="+r.GPU, "CUDA_MPS_PIPE_DIRECTORY="+pipe,
		"CUDA_MPS_LOG_DIRECTORY="+logDir, mpsMarker+"="+m.gpuDir(r.GPU)+"#"+r.Nonce)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start the MPS control daemon of GPU %d: %w", gpu, err)
	}
	done := make(chan struct{})
	m.reaped[cmd.Process.Pid] = done
	go func() { _ = cmd.Wait(); close(done) }()
	r.PID = cmd.Process.Pid
	if err := m.write(r); err != nil {
		return err
	}
	deadline := time.Now().Add(m.timeout)
	for {
		if _, err := os.Stat(filepath.Join(pipe, "control")); err == nil {
			logger.Info("Started MPS control daemon", "gpu", gpu, "uuid", r.GPU, "pid", r.PID,
				"shares", len(r.Shares))
			return nil
		}
		select {
		case <-done:
			return fmt.Errorf("the MPS control daemon of GPU %d exited at start: %s", gpu,
				tail(filepath.Join(logDir, "daemon.out")))
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			return fmt.Errorf("the MPS control daemon of GPU %d did not serve within %v: %s", gpu,
				m.timeout, tail(filepath.Join(logDir, "daemon.out")))
		}
	}
}

// stop ends r's daemon (quit through the control client, SIGKILL when it
// does not go), gives the GPU its Default compute mode back and clears
// the daemon from r.
func (m *mpsManager) stop(ctx context.Context, r *mpsRecord) error {
	if r.Nonce == "" {
		return nil
	}
	if m.alive(r) {
		cmd := exec.CommandContext(ctx, m.ctl.Command[0], m.ctl.Command[1:]...)
		cmd.Env = append(append(os.Environ(), m.ctl.Env...),
			"CUDA_MPS_PIPE_DIRECTORY="+m.pipeDir(r.GPU))
		cmd.Stdin = strings.NewReader("quit\n")
		out, qerr := cmd.CombinedOutput()
		if qerr != nil {
			// The control client could not tell it: a signal can.
			_ = syscall.Kill(r.PID, syscall.SIGTERM)
		}
		deadline := time.Now().Add(m.timeout)
		for m.alive(r) && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if m.alive(r) {
			klog.FromContext(ctx).Info("MPS control daemon did not quit; killing it", "uuid", r.GPU,
				"pid", r.PID, "quit", string(out), "err", qerr)
			_ = syscall.Kill(r.PID, syscall.SIGKILL)
		}
		if done, ok := m.reaped[r.PID]; ok {
			<-done
			delete(m.reaped, r.PID)
		}
	}
	if gpu, ok := m.index(r.GPU); ok && m.modes != nil {
		if err := m.modes.SetComputeMode(gpu, nvml.ComputeModeDefault); err != nil {
			return fmt.Errorf("give GPU %d its Default compute mode back: %w", gpu, err)
		}
	}
	klog.FromContext(ctx).Info("Stopped MPS control daemon", "uuid", r.GPU, "pid", r.PID)
	r.Nonce, r.PID = "", 0
	return nil
}

// heldMPS is what the runtime's held claims hold: shares and whole
// claims by GPU UUID.
type heldMPS struct{ shares, whole map[string][]string }

// reconcile makes the records match what the runtime holds (its
// checkpoint is the truth): a share or whole claim no held claim has is
// dropped, one a held claim has that the record lost is added; a GPU
// with shares gets its daemon (started again if it died), one without
// is stopped; a process that carries the marker of this folder and no
// record's nonce (its record was lost) is killed.
func (m *mpsManager) reconcile(ctx context.Context, held heldMPS) error {
	return m.locked(func() error {
		rs, err := m.records()
		if err != nil {
			return err
		}
		byGPU := map[string]*mpsRecord{}
		for _, r := range rs {
			byGPU[r.GPU] = r
		}
		for uuid := range held.shares {
			if byGPU[uuid] == nil {
				byGPU[uuid] = &mpsRecord{GPU: uuid}
			}
		}
		for uuid := range held.whole {
			if byGPU[uuid] == nil {
				byGPU[uuid] = &mpsRecord{GPU: uuid}
			}
		}
		m.killOrphans(ctx, byGPU)
		var errs []error
		for uuid, r := range byGPU {
			r.Shares, r.Whole = sorted(held.shares[uuid]), sorted(held.whole[uuid])
			if len(r.Shares) > 0 {
				err = m.ensure(ctx, r)
			} else {
				err = m.settle(ctx, r)
			}
			if err == nil {
				err = m.write(r)
			}
			errs = append(errs, err)
		}
		return errors.Join(errs...)
	})
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return slices.Compact(s)
}

// killOrphans kills daemons of this folder that no record names.
func (m *mpsManager) killOrphans(ctx context.Context, byGPU map[string]*mpsRecord) {
	procs, _ := filepath.Glob("/proc/[0-9]*/environ")
	prefix := []byte(mpsMarker + "=" + m.dir + string(filepath.Separator))
	for _, p := range procs {
		env, err := os.ReadFile(p)
		if err != nil || !bytes.Contains(env, prefix) {
			continue
		}
		pid, err := strconv.Atoi(strings.Split(p, "/")[2])
		if err != nil {
			continue
		}
		owned := false
		for _, r := range byGPU {
			if r.PID == pid && m.alive(r) {
				owned = true
			}
		}
		if !owned {
			klog.FromContext(ctx).Info("Killing an MPS control daemon no record names (its "+
				"record was lost)",
				"pid", pid)
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// watch restarts the daemon of a GPU that shares hold when it died,
// every poll, until ctx is done.
func (m *mpsManager) watch(ctx context.Context) {
	t := time.NewTicker(m.poll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		// A look without the locks first: a node without shares, or with
		// its daemons alive, takes no lock.
		rs, err := m.records()
		if err != nil || !slices.ContainsFunc(rs, func(r *mpsRecord) bool {
			return len(r.Shares) > 0 && !m.alive(r)
		}) {
			continue
		}
		err = m.locked(func() error {
			rs, err := m.records()
			if err != nil {
				return err
			}
			for _, r := range rs {
				if len(r.Shares) == 0 || m.alive(r) {
					continue
				}
				klog.FromContext(ctx).Info("MPS control daemon died; starting it again", "uuid",
					r.GPU, "pid", r.PID, "shares", len(r.Shares))
				m.restarts++
				if err := m.ensure(ctx, r); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			klog.FromContext(ctx).Error(err, "MPS control daemons")
		}
	}
}

// tail is the end of a log file, for an error message.
func tail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	if len(b) > 500 {
		b = b[len(b)-500:]
	}
	s := strings.TrimSpace(string(b))
	if s == "" {
		return "(no output)"
	}
	return s
}
