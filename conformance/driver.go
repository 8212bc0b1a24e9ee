package conformance

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/util/uuid"
	drapbv1 "k8s.io/kubelet/pkg/apis/dra/v1"

	"github.com/drakit/drakit/internal/kubeletclient"
)

// errDriverGone ends a run: the driver stopped serving and could not be
// brought back.
var errDriverGone = errors.New("the driver is gone")

// startDriver starts StartCommand as a child process in its own process
// group, its output going to the driver log (and Config.DriverOutput).
func (r *runner) startDriver() error {
	cmd := exec.Command(r.cfg.StartCommand[0], r.cfg.StartCommand[1:]...)
	cmd.Env = append(os.Environ(), r.cfg.StartEnv...)
	out := io.Writer(r.logTail)
	if r.logFile != nil {
		out = io.MultiWriter(r.logFile, r.logTail)
	}
	if r.cfg.DriverOutput != nil {
		out = io.MultiWriter(out, r.cfg.DriverOutput)
	}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start driver %q: %w", r.cfg.StartCommand[0], err)
	}
	done := make(chan struct{})
	r.proc, r.procDone = cmd, done
	go func() {
		err := cmd.Wait()
		r.procMu.Lock()
		r.procErr, r.procExit = err, time.Now()
		r.procMu.Unlock()
		close(done)
	}()
	return nil
}

// openDriverLog creates the file that keeps the started driver's output
// (Config.DriverLog, or a new file in the temporary folder).
func (r *runner) openDriverLog() error {
	r.logTail = &tailBuffer{max: 16 << 10}
	path := r.cfg.DriverLog
	var f *os.File
	var err error
	if path == "" {
		f, err = os.CreateTemp("", "drakit-conformance-driver-*.log")
	} else {
		f, err = os.Create(path)
	}
	if err != nil {
		return fmt.Errorf("create driver log: %w", err)
	}
	r.logFile = f
	r.report.DriverLog = f.Name()
	return nil
}

// stopDriver sends sig to the driver's process group, waits for it (up
// to 10 s, then SIGKILL) and forgets it.
func (r *runner) stopDriver(sig syscall.Signal) {
	if r.proc == nil {
		return
	}
	pid := r.proc.Process.Pid
	_ = syscall.Kill(-pid, sig)
	select {
	case <-r.procDone:
	case <-time.After(10 * time.Second):
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		<-r.procDone
	}
	r.proc, r.procDone = nil, nil
}

// driverExited reports whether the driver the suite started has exited
// (false when the suite did not start it), and how.
func (r *runner) driverExited() (bool, string) {
	if r.procDone == nil {
		return false, ""
	}
	select {
	case <-r.procDone:
		r.procMu.Lock()
		err := r.procErr
		r.procMu.Unlock()
		how := "exited with status 0"
		if err != nil {
			how = err.Error()
		}
		return true, fmt.Sprintf("the driver process %s", how)
	default:
		return false, ""
	}
}

// logLines returns the last lines of the started driver's output, for
// messages, with the path of the full log.
func (r *runner) logLines() string {
	if r.logTail == nil {
		return ""
	}
	lines := r.logTail.lastLines(15)
	if lines == "" {
		return fmt.Sprintf("\n(the driver wrote nothing; log: %s)", r.report.DriverLog)
	}
	return fmt.Sprintf("\nlast lines of the driver's output (all of it in %s):\n%s", r.report.DriverLog, lines)
}

// probeClaim is the claim the liveness probe unprepares: one the driver
// never prepared.
const probeClaim = "alive-probe"

// probe reports whether the node service answers an unprepare of an
// unknown claim (what it answers does not matter).
func (r *runner) probe(ctx context.Context) error {
	if r.node == nil {
		return errors.New("no node service connection")
	}
	r.probes++
	cctx, cancel := r.callContext(ctx, min(10*time.Second, r.cfg.CallTimeout))
	defer cancel()
	_, err := r.node.NodeUnprepareResources(cctx, &drapbv1.NodeUnprepareResourcesRequest{Claims: []*drapbv1.Claim{{Namespace: r.ns, Name: probeClaim, Uid: string(uuid.NewUUID())}}})
	if kubeletclient.IsTransport(err) {
		return fmt.Errorf("the node service does not answer: %w", err)
	}
	return nil
}

