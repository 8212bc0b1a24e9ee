package conformance

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	drahealthv1 "k8s.io/kubelet/pkg/apis/dra-health/v1"
	drahealthv1alpha1 "k8s.io/kubelet/pkg/apis/dra-health/v1alpha1"
	drapbv1 "k8s.io/kubelet/pkg/apis/dra/v1"
	drapbv1beta1 "k8s.io/kubelet/pkg/apis/dra/v1beta1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// The kubelet's own timeouts (see the notes on the kubelet protocol).
const (
	kubeletDialTimeout    = 10 * time.Second
	kubeletGetInfoTimeout = time.Second
	kubeletNotifyTimeout  = 5 * time.Second
	// probeDialTimeout bounds one attempt while looking for the
	// registration socket; a stale socket left by a killed driver would
	// otherwise cost the full dial timeout per attempt.
	probeDialTimeout = 2 * time.Second
)

// PathMapping translates a path prefix a driver reports (as it sees its
// own file system) into the path where the suite finds the same file.
type PathMapping struct {
	// From is the prefix as the driver sees it, e.g. "/var/lib/kubelet".
	From string
	// To replaces From, e.g. "/tmp/node1/kubelet".
	To string
}

// translate applies the first mapping whose From is a path prefix of p.
func translate(p string, maps []PathMapping) string {
	for _, m := range maps {
		from := filepath.Clean(m.From)
		if p == from {
			return filepath.Clean(m.To)
		}
		if from == "/" && strings.HasPrefix(p, "/") {
			return filepath.Join(m.To, p)
		}
		if strings.HasPrefix(p, from+"/") {
			return filepath.Join(m.To, strings.TrimPrefix(p, from+"/"))
		}
	}
	return p
}

// dial opens a gRPC client connection to a unix socket, the way the
// kubelet does, and waits until it is ready or the timeout expires.
func dial(ctx context.Context, path string, timeout time.Duration) (*grpc.ClientConn, error) {
	conn, err := grpc.NewClient("unix://"+path,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.WaitForReady(true)))
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", path, err)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	conn.Connect()
	for {
		s := conn.GetState()
		if s == connectivity.Ready {
			return conn, nil
		}
		if !conn.WaitForStateChange(ctx, s) {
			_ = conn.Close()
			return nil, fmt.Errorf("connect to %s: not ready within %s (last state %s)", path, timeout, s)
		}
	}
}

// isSocket reports whether path is a unix socket.
func isSocket(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode()&os.ModeSocket != 0
}

// getInfo calls Registration/GetInfo on a registration socket.
func getInfo(ctx context.Context, socket string, dialTimeout time.Duration) (*registerapi.PluginInfo, error) {
	conn, err := dial(ctx, socket, dialTimeout)
	if err != nil {
		return nil, err
	}
	defer func() { _ = conn.Close() }()
	ctx, cancel := context.WithTimeout(ctx, kubeletGetInfoTimeout)
	defer cancel()
	info, err := registerapi.NewRegistrationClient(conn).GetInfo(ctx, &registerapi.InfoRequest{})
	if err != nil {
		return nil, fmt.Errorf("call GetInfo on %s: %w", socket, err)
	}
	return info, nil
}

// notifyRegistration calls Registration/NotifyRegistrationStatus.
func notifyRegistration(ctx context.Context, socket string, registered bool, msg string) error {
	conn, err := dial(ctx, socket, kubeletDialTimeout)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close() }()
	ctx, cancel := context.WithTimeout(ctx, kubeletNotifyTimeout)
	defer cancel()
	_, err = registerapi.NewRegistrationClient(conn).NotifyRegistrationStatus(ctx, &registerapi.RegistrationStatus{PluginRegistered: registered, Error: msg})
	if err != nil {
		return fmt.Errorf("call NotifyRegistrationStatus on %s: %w", socket, err)
	}
	return nil
}

