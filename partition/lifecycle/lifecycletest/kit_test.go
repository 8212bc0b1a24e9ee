package lifecycletest

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The driver process's fault seam fails every tool call on the lost card
// (recording it) and none on another, records two tool calls at once on
// one card, and counts each point without killing when no point is set.
func TestHook(t *testing.T) {
	dir := t.TempDir()
	j := &job{Dir: dir, Lost: "c2", Hits: filepath.Join(dir, "hits")}
	h := j.hook()
	ctx := context.Background()
	for _, step := range []struct {
		point, card string
		fails       bool
	}{
		{"tool/create", "c1", false},
		{"tool/created", "c1", false},
		{"tool/destroy", "c2", true},
		{"prepare/held", "c2", false},
		{"tool/list", "c1", false},
		{"tool/switch", "c1", false}, // beside the list: two at once
		{"tool/switched", "c1", false},
		{"tool/listed", "c1", false},
	} {
		err := h(ctx, step.point, step.card)
		if (err != nil) != step.fails {
			t.Errorf("%s on %s: %v, want failure %v", step.point, step.card, err, step.fails)
		}
	}
	read := func(name string) string {
		b, _ := os.ReadFile(filepath.Join(dir, name))
		return strings.TrimSpace(string(b))
	}
	if got := read("lost-calls"); got != "destroy" {
		t.Errorf("calls on the lost card %q, want destroy", got)
	}
	if got := read("overlaps"); !strings.Contains(got, "card c1: switch") || strings.Count(got, "\n") > 0 {
		t.Errorf("overlaps %q, want the switch beside the list only", got)
	}
	if got := strings.Count(read("hits"), "\n") + 1; got != 8 {
		t.Errorf("%d points recorded, want 8", got)
	}
}

// A name in Config.Skip skips the scenario and what is under it, and
// nothing else.
func TestSkipped(t *testing.T) {
	s := &suite{c: Config{Skip: []string{"rolling-update/second-release", "kill"}}}
	for name, want := range map[string]bool{
		"TestFaults/kill":                           true,
		"TestFaults/kill/tool/create@1":             true,
		"TestFaults/killing":                        false,
		"TestFaults/rolling-update":                 false,
		"TestFaults/rolling-update/second-release":  true,
		"TestFaults/lost-state/checkpoint-wiped":    false,
		"TestOther/rolling-update/second-release/x": true,
	} {
		if got := s.skipped(name); got != want {
			t.Errorf("skipped(%s) = %v, want %v", name, got, want)
		}
	}
}
