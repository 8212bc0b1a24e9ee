package admission

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"k8s.io/klog/v2"
)

// Server serves a [Validator] over HTTPS at [Path], and a [LayoutGuard]
// at [LayoutPath] when given one ([WithLayoutGuard]), as the service (or
// URL) of ValidatingWebhooks, with /healthz and /readyz on the same
// port. Its certificate is either its own ([WithSelfSignedCert]) or read
// from files that something else renews, e.g. cert-manager's Secret
// mounted into the pod ([WithCertFiles]).
type Server struct {
	v        *Validator
	o        options
	cert     atomic.Pointer[tls.Certificate]
	ready    atomic.Bool
	draining atomic.Bool
	addr     atomic.Pointer[string]
	started  chan struct{}
}

// Option configures a [Server].
type Option func(*options) error

type options struct {
	address           string
	certFile, keyFile string
	self              *SelfSigned
	interval          time.Duration
	layout            *LayoutGuard
	reusePort         bool
	drain             time.Duration
}

// DefaultAddress is where a Server listens unless [WithAddress] says
// otherwise.
const DefaultAddress = ":8443"

// WithAddress sets the address to listen on (default [DefaultAddress];
// "127.0.0.1:0" picks a free port, see [Server.Addr]).
func WithAddress(addr string) Option {
	return func(o *options) error {
		if addr == "" {
			return errors.New("WithAddress: empty address")
		}
		o.address = addr
		return nil
	}
}

// WithCertFiles serves the certificate and key in these PEM files,
// read again when either changes (cert-manager renews its Secret and the
// kubelet updates the mounted files): the caBundle is then someone
// else's to set (cert-manager's CA injector).
func WithCertFiles(certFile, keyFile string) Option {
	return func(o *options) error {
		if certFile == "" || keyFile == "" {
			return errors.New("WithCertFiles: a certificate and a key file are both needed")
		}
		o.certFile, o.keyFile = certFile, keyFile
		return nil
	}
}

// WithSelfSignedCert makes the Server keep its own certificate and set
// the webhook configuration's caBundle (see [SelfSigned]).
func WithSelfSignedCert(s SelfSigned) Option {
	return func(o *options) error {
		switch {
		case s.Client == nil:
			return errors.New("WithSelfSignedCert: no client")
		case s.Namespace == "" || s.Secret == "":
			return errors.New("WithSelfSignedCert: the Secret's namespace and name are needed")
		case s.WebhookConfiguration == "":
			return errors.New("WithSelfSignedCert: the ValidatingWebhookConfiguration's name is needed")
		case len(s.DNSNames) == 0 && len(s.IPAddresses) == 0:
			return errors.New("WithSelfSignedCert: the certificate needs a DNS name or an IP address")
		}
		o.self = &s
		return nil
	}
}

// WithCheckInterval sets how often the certificate is checked: the
// files read again when changed, or the Secret and caBundle kept
// (default one minute).
func WithCheckInterval(d time.Duration) Option {
	return func(o *options) error {
		if d <= 0 {
			return fmt.Errorf("WithCheckInterval: %v is not positive", d)
		}
		o.interval = d
		return nil
	}
}

// WithLayoutGuard makes the Server serve g at [LayoutPath] too, and run
// it: the Server is ready ([Server.Started], /readyz) only once g has
// synced, and stops g when it stops. g must not be run otherwise.
func WithLayoutGuard(g *LayoutGuard) Option {
	return func(o *options) error {
		if g == nil {
			return errors.New("WithLayoutGuard: nil guard")
		}
		o.layout = g
		return nil
	}
}

// WithReusePort opens the listening socket with SO_REUSEPORT, so that
// several replicas on one host's network share one port (the kernel
// spreads the connections among them): what lets a webhook on the host
// network (drakit's local cluster) run two replicas and roll with a
// surge. Linux only; elsewhere it is an error at Run.
func WithReusePort() Option {
	return func(o *options) error {
		o.reusePort = true
		return nil
	}
}

// WithDrain sets how long the Server keeps serving after its context is
// done, with /readyz failing, before it stops accepting and waits for the
// requests in flight (default DefaultDrain): the time for the API server
// (or kube-proxy) to stop sending it new requests, so that a replica
// deleted during a burst refuses nothing. d must not be negative.
func WithDrain(d time.Duration) Option {
	return func(o *options) error {
		if d < 0 {
			return fmt.Errorf("WithDrain: %v is negative", d)
		}
		o.drain = d
		return nil
	}
}

// DefaultDrain is the drain of a Server unless [WithDrain] says otherwise.
const DefaultDrain = 5 * time.Second

// NewServer returns a Server of v, not running yet. Exactly one of
// [WithCertFiles] and [WithSelfSignedCert] is needed. v may be nil when
// [WithLayoutGuard] is given: the Server then serves only the guard.
func NewServer(v *Validator, opts ...Option) (*Server, error) {
	o := options{address: DefaultAddress, interval: time.Minute, drain: DefaultDrain}
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return nil, fmt.Errorf("new admission server: %w", err)
		}
	}
	if v == nil && o.layout == nil {
		return nil, errors.New("new admission server: nil validator and no layout guard")
	}
	if v != nil && o.layout != nil && v.Driver() != o.layout.Driver() {
		return nil, fmt.Errorf("new admission server: the validator's driver %s is not the layout guard's, %s", v.Driver(), o.layout.Driver())
	}
	if (o.certFile == "") == (o.self == nil) {
		return nil, errors.New("new admission server: give WithCertFiles or WithSelfSignedCert (exactly one)")
	}
	return &Server{v: v, o: o, started: make(chan struct{})}, nil
}

