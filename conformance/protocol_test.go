package conformance

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	drapbv1 "k8s.io/kubelet/pkg/apis/dra/v1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"github.com/drakit/drakit/conformance/internal/testdriver"
	"github.com/drakit/drakit/internal/kubeletclient"
)

// TestKubeletSide runs the test driver in-process with an API server that
// does not answer (registration and unprepare work without one) and
// exercises the suite's kubelet side on it: finding the socket in a
// registry folder, GetInfo, NotifyRegistrationStatus, dialing the
// endpoint and an unprepare call over v1 and v1beta1.
func TestKubeletSide(t *testing.T) {
	dir, err := os.MkdirTemp("", "cfk")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	kubeconfig := filepath.Join(dir, "kubeconfig")
	const kc = `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: x}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`
	if err := os.WriteFile(kubeconfig, []byte(kc), 0o600); err != nil {
		t.Fatal(err)
	}
	// A socket that is not the driver's must be skipped.
	reg := filepath.Join(dir, "reg")
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		done <- testdriver.Run(ctx, testdriver.Options{
			DriverName: "kubelet-side.example.com", NodeName: "n", Kubeconfig: kubeconfig,
			RegistrarDir: reg, PluginDir: filepath.Join(dir, "p"), CDIDir: filepath.Join(dir, "cdi"),
			Devices: 1, HealthTimeout: time.Second,
		})
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})

	socket, info, err := kubeletclient.FindRegistration(t.Context(), reg, "kubelet-side.example.com", 20*time.Second)
	if err != nil {
		t.Fatalf("findRegistration: %v", err)
	}
	if info.Type != registerapi.DRAPlugin || info.Name != "kubelet-side.example.com" {
		t.Errorf("GetInfo = %+v", info)
	}
	if got := kubeletclient.FirstKnown(info.SupportedVersions, kubeletclient.NodeServices); got != drapbv1.DRAPluginService {
		t.Errorf("node service = %q from %q", got, info.SupportedVersions)
	}
	if got := kubeletclient.FirstKnown(info.SupportedVersions, kubeletclient.HealthServices); got == "" {
		t.Errorf("no health service in %q", info.SupportedVersions)
	}
	if err := kubeletclient.NotifyRegistration(t.Context(), socket, true, ""); err != nil {
		t.Errorf("notify: %v", err)
	}
	if _, _, err := kubeletclient.FindRegistration(t.Context(), reg, "other.example.com", time.Second); err == nil || !strings.Contains(err.Error(), `name "kubelet-side.example.com"`) {
		t.Errorf("looking for another driver: got %v, want an error listing the socket seen", err)
	}

	conn, err := kubeletclient.Dial(t.Context(), info.Endpoint, kubeletclient.DialTimeout)
	if err != nil {
		t.Fatalf("dial endpoint: %v", err)
	}
	defer func() { _ = conn.Close() }()
	for _, svc := range kubeletclient.NodeServices {
		resp, err := kubeletclient.NodeClient(conn, svc).NodeUnprepareResources(t.Context(), &drapbv1.NodeUnprepareResourcesRequest{
			Claims: []*drapbv1.Claim{{Namespace: "ns", Name: "c", Uid: "uid-1"}},
		})
		if err != nil {
			t.Errorf("%s: unprepare: %v", svc, err)
			continue
		}
		if r, ok := resp.Claims["uid-1"]; !ok || r.Error != "" {
			t.Errorf("%s: unprepare of an unknown claim = %v", svc, resp.Claims)
		}
	}
}
