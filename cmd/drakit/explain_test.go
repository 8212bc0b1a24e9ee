package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/drakit/drakit/explain"
)

// TestExplainWhatIf runs "drakit explain --snapshot FLEET -f OBJECTS": the
// table by default, JSON with -o json, exit 1 (errNothingFits) when no
// node fits, usage errors for bad arguments.
func TestExplainWhatIf(t *testing.T) {
	fleet := filepath.Join("..", "..", "explain", "testdata", "fleet.yaml")
	td := func(f string) string { return filepath.Join("..", "..", "explain", "testdata", f) }
	run := func(args ...string) (string, error) {
		var out, errOut bytes.Buffer
		err := runExplain(context.Background(), args, &out, &errOut)
		return out.String(), err
	}

	out, err := run("--snapshot", fleet, "-f", td("train-claim.yaml"))
	if err != nil {
		t.Fatalf("fitting claim: %v", err)
	}
	for _, want := range []string{"claim default/train: 1 of 8 nodes can allocate its claims", "node-h  yes", "counter-exhausted:"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}

	out, err = run("--snapshot", fleet, "-o", "json", "-f", td("train-claim.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var rep explain.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil || rep.NodesFit != 1 {
		t.Errorf("JSON: err %v, nodesFit %d, want a report with one fitting node:\n%s", err, rep.NodesFit, out)
	}

	// Without node-h nothing fits: the report is written, the exit is 1.
	small := filepath.Join(t.TempDir(), "fleet.yaml")
	data, err := os.ReadFile(fleet)
	if err != nil {
		t.Fatal(err)
	}
	cut := strings.Index(string(data), "# node-h")
	if err := os.WriteFile(small, data[:cut], 0o644); err != nil {
		t.Fatal(err)
	}
	out, err = run("--snapshot", small, "-f", td("train-claim.yaml"))
	if !errors.Is(err, errNothingFits) || !strings.Contains(out, "no node can allocate its claims (7 nodes)") {
		t.Errorf("nothing fits: err %v, want errNothingFits; output:\n%s", err, out)
	}

	for _, args := range [][]string{
		{"--snapshot", fleet},
		{"--snapshot", fleet, "pod", "x"},
		{"-o", "yaml", "-f", td("train-claim.yaml")},
		{"pod"},
	} {
		if _, err := run(args...); !errors.Is(err, errUsage) {
			t.Errorf("%v: err %v, want errUsage", args, err)
		}
	}
}
