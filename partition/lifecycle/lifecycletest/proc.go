package lifecycletest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// proc is a driver process of the kit.
type proc struct {
	cmd    *exec.Cmd
	done   chan struct{} // closed once it exited
	ready  chan string   // its DRA socket, once it serves
	mu     sync.Mutex
	output bytes.Buffer // what it printed, standard output and error
}

// startProc starts a driver process for j; it is stopped by PID when the
// test ends.
func (n *node) startProc(j job) (*proc, error) {
	raw, err := json.Marshal(j)
	if err != nil {
		return nil, err
	}
	p := &proc{done: make(chan struct{}), ready: make(chan string, 1)}
	p.cmd = exec.Command(os.Args[0], "-test.run=^$")
	p.cmd.Env = append(os.Environ(), childEnv+"="+string(raw))
	p.cmd.Stderr = writerFunc(p.write)
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start driver process: %w", err)
	}
	n.t.Cleanup(p.kill)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			line := sc.Text()
			if socket, ok := strings.CutPrefix(line, readyLine); ok {
				p.ready <- socket
			}
			_, _ = p.write([]byte(line + "\n"))
		}
		_ = p.cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

type writerFunc func([]byte) (int, error)

func (w writerFunc) Write(b []byte) (int, error) { return w(b) }

func (p *proc) write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.output.Write(b)
}

// tail is the last lines the process printed.
func (p *proc) tail() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	lines := strings.Split(strings.TrimSpace(p.output.String()), "\n")
	return strings.Join(lines[max(0, len(lines)-25):], "\n")
}

// wait waits until the process serves (its DRA socket) or exits (an
// error with what it printed last).
func (p *proc) wait() (string, error) {
	select {
	case socket := <-p.ready:
		return socket, nil
	case <-p.done:
		return "", fmt.Errorf("driver process %d exited (%v) before it served:\n%s",
			p.cmd.Process.Pid, p.cmd.ProcessState, p.tail())
	case <-time.After(2 * time.Minute):
		return "", fmt.Errorf("driver process %d does not serve after 2 minutes:\n%s",
			p.cmd.Process.Pid, p.tail())
	}
}

// exited waits until the process exits, for one that must not serve.
func (p *proc) exited() error {
	select {
	case <-p.ready:
		return fmt.Errorf("driver process %d serves", p.cmd.Process.Pid)
	case <-p.done:
		return nil
	case <-time.After(2 * time.Minute):
		return fmt.Errorf("driver process %d neither serves nor exits after 2 minutes",
			p.cmd.Process.Pid)
	}
}

// dead reports whether the process was killed (at its point) or exited.
func (p *proc) dead() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// dies reports whether the process exits within a few seconds: after a
// call failed, the kill that failed it may not have been reaped yet.
func (p *proc) dies() bool {
	select {
	case <-p.done:
		return true
	case <-time.After(5 * time.Second):
		return false
	}
}

// killed reports whether the process died of SIGKILL.
func (p *proc) killed() bool {
	<-p.done
	var ws syscall.WaitStatus
	if st, ok := p.cmd.ProcessState.Sys().(syscall.WaitStatus); ok {
		ws = st
	}
	return ws.Signaled() && ws.Signal() == syscall.SIGKILL
}

// kill kills the process (SIGKILL) by PID, as a node's driver is killed,
// and waits for it.
func (p *proc) kill() {
	if p.cmd.Process != nil && !p.dead() {
		_ = p.cmd.Process.Kill()
	}
	<-p.done
}
