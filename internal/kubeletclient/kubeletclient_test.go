package kubeletclient

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// registration is a plugin's registration service that records the
// notifications it gets.
type registration struct {
	registerapi.UnimplementedRegistrationServer
	name string
	mu   sync.Mutex
	got  []*registerapi.RegistrationStatus
}

func (r *registration) GetInfo(context.Context, *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	return &registerapi.PluginInfo{Type: registerapi.DRAPlugin, Name: r.name, SupportedVersions: NodeServices}, nil
}

func (r *registration) NotifyRegistrationStatus(_ context.Context, s *registerapi.RegistrationStatus) (*registerapi.RegistrationStatusResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, s)
	return &registerapi.RegistrationStatusResponse{}, nil
}

// serve serves a registration service for name on a unix socket.
func serve(t *testing.T, socket, name string) *registration {
	t.Helper()
	l, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	reg := &registration{name: name}
	registerapi.RegisterRegistrationServer(srv, reg)
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(srv.Stop)
	return reg
}

func TestFindRegistrationAndNotify(t *testing.T) {
	// Unix socket paths are short: not t.TempDir.
	dir, err := os.MkdirTemp("", "kc")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	serve(t, filepath.Join(dir, "other.example.com-reg.sock"), "other.example.com")
	hidden := serve(t, filepath.Join(dir, ".gpu.example.com-reg.sock"), "gpu.example.com")
	want := serve(t, filepath.Join(dir, "z.sock"), "gpu.example.com")

	socket, info, err := FindRegistration(t.Context(), dir, "gpu.example.com", 5*time.Second)
	if err != nil {
		t.Fatalf("FindRegistration: %v", err)
	}
	if filepath.Base(socket) != "z.sock" || info.Name != "gpu.example.com" {
		t.Errorf("found %s (%+v), want z.sock: sockets starting with a dot are ignored, as the kubelet does", socket, info)
	}
	if got := FirstKnown(info.SupportedVersions, NodeServices); got != NodeServices[0] {
		t.Errorf("node service %q, want %q", got, NodeServices[0])
	}
	if err := NotifyRegistration(t.Context(), socket, true, ""); err != nil {
		t.Fatalf("NotifyRegistration: %v", err)
	}
	if len(want.got) != 1 || !want.got[0].PluginRegistered || len(hidden.got) != 0 {
		t.Errorf("notifications: found socket %v, hidden socket %v", want.got, hidden.got)
	}

	_, _, err = FindRegistration(t.Context(), dir, "missing.example.com", 300*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), `name "other.example.com"`) {
		t.Errorf("looking for a driver that is not there: %v, want an error that lists the sockets seen", err)
	}
}

func TestIsTransport(t *testing.T) {
	tests := []struct {
		err  error
		want bool
	}{
		{nil, false},
		{status.Error(codes.Unavailable, "gone"), true},
		{status.Error(codes.DeadlineExceeded, "slow"), true},
		{context.DeadlineExceeded, true},
		{status.Error(codes.Internal, "prepare failed"), false},
		{errors.New("plain"), false},
	}
	for _, tc := range tests {
		if got := IsTransport(tc.err); got != tc.want {
			t.Errorf("IsTransport(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

func TestClaims(t *testing.T) {
	got := Claims(&resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c", UID: "u"}})
	if len(got) != 1 || got[0].Namespace != "ns" || got[0].Name != "c" || got[0].Uid != "u" {
		t.Errorf("Claims = %v", got)
	}
}
