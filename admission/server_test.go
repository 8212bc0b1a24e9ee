package admission

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/drakit/drakit/driver"
)

// TestCertFilesReloaded: a Server of certificate files serves them and
// the renewed ones once the files change (cert-manager renews its Secret,
// the kubelet updates the mounted files).
func TestCertFilesReloaded(t *testing.T) {
	scheme, err := driver.NewConfigScheme("g.example.com", driver.NewConfigType[struct{}]("", "", nil))
	if err != nil {
		t.Fatal(err)
	}
	v := &Validator{scheme: scheme}
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	ips := []net.IP{net.ParseIP("127.0.0.1")}
	write := func() *x509.Certificate {
		t.Helper()
		m, _, err := material{}.renew(time.Now(), nil, ips)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(keyFile, m.key, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(certFile, m.cert, 0o600); err != nil {
			t.Fatal(err)
		}
		c, err := parseCert(m.cert)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	first := write()
	srv, err := NewServer(v, WithAddress("127.0.0.1:0"), WithCertFiles(certFile, keyFile), WithCheckInterval(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	<-srv.Started()
	served := func() *x509.Certificate {
		t.Helper()
		c, err := tls.Dial("tcp", srv.Addr(), &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // the test compares the certificate itself
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		return c.ConnectionState().PeerCertificates[0]
	}
	if got := served(); !got.Equal(first) {
		t.Fatal("the server does not serve the file's certificate")
	}
	second := write()
	deadline := time.Now().Add(10 * time.Second)
	for !served().Equal(second) {
		if time.Now().After(deadline) {
			t.Fatal("the renewed certificate is not served")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