// alive reports whether the driver still serves: its process is running
// (when the suite started it) and the node service answers the liveness
// probe. When it does not, why says what is wrong, and byProbe whether
// the probe's own call ended it. That is read from the call's error: a
// connection that broke while the call was under way (the driver was
// serving when the probe was sent), or, for a driver the suite started,
// a call cut short by its process's exit; not one that could not be
// made (nothing listening: it had stopped before) nor a call that timed
// out (a driver that hangs); and, for a driver the suite started, only
// if its process had not exited before the probe was sent. How long the
// process then takes to exit does not matter (a panic dump on a loaded
// machine takes seconds); its exit status, once it comes, is named.
func (r *runner) alive(ctx context.Context) (ok bool, why string, byProbe bool) {
	if exited, why := r.driverExited(); exited {
		return false, why, false
	}
	sent := time.Now()
	err := r.probe(ctx)
	if err == nil {
		return true, "", false
	}
	why, byProbe = err.Error(), brokeDuringCall(err)
	if r.procDone == nil {
		return false, why, byProbe
	}
	if exited, _ := r.driverExited(); exited && status.Code(err) == codes.Canceled && ctx.Err() == nil {
		// The call was cut short because the process exited during it
		// (callContext): when it exited says whether that came after
		// the probe was sent.
		byProbe = true
	}
	if byProbe {
		// For the message only: the exit status of a process whose
		// connections broke, once it has exited (recover kills it
		// otherwise).
		select {
		case <-r.procDone:
		case <-time.After(min(10*time.Second, r.cfg.CallTimeout)):
		case <-ctx.Done():
		}
	}
	if exited, how := r.driverExited(); exited {
		r.procMu.Lock()
		at := r.procExit
		r.procMu.Unlock()
		return false, how, byProbe && !at.Before(sent)
	}
	return false, why, byProbe
}

// brokeDuringCall reports whether a call's transport error says the
// connection broke while the call was under way (gRPC code Unavailable:
// EOF, reset, transport closing), rather than that it could not be made
// (nothing listening on the socket) or that it timed out.
func brokeDuringCall(err error) bool {
	if status.Code(err) != codes.Unavailable {
		return false
	}
	msg := err.Error()
	return !strings.Contains(msg, "while dialing") && !strings.Contains(msg, "connection refused") && !strings.Contains(msg, "no such file")
}

// servingAfter returns "" when the driver still serves after a check's
// call, else what went wrong, naming the call or, when the liveness
// probe after it ended the driver, the probe.
func (r *runner) servingAfter(ctx context.Context, call string) string {
	ok, why, byProbe := r.alive(ctx)
	switch {
	case ok:
		return ""
	case byProbe:
		return fmt.Sprintf("the driver answered %s, then the liveness probe sent after it (NodeUnprepareResources for claim %s, never prepared) ended it: %s", call, probeClaim, why)
	default:
		return fmt.Sprintf("after %s: %s", call, why)
	}
}

// canRestart reports whether the suite can restart the driver.
func (r *runner) canRestart() bool {
	return len(r.cfg.StartCommand) > 0 || r.cfg.RestartDriver != nil || len(r.cfg.RestartCommand) > 0
}

