package cluster_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/drakit/drakit/internal/cluster"
)

// TestMissingBinariesSayHowToInstall starts a cluster from an empty
// binary folder: the error names the binaries and the command that
// installs them, which works from any module that requires drakit.
func TestMissingBinariesSayHowToInstall(t *testing.T) {
	dir := t.TempDir()
	_, err := cluster.Start(context.Background(), cluster.WithBinDir(dir))
	var missing *cluster.ErrMissing
	if !errors.As(err, &missing) {
		t.Fatalf("Start = %v, want *ErrMissing", err)
	}
	for _, want := range []string{dir + "/kube-apiserver", "go run github.com/drakit/drakit/cmd/drakit setup"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
}
