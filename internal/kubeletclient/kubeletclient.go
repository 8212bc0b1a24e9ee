// Package kubeletclient is the kubelet's side of a DRA driver's gRPC
// services, for the programs that play the kubelet against a driver (the
// conformance suite, driver/drivertest): finding and asking the
// registration socket as the kubelet's plugin watcher does, dialing the
// endpoint, and clients of the node and health services in the version
// the driver advertises, with the kubelet's timeouts. It knows nothing of
// drakit's driver runtime.
package kubeletclient

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
	resourceapi "k8s.io/api/resource/v1"
	drahealthv1 "k8s.io/kubelet/pkg/apis/dra-health/v1"
	drahealthv1alpha1 "k8s.io/kubelet/pkg/apis/dra-health/v1alpha1"
	drapbv1 "k8s.io/kubelet/pkg/apis/dra/v1"
	drapbv1beta1 "k8s.io/kubelet/pkg/apis/dra/v1beta1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// The kubelet's own timeouts (pkg/kubelet/pluginmanager and
// pkg/kubelet/cm/dra/plugin).
const (
	DialTimeout    = 10 * time.Second
	GetInfoTimeout = time.Second
	NotifyTimeout  = 5 * time.Second
	CallTimeout    = 45 * time.Second
	// probeDialTimeout bounds one attempt while looking for the
	// registration socket; a stale socket left by a killed driver would
	// otherwise cost the full dial timeout per attempt.
	probeDialTimeout = 2 * time.Second
)

// NodeServices are the DRA node service names a kubelet knows, most
// preferred first.
var NodeServices = []string{drapbv1.DRAPluginService, drapbv1beta1.DRAPluginService}

// HealthServices are the health service names a kubelet knows, most
// preferred first.
var HealthServices = []string{drahealthv1.DRAResourceHealthService, drahealthv1alpha1.DRAResourceHealthService}

// Dial opens a gRPC client connection to a unix socket, the way the
// kubelet does, and waits until it is ready or timeout passes. Calls on
// it wait for the connection to be ready (bound them with a deadline).
func Dial(ctx context.Context, path string, timeout time.Duration) (*grpc.ClientConn, error) {
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

// GetInfo calls Registration/GetInfo on a registration socket.
func GetInfo(ctx context.Context, socket string, dialTimeout time.Duration) (*registerapi.PluginInfo, error) {
	conn, err := Dial(ctx, socket, dialTimeout)
	if err != nil {
		return nil, err
	}
	defer func() { _ = conn.Close() }()
	ctx, cancel := context.WithTimeout(ctx, GetInfoTimeout)
	defer cancel()
	info, err := registerapi.NewRegistrationClient(conn).GetInfo(ctx, &registerapi.InfoRequest{})
	if err != nil {
		return nil, fmt.Errorf("call GetInfo on %s: %w", socket, err)
	}
	return info, nil
}

// NotifyRegistration calls Registration/NotifyRegistrationStatus.
func NotifyRegistration(ctx context.Context, socket string, registered bool, msg string) error {
	conn, err := Dial(ctx, socket, DialTimeout)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close() }()
	ctx, cancel := context.WithTimeout(ctx, NotifyTimeout)
	defer cancel()
	_, err = registerapi.NewRegistrationClient(conn).NotifyRegistrationStatus(ctx, &registerapi.RegistrationStatus{PluginRegistered: registered, Error: msg})
	if err != nil {
		return fmt.Errorf("call NotifyRegistrationStatus on %s: %w", socket, err)
	}
	return nil
}

// FindRegistration finds the registration socket of driver: path is
// either the socket itself or a folder (the kubelet's plugin registry) in
// which every socket not starting with "." is asked for its name, as the
// kubelet's plugin watcher does. It waits until timeout for the socket
// to appear.
func FindRegistration(ctx context.Context, path, driver string, timeout time.Duration) (string, *registerapi.PluginInfo, error) {
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
		info, err := GetInfo(ctx, path, probeDialTimeout)
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
		info, err := GetInfo(ctx, socket, probeDialTimeout)
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

// isSocket reports whether path is a unix socket.
func isSocket(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode()&os.ModeSocket != 0
}

// NodeClient returns a v1-shaped client for the named node service
// (v1beta1 through its wrapper, which has no share IDs).
func NodeClient(conn *grpc.ClientConn, service string) drapbv1.DRAPluginClient {
	if service == drapbv1beta1.DRAPluginService {
		return drapbv1beta1.V1Beta1ClientWrapper{DRAPluginClient: drapbv1beta1.NewDRAPluginClient(conn)}
	}
	return drapbv1.NewDRAPluginClient(conn)
}

// HealthClient returns a v1-shaped client for the named health service.
func HealthClient(conn *grpc.ClientConn, service string) drahealthv1.DRAResourceHealthClient {
	if service == drahealthv1alpha1.DRAResourceHealthService {
		return drahealthv1.V1Alpha1ClientWrapper{Client: drahealthv1alpha1.NewDRAResourceHealthClient(conn)}
	}
	return drahealthv1.NewDRAResourceHealthClient(conn)
}

// FirstKnown returns the first entry of known that versions lists, as the
// kubelet picks a service version ("" when none).
func FirstKnown(versions, known []string) string {
	for _, k := range known {
		for _, v := range versions {
			if v == k {
				return k
			}
		}
	}
	return ""
}

// IsTransport reports whether err means the driver did not answer at all
// (as opposed to answering with an error).
func IsTransport(err error) bool {
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

// Claims turns claims into the claim references of a
// NodePrepareResources or NodeUnprepareResources request.
func Claims(claims ...*resourceapi.ResourceClaim) []*drapbv1.Claim {
	out := make([]*drapbv1.Claim, 0, len(claims))
	for _, c := range claims {
		out = append(out, &drapbv1.Claim{Namespace: c.Namespace, Name: c.Name, Uid: string(c.UID)})
	}
	return out
}
