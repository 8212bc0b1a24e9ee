package main

import (
	"net"
	"os"
	"path/filepath"
	"testing"
)

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
