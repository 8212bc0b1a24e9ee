package drivercmd

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/drakit/drakit/admission"
	"github.com/drakit/drakit/driver/driverflag"
	nvdriver "github.com/drakit/drakit/examples/nvidia/driver"
)

// WebhookCommand is the first argument that makes Run serve the driver's
// admission webhook (package admission, with nvdriver.ConfigScheme): what
// the chart's webhook Deployment runs, from the driver's own image. It
// refuses a ResourceClaim or ResourceClaimTemplate whose GpuConfig is bad
// with the message prepare would give.
const WebhookCommand = "webhook"

// ProbeCommand is the first argument that makes Run ask the driver's
// probe socket for /healthz or /readyz (driverflag.Probe) and return its
// answer: the chart's exec probes, which reach this pod's driver also
// while the other pod of a rolling update holds the HTTP port.
const ProbeCommand = "probe"

// runWebhook serves the admission webhook until SIGINT or SIGTERM.
func runWebhook(args []string) error {
	fs := flag.NewFlagSet("nvidia-dra-driver "+WebhookCommand, flag.ExitOnError)
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig of the cluster (default $KUBECONFIG, then the pod's service account)")
	address := fs.String("address", admission.DefaultAddress, "HTTPS address the API server calls")
	certFile := fs.String("tls-cert-file", "", "serving certificate (PEM), e.g. cert-manager's Secret mounted; with -tls-private-key-file, instead of -self-signed-secret")
	keyFile := fs.String("tls-private-key-file", "", "the certificate's key (PEM)")
	secret := fs.String("self-signed-secret", "", "namespace/name of the Secret where the webhook keeps the certificate authority and serving certificate it makes itself (and sets as -webhook-configuration's caBundle)")
	config := fs.String("webhook-configuration", "", "the ValidatingWebhookConfiguration whose caBundle the webhook sets (with -self-signed-secret)")
	dnsNames := fs.String("dns-names", "", "comma-separated names of the self-made certificate: the Service's (svc, svc.namespace, svc.namespace.svc)")
	ips := fs.String("ip-addresses", "", "comma-separated IP addresses of the self-made certificate: the host of a webhook reached by URL")
	std := driverflag.RegisterLogging(fs)
	addGates(std)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := std.ApplyLogging(); err != nil {
		return err
	}
	v, err := admission.NewValidator(nvdriver.ConfigScheme())
	if err != nil {
		return err
	}
	opts := []admission.Option{admission.WithAddress(*address)}
	switch {
	case *certFile != "" || *keyFile != "":
		opts = append(opts, admission.WithCertFiles(*certFile, *keyFile))
	case *secret != "":
		ns, name, ok := strings.Cut(*secret, "/")
		if !ok {
			return fmt.Errorf("%s: -self-signed-secret=%s: want namespace/name", WebhookCommand, *secret)
		}
		cfg, err := driverflag.LoadRESTConfig(*kubeconfig)
		if err != nil {
			return fmt.Errorf("%s: %w", WebhookCommand, err)
		}
		client, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return fmt.Errorf("%s: %w", WebhookCommand, err)
		}
		self := admission.SelfSigned{Client: client, Namespace: ns, Secret: name, WebhookConfiguration: *config, DNSNames: split(*dnsNames)}
		for _, s := range split(*ips) {
			ip := net.ParseIP(s)
			if ip == nil {
				return fmt.Errorf("%s: -ip-addresses: %q is not an IP address", WebhookCommand, s)
			}
			self.IPAddresses = append(self.IPAddresses, ip)
		}
		opts = append(opts, admission.WithSelfSignedCert(self))
	default:
		return fmt.Errorf("%s: give -tls-cert-file and -tls-private-key-file, or -self-signed-secret", WebhookCommand)
	}
	srv, err := admission.NewServer(v, opts...)
	if err != nil {
		return fmt.Errorf("%s: %w", WebhookCommand, err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx = klog.NewContext(ctx, klog.Background().WithName("webhook"))
	return srv.Run(ctx)
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

// runProbe asks the probe socket for one path.
func runProbe(args []string) error {
	fs := flag.NewFlagSet("nvidia-dra-driver "+ProbeCommand, flag.ContinueOnError)
	socket := fs.String("socket", "", "the driver's -probe-socket")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *socket == "" || fs.NArg() != 1 {
		return errors.New("usage: nvidia-dra-driver probe -socket=PATH /healthz|/readyz")
	}
	return driverflag.Probe(context.Background(), *socket, fs.Arg(0))
}
