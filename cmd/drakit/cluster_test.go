package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
)

// TestClusterHelp: "drakit cluster -h" prints the subcommands and flags
// instead of "unknown cluster command".
func TestClusterHelp(t *testing.T) {
	for _, arg := range []string{"-h", "--help", "help"} {
		var out, errOut bytes.Buffer
		if err := runCluster(context.Background(), []string{arg}, &out, &errOut); err != nil {
			t.Fatalf("cluster %s: %v", arg, err)
		}
		for _, want := range []string{"up|down|status", "-fake-nodes", "-gang-scheduling"} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("cluster %s: output lacks %q:\n%s", arg, want, out.String())
			}
		}
	}
	var out, errOut bytes.Buffer
	if err := runCluster(context.Background(), []string{"sideways"}, &out, &errOut); !errors.Is(err, errUsage) {
		t.Errorf("cluster sideways = %v, want a usage error", err)
	}
}
