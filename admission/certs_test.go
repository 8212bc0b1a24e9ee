package admission

import (
	"bytes"
	"crypto/x509"
	"net"
	"testing"
	"time"
)

// verify checks that m's serving certificate is trusted by its bundle
// for name at now.
func verify(t *testing.T, m material, name string, now time.Time) {
	t.Helper()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(m.bundle()) {
		t.Fatal("bundle holds no certificate")
	}
	c, err := parseCert(m.cert)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Verify(x509.VerifyOptions{Roots: pool, DNSName: name, CurrentTime: now}); err != nil {
		t.Errorf("serving certificate not trusted by the bundle at %s: %v", now.Format(time.DateOnly), err)
	}
}

func TestRenew(t *testing.T) {
	dns := []string{"hook", "hook.ns", "hook.ns.svc"}
	ips := []net.IP{net.ParseIP("127.0.0.1")}
	t0 := time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)

	m, changed, err := material{}.renew(t0, dns, ips)
	if err != nil || !changed {
		t.Fatalf("first renew: changed %v, %v", changed, err)
	}
	verify(t, m, "hook.ns.svc", t0)

	// Nothing due: nothing changes, a second replica keeps the first's.
	m2, changed, err := m.renew(t0.Add(24*time.Hour), dns, ips)
	if err != nil || changed || !bytes.Equal(m2.cert, m.cert) {
		t.Fatalf("renew with nothing due: changed %v, %v", changed, err)
	}

	// Two thirds of the serving certificate gone: a new one, same CA.
	later := t0.Add(CertValidity * 2 / 3).Add(24 * time.Hour)
	m3, changed, err := m.renew(later, dns, ips)
	if err != nil || !changed || bytes.Equal(m3.cert, m.cert) || !bytes.Equal(m3.caCert, m.caCert) {
		t.Fatalf("renew of a due certificate: changed %v, new cert %v, same CA %v, %v", changed, !bytes.Equal(m3.cert, m.cert), bytes.Equal(m3.caCert, m.caCert), err)
	}
	verify(t, m3, "hook", later)

	// Other names: a new certificate for them.
	m4, changed, err := m.renew(t0, []string{"other.ns.svc"}, nil)
	if err != nil || !changed {
		t.Fatalf("renew for other names: changed %v, %v", changed, err)
	}
	verify(t, m4, "other.ns.svc", t0)

	// The CA near its end: a new CA, the old one stays in the bundle, so
	// that a replica still serving the old certificate is trusted.
	end := t0.Add(CAValidity - CertValidity/2)
	m5, changed, err := m3.renew(end, dns, ips)
	if err != nil || !changed || bytes.Equal(m5.caCert, m3.caCert) || !bytes.Equal(m5.previous, m3.caCert) {
		t.Fatalf("renew of a CA near its end: changed %v, new CA %v, previous kept %v, %v", changed, !bytes.Equal(m5.caCert, m3.caCert), bytes.Equal(m5.previous, m3.caCert), err)
	}
	verify(t, m5, "hook", end)
	ca, caKey, err := parsePair(m3.caCert, m3.caKey)
	if err != nil {
		t.Fatal(err)
	}
	oldCert, _, err := newCert(end.Add(-time.Hour), CertValidity, ca, caKey, dns, ips)
	if err != nil {
		t.Fatal(err)
	}
	verify(t, material{caCert: m5.caCert, previous: m5.previous, cert: oldCert}, "hook", end)

	// Garbage in the Secret: replaced.
	m6, changed, err := material{caCert: []byte("x"), caKey: []byte("y"), cert: []byte("z")}.renew(t0, dns, ips)
	if err != nil || !changed {
		t.Fatalf("renew of garbage: changed %v, %v", changed, err)
	}
	verify(t, m6, "hook.ns", t0)
}
