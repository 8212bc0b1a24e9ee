package driver

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"k8s.io/klog/v2"

	"github.com/drakit/drakit/statefile"
)

// DefaultBootIDFile is where the runtime reads the node's boot ID unless
// [WithBootIDFile] says otherwise: the kernel makes a new random one at
// every boot.
const DefaultBootIDFile = "/proc/sys/kernel/random/boot_id"

// bootIDRecord is the file in the checkpoint folder that holds the boot
// ID the checkpoint's records were written under. Files without the
// record suffix are not records, so the checkpoint store ignores it.
const bootIDRecord = "boot-id"

// readBootID reads a boot ID file; "" when the file does not exist (a
// system without one: reboot detection is then off).
func readBootID(path string) (string, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("read boot ID: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}

// rebooted compares the node's boot ID with the one recorded in the
// checkpoint folder: true when both are known and differ. A missing
// record (the first start, or a checkpoint written by an older runtime)
// is not a reboot: nothing tells when its records were written.
func (e *engine) rebooted() (bool, error) {
	if e.bootID == "" {
		return false, nil
	}
	recorded, err := readBootID(filepath.Join(e.store.Dir(), bootIDRecord))
	if err != nil {
		return false, err
	}
	return recorded != "" && recorded != e.bootID, nil
}

// recordBootID writes the node's boot ID into the checkpoint folder,
// durably, so that the next process can tell a reboot from a restart.
func (e *engine) recordBootID(ctx context.Context) error {
	if e.bootID == "" {
		return nil
	}
	path := filepath.Join(e.store.Dir(), bootIDRecord)
	if cur, err := readBootID(path); err == nil && cur == e.bootID {
		return nil
	}
	if err := statefile.WriteFile(path, []byte(e.bootID+"\n"), statefile.Durable(),
		// The checkpoint's Load collects what a crash leaves by this prefix.
		statefile.WithTempPattern(".tmp-boot-id-*")); err != nil {
		return fmt.Errorf("record boot ID: %w", err)
	}
	klog.FromContext(ctx).V(2).Info("Recorded boot ID with the checkpoint", "bootID", e.bootID)
	return nil
}
