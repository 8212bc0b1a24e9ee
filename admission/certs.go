package admission

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
)

// SelfSigned is how a [Server] keeps its own TLS certificate, with
// nothing installed in the cluster but the webhook: a certificate
// authority and a serving certificate it signs, kept in a Secret that
// every replica shares (made when missing, renewed in place), and the
// authority's certificate set as the caBundle of every webhook of the
// ValidatingWebhookConfiguration. The serving certificate is valid for
// [CertValidity] and renewed when a third of it is left; the authority
// for [CAValidity], renewed a [CertValidity] before it ends, the old one
// staying in the caBundle while it is valid, so that no certificate a
// replica serves is ever untrusted.
//
// The webhook's ServiceAccount needs get and update on the Secret (and
// create, unless it exists, e.g. made empty by a chart) and get and
// update on the ValidatingWebhookConfiguration.
type SelfSigned struct {
	// Client reaches the API server.
	Client kubernetes.Interface
	// Namespace and Secret name the Secret that holds the certificates
	// (keys ca.crt, ca.key, tls.crt, tls.key, ca-previous.crt).
	Namespace, Secret string
	// WebhookConfiguration names the ValidatingWebhookConfiguration
	// whose webhooks get the caBundle.
	WebhookConfiguration string
	// DNSNames and IPAddresses are the names the serving certificate is
	// valid for: the Service's ("svc", "svc.ns", "svc.ns.svc"), or the
	// host of a webhook reached by URL.
	DNSNames    []string
	IPAddresses []net.IP
}

// The certificates' lifetimes (see [SelfSigned]).
const (
	CAValidity   = 10 * 365 * 24 * time.Hour
	CertValidity = 365 * 24 * time.Hour
)

// The Secret's keys.
const (
	keyCACert   = "ca.crt"
	keyCAKey    = "ca.key"
	keyCert     = "tls.crt"
	keyKey      = "tls.key"
	keyPrevious = "ca-previous.crt"
)

// fieldManager names the webhook's writes in managedFields.
const fieldManager = "drakit-admission"

// material is the certificates in the Secret.
type material struct {
	caCert, caKey, cert, key, previous []byte
}

func materialOf(data map[string][]byte) material {
	return material{caCert: data[keyCACert], caKey: data[keyCAKey], cert: data[keyCert], key: data[keyKey], previous: data[keyPrevious]}
}

func (m material) data() map[string][]byte {
	d := map[string][]byte{keyCACert: m.caCert, keyCAKey: m.caKey, keyCert: m.cert, keyKey: m.key}
	if len(m.previous) > 0 {
		d[keyPrevious] = m.previous
	}
	return d
}

// bundle is the caBundle: the authority, and the previous one while it
// is valid.
func (m material) bundle() []byte { return append(slices.Clone(m.caCert), m.previous...) }

// renew returns m with what is missing, invalid or due renewed, and
// whether anything was.
func (m material) renew(now time.Time, dns []string, ips []net.IP) (material, bool, error) {
	changed := false
	ca, caKey, err := parsePair(m.caCert, m.caKey)
	if err != nil || !ca.IsCA || ca.NotAfter.Sub(now) < CertValidity {
		if ca != nil && err == nil && now.Before(ca.NotAfter) {
			m.previous = m.caCert
		} else {
			m.previous = nil
		}
		if m.caCert, m.caKey, err = newCert(now, CAValidity, nil, nil, nil, nil); err != nil {
			return m, false, err
		}
		if ca, caKey, err = parsePair(m.caCert, m.caKey); err != nil {
			return m, false, err
		}
		m.cert, changed = nil, true
	}
	if p, _ := parseCert(m.previous); len(m.previous) > 0 && (p == nil || !now.Before(p.NotAfter)) {
		m.previous, changed = nil, true
	}
	cert, _, err := parsePair(m.cert, m.key)
	if err != nil || cert.CheckSignatureFrom(ca) != nil || !sameNames(cert, dns, ips) ||
		cert.NotAfter.Sub(now) < cert.NotAfter.Sub(cert.NotBefore)/3 {
		if m.cert, m.key, err = newCert(now, CertValidity, ca, caKey, dns, ips); err != nil {
			return m, false, err
		}
		changed = true
	}
	return m, changed, nil
}

func sameNames(c *x509.Certificate, dns []string, ips []net.IP) bool {
	if !slices.Equal(c.DNSNames, dns) || len(c.IPAddresses) != len(ips) {
		return false
	}
	for i := range ips {
		if !c.IPAddresses[i].Equal(ips[i]) {
			return false
		}
	}
	return true
}

