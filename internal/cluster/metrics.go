package cluster

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"time"
)

// SchedulerMetrics returns kube-scheduler's /metrics page (Prometheus
// text), read over its secure port with the admin client certificate,
// which the scheduler authenticates and authorizes through the API
// server.
func (c *Cluster) SchedulerMetrics(ctx context.Context) ([]byte, error) {
	body, err := c.schedulerGet(ctx, "/metrics", 10*time.Second)
	if err != nil {
		return nil, fmt.Errorf("read scheduler metrics: %w", err)
	}
	return body, nil
}

// SchedulerCPUProfile samples kube-scheduler's CPU for d (whole seconds,
// at least one) through its /debug/pprof/profile handler and returns the
// profile in pprof's format, for "go tool pprof". kube-scheduler serves
// the handler on its secure port with profiling on (its default,
// KubeSchedulerConfiguration enableProfiling), to the admin client
// certificate as SchedulerMetrics does. The call blocks for d; a
// cancelled ctx ends it with an error and no profile.
func (c *Cluster) SchedulerCPUProfile(ctx context.Context, d time.Duration) ([]byte, error) {
	sec := int(d / time.Second)
	if sec < 1 {
		return nil, fmt.Errorf("profile kube-scheduler: duration %s is under one second", d)
	}
	body, err := c.schedulerGet(ctx, fmt.Sprintf("/debug/pprof/profile?seconds=%d", sec), d+30*time.Second)
	if err != nil {
		return nil, fmt.Errorf("profile kube-scheduler: %w", err)
	}
	return body, nil
}

// schedulerGet GETs path from kube-scheduler's secure port with the admin
// client certificate.
func (c *Cluster) schedulerGet(ctx context.Context, path string, timeout time.Duration) ([]byte, error) {
	if c.c == nil || c.c.Ports.Scheduler == 0 {
		return nil, fmt.Errorf("the cluster has no scheduler port")
	}
	pkiDir := filepath.Join(c.Dir, "pki")
	cert, err := tls.LoadX509KeyPair(filepath.Join(pkiDir, "admin.crt"), filepath.Join(pkiDir, "admin.key"))
	if err != nil {
		return nil, fmt.Errorf("admin certificate: %w", err)
	}
	client := &http.Client{Timeout: timeout, Transport: &http.Transport{TLSClientConfig: &tls.Config{
		Certificates: []tls.Certificate{cert},
		// kube-scheduler serves a self-signed certificate of its own
		// (no --tls-cert-file): only the client side is verified.
		InsecureSkipVerify: true, //nolint:gosec // local component on loopback
	}}}
	url := fmt.Sprintf("https://127.0.0.1:%d%s", c.c.Ports.Scheduler, path)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s", url, resp.Status)
	}
	return body, nil
}
