package main

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/drakit/drakit/internal/cluster"
)

// TestMain lets this test binary serve as the drivers bench prepare
// starts ("<binary> bench floor ...", "<binary> bench driver ...") and
// as the fleet demo's real-node driver ("<binary> demo fleet-driver ...").
func TestMain(m *testing.M) {
	if len(os.Args) > 2 && (os.Args[1] == "bench" && (os.Args[2] == benchFloorCmd || os.Args[2] == benchDriverCmd) ||
		os.Args[1] == "demo" && os.Args[2] == fleetDriverCmd) {
		os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// TestBenchPrepare runs a short bench against the built-in driver on a
// real control plane and checks that every row is measured, the
// throughput row names the limiter's ceiling, and the driver's own
// process was measured (not bench's).
func TestBenchPrepare(t *testing.T) {
	// Parallel: shares nothing with the package's other tests.
	t.Parallel()
	if testing.Short() {
		t.Skip("starts a control plane")
	}
	var out, errOut bytes.Buffer
	err := runBench(context.Background(), []string{"prepare", "-n", "10", "-repeat", "2", "-duration", "300ms", "-held", "4", "-rss-cycles", "20"}, &out, &errOut)
	var missing *cluster.ErrMissing
	if errors.As(err, &missing) {
		t.Skipf("no cluster binaries: %v", err)
	}
	if err != nil {
		t.Fatalf("bench: %v\n%s", err, errOut.String())
	}
	got := out.String()
	for _, want := range []string{
		"prepare p50, 1 claim 1 device", "prepare+unprepare cycles/s, 8 callers", "driver process CPU per cycle",
		"API requests per prepare", "0 vs 4 claims held", "RSS: before vs after 20 cycles",
		"the driver's client limit (QPS 200, burst 400) allows at most",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "skipped") {
		t.Errorf("a row was skipped:\n%s", got)
	}
	if strings.Contains(got, "pid "+itoa(os.Getpid())+"\n") {
		t.Errorf("the driver measured is bench's own process:\n%s", got)
	}
	t.Log("\n" + got)
}

func itoa(i int) string { return strconv.Itoa(i) }

func TestSumMetric(t *testing.T) {
	data := []byte(`# HELP apiserver_request_total x
# TYPE apiserver_request_total counter
apiserver_request_total{code="200",component="apiserver",group="resource.k8s.io",resource="resourceclaims",verb="GET",version="v1"} 1234
apiserver_request_total{code="201",component="apiserver",group="resource.k8s.io",resource="resourceclaims",verb="POST",version="v1"} 6
apiserver_request_total{code="200",component="apiserver",group="",resource="pods",verb="GET",version="v1"} 99
apiserver_request_total_other{resource="resourceclaims"} 5
`)
	if got := sumMetric(data, "apiserver_request_total", `resource="resourceclaims"`); got != 1240 {
		t.Errorf("sumMetric = %v, want 1240", got)
	}
}

func TestSpread(t *testing.T) {
	for _, tc := range []struct {
		v    []float64
		unit string
		want string
	}{
		{[]float64{3, 1, 2}, "ms", "2.00 ms [1.00-3.00]"},
		{[]float64{0.5, 0.7}, "x", "0.600x [0.500-0.700]"},
		{[]float64{1234}, "/s", "1234 /s"},
	} {
		if got := spread(tc.v, tc.unit); got != tc.want {
			t.Errorf("spread(%v, %q) = %q, want %q", tc.v, tc.unit, got, tc.want)
		}
	}
}

// TestProcReaders reads this process's CPU time and RSS, and finds the
// process behind a unix socket it serves.
func TestProcReaders(t *testing.T) {
	pid := os.Getpid()
	if _, err := procCPU(pid); err != nil {
		t.Error(err)
	}
	if rss, err := procRSS(pid); err != nil || rss <= 0 {
		t.Errorf("procRSS = %d, %v", rss, err)
	}
	sock := filepath.Join(t.TempDir(), "s.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	if got, err := peerPID(sock); err != nil || got != pid {
		t.Errorf("peerPID = %d, %v; want %d", got, err, pid)
	}
}
