package testenv_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestVendorModule runs the tests of examples/partitioned,
// examples/instinct and examples/tiles, drivers in modules of their own
// (a replace points at this checkout) that can import only drakit's
// public packages and test themselves with this package,
// conformance.Test and the partition lifecycle's fault kit: the vendor's
// path, end to end. Under -short their tests skip their clusters, and
// what is left shows that they build.
func TestVendorModule(t *testing.T) {
	for _, example := range []string{"partitioned", "instinct", "tiles"} {
		t.Run(example, func(t *testing.T) {
			t.Parallel() // three modules of their own; their clusters have fake nodes
			vendorModule(t, example)
		})
	}
}

func vendorModule(t *testing.T, example string) {
	dir, err := filepath.Abs(filepath.Join("..", "examples", example))
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"test", "-count=1", "-timeout=20m"}
	if testing.Short() {
		args = append(args, "-short")
	}
	if testing.Verbose() {
		args = append(args, "-v")
	}
	// Missing go.sum lines for drakit's own dependencies are filled in
	// from the module cache or proxy instead of failing the build.
	goEnv := append(os.Environ(), "GOWORK=off", "GOFLAGS="+strings.TrimSpace(os.Getenv("GOFLAGS")+" -mod=mod"))
	vet := exec.Command("go", "vet", "./...")
	vet.Dir, vet.Env = dir, goEnv
	if out, err := vet.CombinedOutput(); err != nil {
		t.Fatalf("go vet in %s: %v\n%s", dir, err, out)
	}
	cmd := exec.Command("go", append(args, "./...")...)
	cmd.Dir, cmd.Env = dir, goEnv
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("go test in %s: %v\n%s", dir, err, out.String())
	}
	t.Logf("go test in %s:\n%s", dir, out.String())

	// The cluster's binaries are installed from the vendor's module too.
	tools := t.TempDir()
	setup := exec.Command("go", "run", "github.com/drakit/drakit/cmd/drakit", "setup", "--write-tools-module", tools)
	setup.Dir, setup.Env = dir, goEnv
	if out, err := setup.CombinedOutput(); err != nil {
		t.Fatalf("drakit setup from the vendor's module: %v\n%s", err, out)
	}
	if _, err := os.Stat(filepath.Join(tools, "go.mod")); err != nil {
		t.Errorf("drakit setup from the vendor's module wrote no tools module: %v", err)
	}
	n := goLines(t, dir)
	t.Logf("the driver's non-test Go code: %d lines", n)
	// The dynamic-partition drivers are a page of code on
	// partition/lifecycle.Node (gofmt'd, at most 100 columns).
	if budget := map[string]int{"instinct": 200, "tiles": 200}[example]; budget > 0 && n > budget {
		t.Errorf("examples/%s has %d lines of non-test Go code, over its budget of %d", example, n, budget)
	}
}

// goLines counts the lines of the non-test Go files in dir that are
// neither blank nor comments alone (grep -v '^\s*//' | grep -v '^\s*$').
func goLines(t *testing.T, dir string) int {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(data), "\n") {
			if l := strings.TrimSpace(line); l != "" && !strings.HasPrefix(l, "//") {
				n++
			}
		}
	}
	return n
}