// newCert makes a key and a certificate: an authority when parent is
// nil, else a serving certificate for dns and ips signed by parent.
func newCert(now time.Time, validity time.Duration, parent *x509.Certificate, parentKey *ecdsa.PrivateKey, dns []string, ips []net.IP) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generate key: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, nil, fmt.Errorf("generate serial: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		NotBefore:    now.Add(-time.Hour), // clocks differ
		NotAfter:     now.Add(validity),
	}
	signer, signerKey := tmpl, key
	if parent == nil {
		tmpl.Subject = pkix.Name{CommonName: "drakit admission webhook CA"}
		tmpl.IsCA, tmpl.BasicConstraintsValid, tmpl.MaxPathLenZero = true, true, true
		tmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature
	} else {
		tmpl.Subject = pkix.Name{CommonName: cmpOr(append(slices.Clone(dns), "drakit admission webhook")...)}
		tmpl.DNSNames, tmpl.IPAddresses = dns, ips
		tmpl.KeyUsage = x509.KeyUsageDigitalSignature
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		signer, signerKey = parent, parentKey
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, signer, &key.PublicKey, signerKey)
	if err != nil {
		return nil, nil, fmt.Errorf("create certificate: %w", err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, fmt.Errorf("encode key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), nil
}

func cmpOr(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}

func parseCert(certPEM []byte) (*x509.Certificate, error) {
	b, _ := pem.Decode(certPEM)
	if b == nil || b.Type != "CERTIFICATE" {
		return nil, errors.New("no PEM certificate")
	}
	return x509.ParseCertificate(b.Bytes)
}

// parsePair parses a certificate and its EC key and checks they match.
func parsePair(certPEM, keyPEM []byte) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	if _, err := tls.X509KeyPair(certPEM, keyPEM); err != nil {
		return nil, nil, err
	}
	c, err := parseCert(certPEM)
	if err != nil {
		return nil, nil, err
	}
	b, _ := pem.Decode(keyPEM)
	if b == nil {
		return nil, nil, errors.New("no PEM key")
	}
	k, err := x509.ParseECPrivateKey(b.Bytes)
	if err != nil {
		return nil, nil, err
	}
	return c, k, nil
}

// keep makes sure the Secret holds valid, current certificates and the
// webhook configuration their authority, and returns the serving
// certificate. Two replicas that race converge: a lost create or update
// (AlreadyExists, Conflict) is an error, and the next round reads the
// winner's.
func (s *SelfSigned) keep(ctx context.Context, now time.Time) (*tls.Certificate, error) {
	secrets := s.Client.CoreV1().Secrets(s.Namespace)
	sec, err := secrets.Get(ctx, s.Secret, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		m, _, err := material{}.renew(now, s.DNSNames, s.IPAddresses)
		if err != nil {
			return nil, err
		}
		sec = &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: s.Secret, Namespace: s.Namespace}, Type: corev1.SecretTypeOpaque, Data: m.data()}
		if sec, err = secrets.Create(ctx, sec, metav1.CreateOptions{FieldManager: fieldManager}); err != nil {
			return nil, fmt.Errorf("create Secret %s/%s: %w", s.Namespace, s.Secret, err)
		}
		klog.FromContext(ctx).Info("Created the webhook's certificates", "secret", klog.KObj(sec))
	case err != nil:
		return nil, fmt.Errorf("get Secret %s/%s: %w", s.Namespace, s.Secret, err)
	default:
		m, changed, err := materialOf(sec.Data).renew(now, s.DNSNames, s.IPAddresses)
		if err != nil {
			return nil, err
		}
		if changed {
			sec = sec.DeepCopy()
			sec.Data = m.data()
			if sec, err = secrets.Update(ctx, sec, metav1.UpdateOptions{FieldManager: fieldManager}); err != nil {
				return nil, fmt.Errorf("update Secret %s/%s: %w", s.Namespace, s.Secret, err)
			}
			klog.FromContext(ctx).Info("Renewed the webhook's certificates", "secret", klog.KObj(sec))
		}
	}
	m := materialOf(sec.Data)
	if err := s.inject(ctx, m.bundle()); err != nil {
		return nil, err
	}
	cert, err := tls.X509KeyPair(m.cert, m.key)
	if err != nil {
		return nil, fmt.Errorf("Secret %s/%s: %w", s.Namespace, s.Secret, err)
	}
	return &cert, nil
}

// inject sets bundle as the caBundle of every webhook of the
// configuration.
func (s *SelfSigned) inject(ctx context.Context, bundle []byte) error {
	api := s.Client.AdmissionregistrationV1().ValidatingWebhookConfigurations()
	cfg, err := api.Get(ctx, s.WebhookConfiguration, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("get ValidatingWebhookConfiguration %s: %w", s.WebhookConfiguration, err)
	}
	changed := false
	for i := range cfg.Webhooks {
		if cc := &cfg.Webhooks[i].ClientConfig; !bytes.Equal(cc.CABundle, bundle) {
			cc.CABundle, changed = bundle, true
		}
	}
	if !changed {
		return nil
	}
	if _, err := api.Update(ctx, cfg, metav1.UpdateOptions{FieldManager: fieldManager}); err != nil {
		return fmt.Errorf("set the caBundle of ValidatingWebhookConfiguration %s: %w", s.WebhookConfiguration, err)
	}
	klog.FromContext(ctx).Info("Set the webhook's caBundle", "validatingWebhookConfiguration", s.WebhookConfiguration)
	return nil
}
