package driverflag

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"
)

// Probe asks a driver's probe socket ([driver.WithProbeSocket],
// --probe-socket) for path ("/healthz" or "/readyz") and returns nil when
// the driver answers 200 within 5 s, else an error with its answer. A
// driver binary's exec probe is a subcommand that returns it, e.g.
//
//	readinessProbe:
//	  exec:
//	    command: [/my-driver, probe, --socket=/tmp/probe.sock, /readyz]
//
// An exec probe runs in the pod, so it asks this pod's driver, also
// during a rolling update where the other pod holds the HTTP address on
// the host's network and an httpGet probe would reach it instead.
func Probe(ctx context.Context, socket, path string) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	client := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", socket)
	}}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://driver"+path, nil)
	if err != nil {
		return fmt.Errorf("probe %s: %w", path, err)
	}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("probe %s on %s: %w", path, socket, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("probe %s: %s: %s", path, resp.Status, strings.TrimSpace(string(body)))
	}
	return nil
}
