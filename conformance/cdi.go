package conformance

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"tags.cncf.io/container-device-interface/pkg/cdi"
)

// canReadCDI reports whether the suite can see the node's CDI specs.
func (r *runner) canReadCDI() bool {
	return len(r.cfg.CDIDirs) > 0 || r.cfg.ReadCDI != nil || len(r.cfg.ReadCDICommand) > 0
}

// cdiDirsShown names where the CDI specs are read from, for messages.
func (r *runner) cdiDirsShown() []string {
	if r.cfg.ReadCDI != nil || len(r.cfg.ReadCDICommand) > 0 {
		return []string{"the node's CDI folder (Config.ReadCDI)"}
	}
	return r.cfg.CDIDirs
}

// readCDI returns the node's CDI spec files by name: the files in
// Config.CDIDirs by path, or what Config.ReadCDI (ReadCDICommand)
// returns.
func (r *runner) readCDI(ctx context.Context) (map[string][]byte, error) {
	switch {
	case r.cfg.ReadCDI != nil:
		files, err := r.cfg.ReadCDI(ctx)
		if err != nil {
			return nil, fmt.Errorf("read the node's CDI specs: %w", err)
		}
		return files, nil
	case len(r.cfg.ReadCDICommand) > 0:
		return readCDICommand(ctx, r.cfg.ReadCDICommand)
	}
	out := map[string][]byte{}
	for _, d := range r.cfg.CDIDirs {
		entries, err := os.ReadDir(d)
		if err != nil {
			continue
		}
		for _, e := range entries {
			if e.IsDir() {
				continue
			}
			path := filepath.Join(d, e.Name())
			data, err := os.ReadFile(path)
			if err != nil {
				continue // gone in between
			}
			out[path] = data
		}
	}
	return out, nil
}

// readCDITimeout bounds one run of Config.ReadCDICommand.
const readCDITimeout = time.Minute

// readCDICommand runs cmd, which writes a tar archive of the node's CDI
// folder(s) to its standard output, bounded by readCDITimeout (and
// hookWaitDelay for output that a process it left behind holds).
func readCDICommand(ctx context.Context, cmd []string) (map[string][]byte, error) {
	var stdout, stderr bytes.Buffer
	ctx, cancel := context.WithTimeout(ctx, readCDITimeout)
	defer cancel()
	c := exec.CommandContext(ctx, cmd[0], cmd[1:]...)
	c.Stdout, c.Stderr = &stdout, &stderr
	c.WaitDelay = hookWaitDelay
	if err := c.Run(); err != nil {
		return nil, fmt.Errorf("read the node's CDI specs with %q: %w: %s", cmd, err, strings.TrimSpace(stderr.String()))
	}
	out := map[string][]byte{}
	tr := tar.NewReader(&stdout)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("read the node's CDI specs with %q: not a tar archive: %w", cmd, err)
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			return nil, fmt.Errorf("read the node's CDI specs with %q: %w", cmd, err)
		}
		out[filepath.Clean(h.Name)] = data
	}
}

// cdiState is what the node's CDI folders hold at one moment: the spec
// files, and the CDI devices they define (qualified name to file).
// Cleanup is judged by the devices, so that a driver which keeps all
// claims in one long-lived spec file is held to removing its entries,
// and one that keeps an empty file is not blamed for it.
type cdiState struct {
	files   map[string]bool
	devices map[string]string
}

// snapshotCDI reads the node's CDI specs (nil when they cannot be read).
// A file that does not parse as a CDI spec counts as a file defining no
// device.
func (r *runner) snapshotCDI(ctx context.Context) *cdiState {
	if !r.canReadCDI() {
		return nil
	}
	files, err := r.readCDI(ctx)
	if err != nil {
		r.logger.Error(err, "List CDI specs")
		return nil
	}
	return parseCDIState(files)
}

// parseCDIState indexes spec files by name and the devices they define.
func parseCDIState(files map[string][]byte) *cdiState {
	st := &cdiState{files: make(map[string]bool, len(files)), devices: map[string]string{}}
	for name, data := range files {
		st.files[name] = true
		spec, err := cdi.ParseSpec(data)
		if err != nil || spec == nil {
			continue
		}
		for _, d := range spec.Devices {
			st.devices[spec.Kind+"="+d.Name] = name
		}
	}
	return st
}

// cdiMade is what prepare added to the CDI folders: new files and newly
// defined devices.
type cdiMade struct {
	files, devices []string
}

// created returns what after holds that before did not (nothing when
// either is unknown).
func created(before, after *cdiState) cdiMade {
	var m cdiMade
	if before == nil || after == nil {
		return m
	}
	for f := range after.files {
		if !before.files[f] {
			m.files = append(m.files, f)
		}
	}
	for d := range after.devices {
		if _, ok := before.devices[d]; !ok {
			m.devices = append(m.devices, d)
		}
	}
	sort.Strings(m.files)
	sort.Strings(m.devices)
	return m
}

// leftover returns the devices of made that a spec on the node still
// defines, each with the file that defines it, and the files of made
// that still exist (whatever they hold).
func (r *runner) leftover(ctx context.Context, made cdiMade) (devices, files []string) {
	now := r.snapshotCDI(ctx)
	if now == nil {
		return nil, nil
	}
	for _, d := range made.devices {
		if f, ok := now.devices[d]; ok {
			devices = append(devices, fmt.Sprintf("%s (in %s)", d, f))
		}
	}
	for _, f := range made.files {
		if now.files[f] {
			files = append(files, f)
		}
	}
	return devices, files
}

// cdiCache loads the node's CDI specs into a CDI cache: from the folders
// directly, or, for specs read by Config.ReadCDI, from a copy in a
// temporary folder.
func (r *runner) cdiCache(ctx context.Context) (*cdi.Cache, string, error) {
	if r.cfg.ReadCDI == nil && len(r.cfg.ReadCDICommand) == 0 {
		return cdiCache(r.cfg.CDIDirs)
	}
	files, err := r.readCDI(ctx)
	if err != nil {
		return nil, "", err
	}
	dir, err := os.MkdirTemp("", "drakit-conformance-cdi-")
	if err != nil {
		return nil, "", fmt.Errorf("copy CDI specs: %w", err)
	}
	r.cleanups = append(r.cleanups, func(context.Context) { _ = os.RemoveAll(dir) })
	for name, data := range files {
		flat := strings.ReplaceAll(strings.Trim(name, "/"), "/", "_")
		if err := os.WriteFile(filepath.Join(dir, flat), data, 0o600); err != nil {
			return nil, "", fmt.Errorf("copy CDI specs: %w", err)
		}
	}
	return cdiCache([]string{dir})
}
