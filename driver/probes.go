package driver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/klog/v2"
)

// startHTTP serves /metrics, /healthz and /readyz on the HTTP address.
func (d *Runtime) startHTTP(ctx context.Context) (*http.Server, error) {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(withRuntime(d.metrics.registry), promhttp.HandlerOpts{}))
	probe := func(check func(context.Context) error) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			if err := check(r.Context()); err != nil {
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
				return
			}
			_, _ = w.Write([]byte("ok\n"))
		}
	}
	mux.HandleFunc("/healthz", probe(d.live))
	mux.HandleFunc("/readyz", probe(d.readyCheck))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, BaseContext: func(net.Listener) context.Context { return ctx }}
	serve := func(ln net.Listener) {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			klog.FromContext(ctx).Error(err, "Metrics server failed", "address", ln.Addr().String())
		}
	}
	if d.o.probeSocket != "" {
		ln, err := listenUnix(ctx, d.o.probeSocket)
		if err != nil {
			return nil, fmt.Errorf("probe socket: %w", err)
		}
		go serve(ln)
	}
	if d.o.httpAddress == "" {
		return srv, nil
	}
	ln, err := net.Listen("tcp", d.o.httpAddress)
	switch {
	case err == nil:
		d.httpAddr = ln.Addr().String()
		go serve(ln)
	case errors.Is(err, syscall.EADDRINUSE) && d.o.rollingUpdateUID != "":
		// The other pod of a rolling update, on the host's network,
		// holds it: take it when it lets go.
		klog.FromContext(ctx).Info("HTTP address in use, by the other instance of a rolling update: waiting for it", "address", d.o.httpAddress)
		go func() {
			for ctx.Err() == nil {
				if ln, err := net.Listen("tcp", d.o.httpAddress); err == nil {
					klog.FromContext(ctx).Info("HTTP address taken over", "address", d.o.httpAddress)
					serve(ln)
					return
				}
				select {
				case <-ctx.Done():
				case <-time.After(time.Second):
				}
			}
		}()
	default:
		return nil, fmt.Errorf("listen for metrics: %w", err)
	}
	return srv, nil
}

// readyCheck reports why the driver is not ready: not alive, or its
// slices not yet complete in the API server (the first publish waits for
// the API server; see Published).
// It asks the API server nothing: a probe every few seconds on every node
// would be thousands of requests a second on a large cluster, for a
// readiness that only gates the DaemonSet's rollout. Later publishing
// errors show in drakit_driver_api_server_reachable and the errors metric.
func (d *Runtime) readyCheck(ctx context.Context) error {
	if err := d.live(ctx); err != nil {
		return err
	}
	if !d.slicesSynced.Load() {
		return errors.New("ResourceSlices not published yet: waiting for the API server")
	}
	select {
	case <-d.firstPublish:
		return nil
	default:
		return errors.New("ResourceSlices handed to the API server, not yet complete there")
	}
}

// live reports why the driver is not alive: a registration the kubelet
// rejected, or a DRA socket that does not accept connections.
func (d *Runtime) live(ctx context.Context) error {
	d.mu.Lock()
	helper := d.helper
	d.mu.Unlock()
	if helper == nil {
		return errors.New("kubelet plugin not started")
	}
	if st := helper.RegistrationStatus(); st != nil && !st.PluginRegistered {
		return fmt.Errorf("kubelet rejected registration: %s", st.Error)
	}
	var dialer net.Dialer
	dctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	conn, err := dialer.DialContext(dctx, "unix", d.DRASocket())
	if err != nil {
		return fmt.Errorf("DRA socket: %w", err)
	}
	_ = conn.Close()
	return nil
}
