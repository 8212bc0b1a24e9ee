package driverflag_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"

	"k8s.io/component-base/featuregate"
	"k8s.io/klog/v2"

	"github.com/drakit/drakit/driver/driverflag"
)

// logProgram makes the test binary a program that parses its arguments
// with driverflag, applies them and logs one line at -v=2 and one at
// -v=5, as a driver's main does.
const logProgram = "DRIVERFLAG_LOG_PROGRAM"

func TestMain(m *testing.M) {
	if os.Getenv(logProgram) == "1" {
		fs := flag.NewFlagSet("driver", flag.ExitOnError)
		f := driverflag.Register(fs)
		_ = fs.Parse(strings.Fields(os.Getenv("ARGS")))
		if err := f.ApplyLogging(); err != nil {
			os.Stderr.WriteString("apply: " + err.Error() + "\n")
			os.Exit(3)
		}
		logger := klog.Background().WithName("driver")
		logger.V(2).Info("Prepared", "claim", "ns/c")
		logger.V(5).Info("Details")
		klog.Flush()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// runLog runs the log program with args and returns its stderr lines.
func runLog(t *testing.T, args string) []string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), logProgram+"=1", "ARGS="+args)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s: %v\n%s", args, err, stderr.String())
	}
	return strings.Split(strings.TrimSpace(stderr.String()), "\n")
}

// TestLoggingFormat: --logging-format=json gives JSON lines (one object
// per line with msg, v and the key/value pairs), text gives klog's text,
// and -v filters both.
func TestLoggingFormat(t *testing.T) {
	lines := runLog(t, "--logging-format=json -v=2")
	if len(lines) != 1 {
		t.Fatalf("json -v=2: %d lines %q, want the one at V(2)", len(lines), lines)
	}
	var entry map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &entry); err != nil {
		t.Fatalf("json: line %q is not JSON: %v", lines[0], err)
	}
	if entry["msg"] != "Prepared" || entry["claim"] != "ns/c" || entry["logger"] != "driver" || entry["v"] != float64(2) {
		t.Errorf("json entry %v: want msg Prepared, claim ns/c, logger driver, v 2", entry)
	}

	lines = runLog(t, "-v=5")
	if len(lines) != 2 || !strings.Contains(lines[0], `"Prepared" logger="driver" claim="ns/c"`) || json.Valid([]byte(lines[0])) {
		t.Errorf("text -v=5: %q, want two klog text lines", lines)
	}
	if lines := runLog(t, "--vmodule=logging_test=5"); len(lines) != 2 {
		t.Errorf("--vmodule=logging_test=5: %q, want both lines", lines)
	}
	if lines := runLog(t, ""); len(lines) != 1 || lines[0] != "" {
		t.Errorf("default: %q, want nothing at -v=0", lines)
	}
}

func TestLoggingFormatUnknown(t *testing.T) {
	fs := flag.NewFlagSet("driver", flag.ContinueOnError)
	f := driverflag.Register(fs)
	if err := fs.Parse([]string{"--logging-format=yaml"}); err != nil {
		t.Fatal(err)
	}
	if err := f.ApplyLogging(); err == nil || !strings.Contains(err.Error(), "yaml") {
		t.Errorf("--logging-format=yaml: %v, want an error naming it", err)
	}
}

// TestFeatureGates: a driver's gates are set by --feature-gates beside
// the logging gates, listed with their stage in the help; an unknown
// gate is refused at parse time.
func TestFeatureGates(t *testing.T) {
	gates := map[featuregate.Feature]featuregate.FeatureSpec{
		"Defrag":     {Default: false, PreRelease: featuregate.Alpha},
		"DynamicMIG": {Default: true, PreRelease: featuregate.Beta},
	}
	parseGates := func(args ...string) (*driverflag.Flags, *flag.FlagSet, error) {
		fs := flag.NewFlagSet("driver", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		f := driverflag.Register(fs)
		if err := f.AddFeatureGates(gates); err != nil {
			t.Fatal(err)
		}
		return f, fs, fs.Parse(args)
	}
	f, fs, err := parseGates()
	if err != nil || f.FeatureGate.Enabled("Defrag") || !f.FeatureGate.Enabled("DynamicMIG") || !f.FeatureGate.Enabled("ContextualLogging") {
		t.Errorf("defaults: %v; Defrag %v (want false), DynamicMIG %v (want true)", err, f.FeatureGate.Enabled("Defrag"), f.FeatureGate.Enabled("DynamicMIG"))
	}
	usage := fs.Lookup("feature-gates").Usage
	for _, want := range []string{"Defrag=true|false (ALPHA - default=false)", "DynamicMIG=true|false (BETA - default=true)", "ContextualLogging=true|false (BETA - default=true)"} {
		if !strings.Contains(usage, want) {
			t.Errorf("--feature-gates help lacks %q:\n%s", want, usage)
		}
	}
	f, _, err = parseGates("--feature-gates=Defrag=true,DynamicMIG=false")
	if err != nil || !f.FeatureGate.Enabled("Defrag") || f.FeatureGate.Enabled("DynamicMIG") {
		t.Errorf("set: %v; Defrag %v, DynamicMIG %v", err, f.FeatureGate.Enabled("Defrag"), f.FeatureGate.Enabled("DynamicMIG"))
	}
	if _, _, err := parseGates("--feature-gates=Teleport=true"); err == nil || !strings.Contains(err.Error(), "Teleport") {
		t.Errorf("unknown gate: %v, want an error naming it", err)
	}
	var zero driverflag.Flags
	if err := zero.AddFeatureGates(gates); err == nil {
		t.Error("AddFeatureGates on Flags not made by Register: no error")
	}
}

// TestApplyLoggingTwice: klog's settings are the process's; the same
// configuration again is fine, another is refused.
func TestApplyLoggingTwice(t *testing.T) {
	parseLog := func(args ...string) *driverflag.Flags {
		fs := flag.NewFlagSet("driver", flag.ContinueOnError)
		f := driverflag.Register(fs)
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		return f
	}
	if err := parseLog().ApplyLogging(); err != nil {
		t.Fatal(err)
	}
	if err := parseLog().ApplyLogging(); err != nil {
		t.Errorf("the same configuration again: %v", err)
	}
	if err := parseLog("-v=4").ApplyLogging(); !errors.Is(err, driverflag.ErrLoggingApplied) {
		t.Errorf("another configuration: %v, want ErrLoggingApplied", err)
	}
}
