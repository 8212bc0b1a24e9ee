package driver

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	kit "github.com/drakit/drakit/driver"
	"github.com/drakit/drakit/statefile"
)

// Reconcile removes the temporary files that crashed writes left in the
// claims' devices folder, and keeps the devices files.
func TestReconcileRemovesTemporaryClaimFiles(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	if _, err := f.d.Inventory(ctx); err != nil {
		t.Fatal(err)
	}
	c := claim("kept")
	claimSpecs(t, f, c, []kit.AllocatedDevice{alloc("gpu-0")})
	stray := filepath.Join(filepath.Dir(f.d.claimFile("kept")), statefile.TempPattern("gone.json"))
	stray = strings.Replace(stray, "*", "123456", 1)
	if err := os.WriteFile(stray, []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	held := kit.HeldClaim{
		ClaimRef: c.ClaimRef,
		Prepared: true,
		Devices:  []kit.HeldDevice{{AllocatedDevice: alloc("gpu-0")}},
	}
	if err := f.d.Reconcile(ctx, []kit.HeldClaim{held}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(stray); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the temporary file %s after Reconcile: %v, want it gone", stray, err)
	}
	if _, err := os.Stat(f.d.claimFile("kept")); err != nil {
		t.Errorf("the held claim's devices file after Reconcile: %v", err)
	}
}
