package cluster

import (
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
)

// TestTakeFDKeepsTheLock shows what drakit cluster down relies on: the
// lock a node's process holds, taken into this process, stays held after
// that process dies, until this process closes it.
func TestTakeFDKeepsTheLock(t *testing.T) {
	path := filepath.Join(t.TempDir(), "node.lock")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	child := exec.Command("sleep", "60")
	child.ExtraFiles = []*os.File{f}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = child.Process.Kill(); _ = child.Wait() })
	f.Close() // only the child holds the lock now

	locked := func() bool {
		g, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer g.Close()
		if err := syscall.Flock(int(g.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
			return true
		}
		_ = syscall.Flock(int(g.Fd()), syscall.LOCK_UN)
		return false
	}
	if !locked() {
		t.Fatal("the child does not hold the lock")
	}
	if got := takeFD(child.Process.Pid, filepath.Join(t.TempDir(), "other")); got != nil {
		t.Fatalf("takeFD returned a descriptor for a file the child has not open: %s", got.Name())
	}
	taken := takeFD(child.Process.Pid, path)
	if taken == nil {
		t.Fatal("takeFD found no descriptor of the lock file in the child")
	}
	_ = child.Process.Kill()
	_ = child.Wait()
	if !locked() {
		t.Fatal("the lock was released when the child died although this process took its descriptor")
	}
	taken.Close()
	if locked() {
		t.Fatal("the lock is still held after the taken descriptor was closed")
	}
}
