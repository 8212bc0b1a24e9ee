package drivertest

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	resourceapi "k8s.io/api/resource/v1"
	drahealthv1 "k8s.io/kubelet/pkg/apis/dra-health/v1"
	drapbv1 "k8s.io/kubelet/pkg/apis/dra/v1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// Kubelet is a kubelet-side client of one driver's DRA socket. It is safe
// for concurrent use.
type Kubelet struct {
	conn   *grpc.ClientConn
	dra    drapbv1.DRAPluginClient
	health drahealthv1.DRAResourceHealthClient
}

func dial(socket string) (*grpc.ClientConn, error) {
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", socket, err)
	}
	return conn, nil
}

// Dial connects to a driver's DRA socket (e.g.
// /var/lib/kubelet/plugins/<driver>/dra.sock). The connection is made
// lazily, as the kubelet's is.
func Dial(draSocket string) (*Kubelet, error) {
	if draSocket == "" {
		return nil, errors.New("dial driver: empty socket path")
	}
	conn, err := dial(draSocket)
	if err != nil {
		return nil, err
	}
	return &Kubelet{conn: conn, dra: drapbv1.NewDRAPluginClient(conn), health: drahealthv1.NewDRAResourceHealthClient(conn)}, nil
}

// Close closes the connection.
func (k *Kubelet) Close() error { return k.conn.Close() }

// Ref turns claims into the request's claim references.
func Ref(claims ...*resourceapi.ResourceClaim) []*drapbv1.Claim {
	out := make([]*drapbv1.Claim, 0, len(claims))
	for _, c := range claims {
		out = append(out, &drapbv1.Claim{Namespace: c.Namespace, Name: c.Name, Uid: string(c.UID)})
	}
	return out
}

// Prepare calls NodePrepareResources for claims in one call. A per-claim
// error is returned as an error too (naming the claim), as the kubelet
// treats it as a failure.
func (k *Kubelet) Prepare(ctx context.Context, claims ...*resourceapi.ResourceClaim) (map[string]*drapbv1.NodePrepareResourceResponse, error) {
	resp, err := k.dra.NodePrepareResources(ctx, &drapbv1.NodePrepareResourcesRequest{Claims: Ref(claims...)})
	if err != nil {
		return nil, fmt.Errorf("NodePrepareResources: %w", err)
	}
	errs := claimErrors(claims, resp.Claims)
	if len(resp.Claims) != len(claims) {
		errs = append(errs, fmt.Errorf("response has %d claims, request had %d", len(resp.Claims), len(claims)))
	}
	return resp.Claims, errors.Join(errs...)
}

// Unprepare calls NodeUnprepareResources for claims in one call; per-claim
// errors are returned as an error.
func (k *Kubelet) Unprepare(ctx context.Context, claims ...*resourceapi.ResourceClaim) error {
	resp, err := k.dra.NodeUnprepareResources(ctx, &drapbv1.NodeUnprepareResourcesRequest{Claims: Ref(claims...)})
	if err != nil {
		return fmt.Errorf("NodeUnprepareResources: %w", err)
	}
	errs := claimErrors(claims, resp.Claims)
	return errors.Join(errs...)
}

// WatchHealth opens the health stream and returns a function that waits
// for the next report.
func (k *Kubelet) WatchHealth(ctx context.Context) (func() (*drahealthv1.NodeWatchResourcesResponse, error), error) {
	stream, err := k.health.NodeWatchResources(ctx, &drahealthv1.NodeWatchResourcesRequest{})
	if err != nil {
		return nil, fmt.Errorf("NodeWatchResources: %w", err)
	}
	return stream.Recv, nil
}

// GetInfo asks a registration socket for the plugin's info, as the
// kubelet's plugin watcher does, and reports success back with
// NotifyRegistrationStatus.
func GetInfo(ctx context.Context, registrationSocket string) (*registerapi.PluginInfo, error) {
	conn, err := dial(registrationSocket)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	c := registerapi.NewRegistrationClient(conn)
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	info, err := c.GetInfo(ctx, &registerapi.InfoRequest{})
	if err != nil {
		return nil, fmt.Errorf("GetInfo: %w", err)
	}
	if _, err := c.NotifyRegistrationStatus(ctx, &registerapi.RegistrationStatus{PluginRegistered: true}); err != nil {
		return nil, fmt.Errorf("NotifyRegistrationStatus: %w", err)
	}
	return info, nil
}

// claimErrors names each claim that is missing from a response or failed
// in it.
func claimErrors[R interface{ GetError() string }](claims []*resourceapi.ResourceClaim, results map[string]R) []error {
	var errs []error
	for _, c := range claims {
		r, ok := results[string(c.UID)]
		switch {
		case !ok:
			errs = append(errs, fmt.Errorf("claim %s/%s: missing from the response", c.Namespace, c.Name))
		case r.GetError() != "":
			errs = append(errs, fmt.Errorf("claim %s/%s: %s", c.Namespace, c.Name, r.GetError()))
		}
	}
	return errs
}
