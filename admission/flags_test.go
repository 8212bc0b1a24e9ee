package admission

import (
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/drakit/drakit/driver"
)

func TestFlags(t *testing.T) {
	scheme, err := driver.NewConfigScheme("g.example.com", driver.NewConfigType[struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
	}]("g.example.com/v1", "C", nil))
	if err != nil {
		t.Fatal(err)
	}
	v, err := NewValidator(scheme)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cert, key, err := newCert(time.Now(), time.Hour, nil, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	if err := os.WriteFile(certFile, cert, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, key, 0o600); err != nil {
		t.Fatal(err)
	}
	nowhere := func(string) (kubernetes.Interface, error) {
		return kubernetes.NewForConfig(&rest.Config{Host: "https://127.0.0.1:1"})
	}
	for _, tc := range []struct {
		args       []string
		wantErr    string
		wantLayout bool // the Server serves a LayoutGuard of the driver
	}{
		{args: []string{"--tls-cert-file=" + certFile, "--tls-private-key-file=" + keyFile}},
		{args: []string{"--self-signed-secret=ns/s", "--webhook-configuration=c", "--dns-names=a,a.ns,a.ns.svc", "--ip-addresses=127.0.0.1"}},
		{args: nil, wantErr: "--self-signed-secret"},
		{args: []string{"--tls-cert-file=" + certFile}, wantErr: "key"},
		{args: []string{"--tls-cert-file=" + certFile, "--tls-private-key-file=" + keyFile, "--self-signed-secret=ns/s"}, wantErr: "exclusive"},
		{args: []string{"--self-signed-secret=s", "--webhook-configuration=c", "--dns-names=a"}, wantErr: "namespace/name"},
		{args: []string{"--self-signed-secret=ns/s", "--webhook-configuration=c", "--ip-addresses=localhost"}, wantErr: `"localhost" is not an IP address`},
		{args: []string{"--self-signed-secret=ns/s", "--dns-names=a"}, wantErr: "ValidatingWebhookConfiguration"},
		{args: []string{"--self-signed-secret=ns/s", "--webhook-configuration=c"}, wantErr: "DNS name or an IP address"},
		{args: []string{"--tls-cert-file=" + certFile, "--tls-private-key-file=" + keyFile, "--layout-allocations",
			"--layout-namespace=ns", "--reuse-port", "--drain=2s"}, wantLayout: true},
		{args: []string{"--self-signed-secret=ns/s", "--webhook-configuration=c", "--dns-names=a", "--layout-allocations",
			"--layout-namespace=ns"}, wantLayout: true},
		{args: []string{"--tls-cert-file=" + certFile, "--tls-private-key-file=" + keyFile, "--layout-allocations"},
			wantErr: "--layout-namespace"},
	} {
		fs := flag.NewFlagSet("webhook", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		f := Flags{newClient: nowhere}
		f.Register(fs)
		if err := fs.Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		srv, err := f.Server(v)
		if err == nil && (srv.o.layout != nil) != tc.wantLayout {
			t.Errorf("%v: layout guard %v, want %v", tc.args, srv.o.layout != nil, tc.wantLayout)
		}
		if err == nil && srv.o.layout != nil && srv.o.layout.Driver() != "g.example.com" {
			t.Errorf("%v: layout guard of %s", tc.args, srv.o.layout.Driver())
		}
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("%v: %v", tc.args, err)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("%v: %v, want an error with %q", tc.args, err, tc.wantErr)
		}
	}
}
