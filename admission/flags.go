package admission

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/drakit/drakit/driver/driverflag"
)

// Flags are a webhook program's command line, so that every driver's
// webhook takes the same flags: --address, the certificate files
// (--tls-cert-file, --tls-private-key-file: cert-manager's), or a
// self-kept certificate (--self-signed-secret, --webhook-configuration,
// --dns-names, --ip-addresses, --kubeconfig), and --layout-allocations,
// which serves a [LayoutGuard] of the validator's driver too.
// [Flags.Register] adds them; [Flags.Server] makes the Server they
// describe.
type Flags struct {
	Address               string
	CertFile, KeyFile     string
	SelfSignedSecret      string // namespace/name
	WebhookConfiguration  string
	DNSNames, IPAddresses string // comma-separated
	Kubeconfig            string
	// LayoutAllocations serves a LayoutGuard of the driver at LayoutPath,
	// with the ledgers in LayoutNamespace (get, list, watch, update on
	// configmaps there).
	LayoutAllocations bool
	LayoutNamespace   string
	// ReusePort opens the port with SO_REUSEPORT (WithReusePort).
	ReusePort bool
	// Drain is WithDrain's.
	Drain     time.Duration
	newClient func(kubeconfig string) (kubernetes.Interface, error)
}

// Register adds the flags to fs.
func (f *Flags) Register(fs *flag.FlagSet) {
	fs.StringVar(&f.Address, "address", DefaultAddress, "HTTPS address the API server calls")
	fs.StringVar(&f.CertFile, "tls-cert-file", "", "serving certificate (PEM), e.g. cert-manager's Secret mounted; with --tls-private-key-file, instead of --self-signed-secret")
	fs.StringVar(&f.KeyFile, "tls-private-key-file", "", "the serving certificate's key (PEM)")
	fs.StringVar(&f.SelfSignedSecret, "self-signed-secret", "", "namespace/name of the Secret where the webhook keeps the certificate authority and serving certificate it makes itself, and sets as --webhook-configuration's caBundle")
	fs.StringVar(&f.WebhookConfiguration, "webhook-configuration", "", "the ValidatingWebhookConfiguration whose caBundle the webhook sets (with --self-signed-secret)")
	fs.StringVar(&f.DNSNames, "dns-names", "", "comma-separated names of the self-made certificate: the Service's (svc, svc.namespace, svc.namespace.svc)")
	fs.StringVar(&f.IPAddresses, "ip-addresses", "", "comma-separated IP addresses of the self-made certificate: the host of a webhook reached by URL")
	fs.BoolVar(&f.LayoutAllocations, "layout-allocations", false, "also admit, at "+LayoutPath+", an allocation of a layout device only by moving it from Open to Held in its node's layout ledger (package partition/ledger), refusing it when it is not open; reads and writes the ledgers (ConfigMaps in --layout-namespace)")
	fs.StringVar(&f.LayoutNamespace, "layout-namespace", "", "the namespace of the layout ledgers (with --layout-allocations)")
	fs.BoolVar(&f.ReusePort, "reuse-port", false, "open --address with SO_REUSEPORT, so that replicas on one host's network share the port")
	fs.DurationVar(&f.Drain, "drain", DefaultDrain, "how long to keep serving after SIGTERM, /readyz failing, before finishing the requests in flight and exiting")
	if fs.Lookup("kubeconfig") == nil {
		fs.StringVar(&f.Kubeconfig, "kubeconfig", "", "kubeconfig of the cluster (default $KUBECONFIG, then the pod's service account), for --self-signed-secret and --layout-allocations")
	}
}

// Server returns the Server of v that the flags describe. Errors name
// the flag to fix.
func (f *Flags) Server(v *Validator) (*Server, error) {
	if v == nil {
		return nil, errors.New("webhook flags: nil validator")
	}
	opts := []Option{WithAddress(f.Address), WithDrain(f.Drain)}
	if f.ReusePort {
		opts = append(opts, WithReusePort())
	}
	var client kubernetes.Interface
	kube := func() (kubernetes.Interface, error) {
		if client != nil {
			return client, nil
		}
		newClient := f.newClient
		if newClient == nil {
			newClient = loadClient
		}
		c, err := newClient(f.Kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("webhook flags: %w", err)
		}
		client = c
		return c, nil
	}
	if f.LayoutAllocations {
		c, err := kube()
		if err != nil {
			return nil, err
		}
		if f.LayoutNamespace == "" {
			return nil, errors.New("webhook flags: --layout-allocations needs --layout-namespace")
		}
		g, err := NewLayoutGuard(c, v.Driver(), f.LayoutNamespace)
		if err != nil {
			return nil, fmt.Errorf("webhook flags: --layout-allocations: %w", err)
		}
		opts = append(opts, WithLayoutGuard(g))
	}
	switch {
	case f.CertFile != "" || f.KeyFile != "":
		if f.SelfSignedSecret != "" {
			return nil, errors.New("webhook flags: --tls-cert-file and --self-signed-secret are exclusive")
		}
		opts = append(opts, WithCertFiles(f.CertFile, f.KeyFile))
	case f.SelfSignedSecret != "":
		ns, name, ok := strings.Cut(f.SelfSignedSecret, "/")
		if !ok || ns == "" || name == "" {
			return nil, fmt.Errorf("webhook flags: --self-signed-secret=%s: want namespace/name", f.SelfSignedSecret)
		}
		client, err := kube()
		if err != nil {
			return nil, err
		}
		self := SelfSigned{Client: client, Namespace: ns, Secret: name, WebhookConfiguration: f.WebhookConfiguration, DNSNames: split(f.DNSNames)}
		for _, s := range split(f.IPAddresses) {
			ip := net.ParseIP(s)
			if ip == nil {
				return nil, fmt.Errorf("webhook flags: --ip-addresses: %q is not an IP address", s)
			}
			self.IPAddresses = append(self.IPAddresses, ip)
		}
		opts = append(opts, WithSelfSignedCert(self))
	default:
		return nil, errors.New("webhook flags: give --tls-cert-file and --tls-private-key-file, or --self-signed-secret")
	}
	return NewServer(v, opts...)
}

// WebhookQPS is the client-side rate limit of the webhook's client made
// from Flags (requests per second; the burst is twice as many).
const WebhookQPS = 200

// loadClient is the client of driverflag.LoadRESTConfig.
func loadClient(kubeconfig string) (kubernetes.Interface, error) {
	cfg, err := driverflag.LoadRESTConfig(kubeconfig)
	if err != nil {
		return nil, err
	}
	// On the allocation path, a layout admission reads and writes its
	// node's ledger: client-go's default 5 requests/s would queue a burst
	// past the webhook's timeout. The API server's priority and fairness
	// protects it.
	cfg.QPS, cfg.Burst = WebhookQPS, 2*WebhookQPS
	return kubernetes.NewForConfig(cfg)
}

func split(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}