// restartDriver kills the driver without a chance to clean up and starts
// it again: SIGKILL and StartCommand for a driver the suite started, else
// Config.RestartDriver or RestartCommand, each bounded by
// PublishTimeout (a hook that fails or does not return is a
// *hookError). The caller registers it again.
//
// It returns the marks of the driver's slices for the node from before
// the new process started (see republication): taken once the old
// process is gone where the suite kills it, else before the hook runs.
func (r *runner) restartDriver(ctx context.Context) (sliceMarks, error) {
	var before sliceMarks
	switch {
	case r.cfg.RestartDriver != nil:
		before = r.sliceMarks(ctx)
		if err := runHookFunc(ctx, "the restart hook (Config.RestartDriver)", r.cfg.RestartDriver, r.cfg.PublishTimeout); err != nil {
			return nil, err
		}
	case len(r.cfg.RestartCommand) > 0:
		before = r.sliceMarks(ctx)
		if err := runHook(ctx, "the restart command", r.cfg.RestartCommand, r.cfg.PublishTimeout); err != nil {
			return nil, err
		}
	default:
		r.stopDriver(syscall.SIGKILL)
		before = r.sliceMarks(ctx)
		if err := r.startDriver(); err != nil {
			return nil, fmt.Errorf("restart the driver: %w", err)
		}
	}
	// The old connection points at a socket that is gone or about to be
	// replaced.
	r.node = nil
	return before, nil
}

// recover brings a driver that stopped serving back, as the kubelet
// would find it again: restart it, find its registration socket, call
// GetInfo and NotifyRegistrationStatus, dial its endpoint. It returns
// errDriverGone when that is not possible.
func (r *runner) recover(ctx context.Context, why string) error {
	if !r.canRestart() {
		return fmt.Errorf("%w (%s) and the suite cannot restart it (see Config.StartCommand, RestartDriver)%s", errDriverGone, why, r.logLines())
	}
	before, err := r.restartDriver(ctx)
	if err != nil {
		return fmt.Errorf("%w (%s); restarting it failed: %v%s", errDriverGone, why, err, r.logLines())
	}
	if err := r.register(ctx); err != nil {
		return fmt.Errorf("%w (%s); after a restart it does not register again: %v%s", errDriverGone, why, err, r.logLines())
	}
	r.restarted(before, false)
	return nil
}

// register finds the registration socket, connects to the endpoint and
// confirms the registration, as the kubelet's plugin watcher does when a
// socket (re)appears.
func (r *runner) register(ctx context.Context) error {
	if err := r.connect(ctx); err != nil {
		return err
	}
	if err := kubeletclient.NotifyRegistration(ctx, r.regSocket, true, ""); err != nil {
		return err
	}
	r.registered = time.Now()
	return nil
}

// callContext bounds one call to the driver: timeout, and the end of the
// driver process the suite started (a call to a driver that died fails
// at once instead of waiting for the timeout).
func (r *runner) callContext(ctx context.Context, timeout time.Duration) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	if done := r.procDone; done != nil {
		go func() {
			select {
			case <-done:
				cancel()
			case <-ctx.Done():
			}
		}()
	}
	return ctx, cancel
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(p), nil
}

// String returns what the buffer holds.
func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}

// lastLines returns the last n lines; when a Go panic or fatal error
// lies before them, its first lines come first (the message, not the end
// of its goroutine dump), then "...", then the last lines.
func (t *tailBuffer) lastLines(n int) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	lines := bytes.Split(bytes.TrimRight(t.buf, "\n"), []byte("\n"))
	from := max(0, len(lines)-n)
	for i := len(lines) - 1; i >= 0; i-- {
		if bytes.HasPrefix(lines[i], []byte("panic: ")) || bytes.HasPrefix(lines[i], []byte("fatal error: ")) {
			if i < from {
				const head = 3
				last := max(1, n-head-1)
				kept := append([][]byte{}, lines[i:min(i+head, len(lines))]...)
				kept = append(kept, []byte("..."))
				lines = append(kept, lines[max(i+head, len(lines)-last):]...)
				from = 0
			}
			break
		}
	}
	lines = lines[from:]
	var b strings.Builder
	for _, l := range lines {
		if len(l) > 0 {
			b.WriteString("  | ")
			b.Write(l)
			b.WriteByte('\n')
		}
	}
	return strings.TrimRight(b.String(), "\n")
}

// whileRunning returns a context that is canceled when the driver the
// suite started exits, so that waits for it end early.
func (r *runner) whileRunning(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	if done := r.procDone; done != nil {
		go func() {
			select {
			case <-done:
				cancel()
			case <-ctx.Done():
			}
		}()
	}
	return ctx, cancel
}
