package driver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
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
	ln, err := net.Listen("tcp", d.o.httpAddress)
	if err != nil {
		return nil, fmt.Errorf("listen for metrics: %w", err)
	}
	d.httpAddr = ln.Addr().String()
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, BaseContext: func(net.Listener) context.Context { return ctx }}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			klog.FromContext(ctx).Error(err, "Metrics server failed")
		}
	}()
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
