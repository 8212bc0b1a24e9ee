package conformance

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"
)

// hookError is the failure of a hook the user gave the suite
// (RestartCommand, RestartDriver), not of the driver: the report names
// the hook and what it printed, and judges nothing on it.
type hookError struct{ msg string }

func (e *hookError) Error() string { return e.msg }

// isHookError reports whether err is a hook's failure.
func isHookError(err error) bool {
	var he *hookError
	return errors.As(err, &he)
}

// hookWaitDelay is how long a hook that was killed for its bound, or
// that exited while a process it started still holds its output, is
// waited for before the suite goes on (exec.Cmd.WaitDelay).
const hookWaitDelay = 5 * time.Second

// hookOutputTail is how much of a failed hook's output a message shows.
const hookOutputTail = 2048

// runHook runs the hook argv (no shell) and returns when it exits, or
// after timeout, when it is killed. Its output goes to a file, not a
// pipe, so that a process it leaves behind (a driver it restarted with
// "&") does not hold the suite: only the hook's own process is waited
// for. A hook that fails or does not return in time is a *hookError
// with its output; the file is kept then (and named), else removed.
// what names the hook in messages ("the restart command").
func runHook(ctx context.Context, what string, argv []string, timeout time.Duration) error {
	f, err := os.CreateTemp("", "drakit-conformance-hook-*.log")
	if err != nil {
		return fmt.Errorf("create the output file of %s: %w", what, err)
	}
	hctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(hctx, argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.WaitDelay = hookWaitDelay
	runErr := cmd.Run()
	_ = f.Close()
	if runErr == nil {
		_ = os.Remove(f.Name())
		return nil
	}
	out := fileTail(f.Name(), hookOutputTail)
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("%s %q: %w", what, argv, ctx.Err())
	case hctx.Err() != nil:
		return &hookError{fmt.Sprintf("%s %q did not return within %s and was killed (a hook must return once it has done its work; a process it starts in the background must not keep it waiting); its output (%s): %s", what, argv, timeout, f.Name(), out)}
	}
	return &hookError{fmt.Sprintf("%s %q failed: %v; its output (%s): %s", what, argv, runErr, f.Name(), out)}
}

// runHookFunc calls the hook fn with a context bounded by timeout and
// returns its error as a *hookError; a hook that does not return within
// timeout plus hookWaitDelay is left running and reported as not
// returning.
func runHookFunc(ctx context.Context, what string, fn func(context.Context) error, timeout time.Duration) error {
	hctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- fn(hctx) }()
	select {
	case err := <-done:
		switch {
		case err == nil:
			return nil
		case ctx.Err() != nil:
			return fmt.Errorf("%s: %w", what, ctx.Err())
		}
		return &hookError{fmt.Sprintf("%s failed: %v", what, err)}
	case <-time.After(timeout + hookWaitDelay):
		return &hookError{fmt.Sprintf("%s did not return within %s (its context was canceled after %s)", what, timeout+hookWaitDelay, timeout)}
	}
}

// fileTail returns the last n bytes of the file at path, trimmed, or
// what went wrong reading it.
func fileTail(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(unreadable: %v)", err)
	}
	if len(data) > n {
		data = append([]byte("[...]"), data[len(data)-n:]...)
	}
	s := strings.TrimSpace(string(bytes.ToValidUTF8(data, []byte("?"))))
	if s == "" {
		return "(none)"
	}
	return s
}