// findRegistration finds the registration socket of driver: path is
// either the socket itself or a folder (the kubelet's plugin registry) in
// which every socket not starting with "." is asked for its name, as the
// kubelet's plugin watcher does. It waits until timeout for the socket
// to appear.
func findRegistration(ctx context.Context, path, driver string, timeout time.Duration) (string, *registerapi.PluginInfo, error) {
	deadline := time.Now().Add(timeout)
	var lastErr error
	for {
		socket, info, err := findRegistrationOnce(ctx, path, driver)
		if err == nil {
			return socket, info, nil
		}
		lastErr = err
		if time.Now().After(deadline) {
			return "", nil, lastErr
		}
		select {
		case <-ctx.Done():
			return "", nil, fmt.Errorf("find registration socket: %w (last error: %v)", ctx.Err(), lastErr)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func findRegistrationOnce(ctx context.Context, path, driver string) (string, *registerapi.PluginInfo, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return "", nil, fmt.Errorf("find registration socket: %w", err)
	}
	if !fi.IsDir() {
		info, err := getInfo(ctx, path, probeDialTimeout)
		if err != nil {
			return "", nil, err
		}
		return path, info, nil
	}
	entries, err := os.ReadDir(path)
	if err != nil {
		return "", nil, fmt.Errorf("find registration socket: %w", err)
	}
	var names []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") {
			continue
		}
		if isSocket(filepath.Join(path, e.Name())) {
			names = append(names, e.Name())
		}
	}
	// Try the helper's conventional name first.
	sort.SliceStable(names, func(i, j int) bool {
		return strings.HasPrefix(names[i], driver) && !strings.HasPrefix(names[j], driver)
	})
	var seen []string
	for _, n := range names {
		socket := filepath.Join(path, n)
		info, err := getInfo(ctx, socket, probeDialTimeout)
		if err != nil {
			seen = append(seen, fmt.Sprintf("%s: %v", n, err))
			continue
		}
		if info.Name == driver {
			return socket, info, nil
		}
		seen = append(seen, fmt.Sprintf("%s: name %q", n, info.Name))
	}
	return "", nil, fmt.Errorf("find registration socket: no socket in %s answers GetInfo with name %q (seen: %s)", path, driver, strings.Join(seen, "; "))
}

// nodeServices are the DRA node service names a kubelet knows, most
// preferred first.
var nodeServices = []string{drapbv1.DRAPluginService, drapbv1beta1.DRAPluginService}

// healthServices are the health service names a kubelet knows, most
// preferred first.
var healthServices = []string{drahealthv1.DRAResourceHealthService, drahealthv1alpha1.DRAResourceHealthService}

// nodeClient returns a v1-shaped client for the named node service.
func nodeClient(conn *grpc.ClientConn, service string) drapbv1.DRAPluginClient {
	if service == drapbv1beta1.DRAPluginService {
		return drapbv1beta1.V1Beta1ClientWrapper{DRAPluginClient: drapbv1beta1.NewDRAPluginClient(conn)}
	}
	return drapbv1.NewDRAPluginClient(conn)
}

// healthClient returns a v1-shaped client for the named health service.
func healthClient(conn *grpc.ClientConn, service string) drahealthv1.DRAResourceHealthClient {
	if service == drahealthv1alpha1.DRAResourceHealthService {
		return drahealthv1.V1Alpha1ClientWrapper{Client: drahealthv1alpha1.NewDRAResourceHealthClient(conn)}
	}
	return drahealthv1.NewDRAResourceHealthClient(conn)
}

// firstKnown returns the first entry of known that versions lists.
func firstKnown(versions, known []string) string {
	for _, k := range known {
		for _, v := range versions {
			if v == k {
				return k
			}
		}
	}
	return ""
}

// isTransport reports whether err means the driver did not answer at all
// (as opposed to answering with an error).
func isTransport(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled:
		return true
	}
	return false
}
