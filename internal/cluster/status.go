package cluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// ComponentStatus is one process of a cluster.
type ComponentStatus struct {
	Name    string
	PID     int
	Running bool
}

// Status describes a cluster from the state saved in its folder.
type Status struct {
	Dir        string
	Kubeconfig string
	Node       string
	Ports      Ports
	Components []ComponentStatus
}

// Running reports whether every component is running.
func (s *Status) Running() bool {
	if len(s.Components) == 0 {
		return false
	}
	for _, c := range s.Components {
		if !c.Running {
			return false
		}
	}
	return true
}

// ErrNoCluster is returned by ReadStatus when a folder holds no cluster.
var ErrNoCluster = errors.New("no cluster state")

// ReadStatus reads the state a Start saved in dir and checks by PID which
// components still run.
func ReadStatus(dir string) (*Status, error) {
	data, err := os.ReadFile(filepath.Join(dir, "state.json"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%s: %w", dir, ErrNoCluster)
	}
	if err != nil {
		return nil, fmt.Errorf("read cluster state: %w", err)
	}
	var s state
	if err := json.Unmarshal(data, &s); err != nil {
		return nil, fmt.Errorf("decode cluster state: %w", err)
	}
	st := &Status{Dir: dir, Kubeconfig: filepath.Join(dir, "admin.kubeconfig"), Node: s.Node, Ports: s.Ports}
	for _, p := range s.Procs {
		st.Components = append(st.Components, ComponentStatus{Name: p.Name, PID: p.PID, Running: p.alive()})
	}
	return st, nil
}