// Started is closed once the Server listens and has a certificate
// (and, self-signed, has set the caBundle) and its layout guard, if any,
// has synced: it is ready.
func (s *Server) Started() <-chan struct{} { return s.started }

// Addr is the address the Server listens on, once [Server.Started] is
// closed; "" before.
func (s *Server) Addr() string {
	if a := s.addr.Load(); a != nil {
		return *a
	}
	return ""
}

// Run gets the certificate (retrying with a growing delay while the API
// server or the files are not there yet), runs the layout guard if any,
// then serves until ctx is done, drains ([WithDrain]: /readyz fails,
// requests are still served, then those in flight are finished) and
// returns nil, or an error when it cannot listen or the guard cannot
// run. Requests in flight are not canceled by ctx.
func (s *Server) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	renew := s.loadFiles
	if s.o.self != nil {
		renew = func(ctx context.Context) error {
			c, err := s.o.self.keep(ctx, time.Now())
			if err == nil {
				s.cert.Store(c)
			}
			return err
		}
	}
	for delay := time.Second; ; delay = min(2*delay, s.o.interval) {
		err := renew(ctx)
		if err == nil {
			break
		}
		logger.Error(err, "No certificate yet; retrying", "in", delay)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(delay):
		}
	}
	s.ready.Store(true)

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	guardDone := make(chan error, 1)
	var synced <-chan struct{}
	mux := http.NewServeMux()
	if s.v != nil {
		mux.Handle(Path, s.v)
	}
	if g := s.o.layout; g != nil {
		mux.Handle(LayoutPath, g)
		synced = g.Synced()
		go func() { guardDone <- g.Run(ctx) }()
	}
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		switch {
		case !s.ready.Load():
			http.Error(w, "no valid certificate", http.StatusServiceUnavailable)
		case s.draining.Load():
			http.Error(w, "shutting down", http.StatusServiceUnavailable)
		case s.o.layout != nil && !s.o.layout.HasSynced():
			http.Error(w, ErrLayoutNotSynced.Error(), http.StatusServiceUnavailable)
		default:
			_, _ = w.Write([]byte("ok\n"))
		}
	})
	ln, err := listen(ctx, s.o.address, s.o.reusePort)
	if err != nil {
		return fmt.Errorf("admission server: listen: %w", err)
	}
	addr := ln.Addr().String()
	s.addr.Store(&addr)
	srv := &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
		TLSConfig: &tls.Config{
			MinVersion:     tls.VersionTLS12,
			GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return s.cert.Load(), nil },
		},
	}
	done := make(chan error, 1)
	go func() { done <- srv.ServeTLS(ln, "", "") }()
	paths, driverName := []string{}, ""
	if s.v != nil {
		paths, driverName = append(paths, Path), s.v.Driver()
	}
	if s.o.layout != nil {
		paths, driverName = append(paths, LayoutPath), s.o.layout.Driver()
	}
	logger.Info("Serving admission reviews", "address", addr, "paths", paths, "driver", driverName)
	if synced != nil {
		select {
		case <-synced:
		case err := <-guardDone:
			_ = srv.Close()
			if err != nil {
				return fmt.Errorf("admission server: %w", err)
			}
			return nil
		case err := <-done:
			return fmt.Errorf("admission server: %w", err)
		}
	}
	close(s.started)

	tick := time.NewTicker(s.o.interval)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			return fmt.Errorf("admission server: %w", err)
		case err := <-guardDone:
			if err != nil && ctx.Err() == nil {
				_ = srv.Close()
				return fmt.Errorf("admission server: %w", err)
			}
			guardDone = nil
		case <-tick.C:
			if err := renew(ctx); err != nil {
				// The served certificate stays: it is valid for months
				// after a renewal is due.
				logger.Error(err, "Keeping the webhook's certificate failed; retrying")
			}
		case <-ctx.Done():
			s.draining.Store(true)
			logger.Info("Draining: still serving, /readyz failing", "for", s.o.drain)
			select {
			case <-time.After(s.o.drain):
			case err := <-done:
				return fmt.Errorf("admission server: %w", err)
			}
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			defer cancel()
			_ = srv.Shutdown(sctx)
			return nil
		}
	}
}

// loadFiles reads the certificate files when they changed.
func (s *Server) loadFiles(ctx context.Context) error {
	c, err := tls.LoadX509KeyPair(s.o.certFile, s.o.keyFile)
	if err != nil {
		return fmt.Errorf("load webhook certificate: %w", err)
	}
	if old := s.cert.Load(); old == nil || !equalChains(old.Certificate, c.Certificate) {
		s.cert.Store(&c)
		klog.FromContext(ctx).Info("Loaded the webhook's certificate", "file", s.o.certFile)
	}
	return nil
}

func equalChains(a, b [][]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if string(a[i]) != string(b[i]) {
			return false
		}
	}
	return true
}
