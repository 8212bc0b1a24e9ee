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
	if c.c == nil || c.c.Ports.Scheduler == 0 {
		return nil, fmt.Errorf("read scheduler metrics: the cluster has no scheduler port")
	}
	pkiDir := filepath.Join(c.Dir, "pki")
	cert, err := tls.LoadX509KeyPair(filepath.Join(pkiDir, "admin.crt"), filepath.Join(pkiDir, "admin.key"))
	if err != nil {
		return nil, fmt.Errorf("read scheduler metrics: admin certificate: %w", err)
	}
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{
		Certificates: []tls.Certificate{cert},
		// kube-scheduler serves a self-signed certificate of its own
		// (no --tls-cert-file): only the client side is verified.
		InsecureSkipVerify: true, //nolint:gosec // local component on loopback
	}}}
	url := fmt.Sprintf("https://127.0.0.1:%d/metrics", c.c.Ports.Scheduler)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, fmt.Errorf("read scheduler metrics: %w", err)
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("read scheduler metrics: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("read scheduler metrics: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("read scheduler metrics: %s: %s", url, resp.Status)
	}
	return body, nil
}
