package metrics

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rs/zerolog"
)

// Server defaults.
const (
	// DefaultCheckTimeout bounds one health or readiness check.
	DefaultCheckTimeout = 5 * time.Second
	// readHeaderTimeout bounds a client's request headers.
	readHeaderTimeout = 5 * time.Second
	// maxReasonLen bounds the reason in a 503 body.
	maxReasonLen = 200
)

// Check answers a health or readiness probe: nil means healthy. Its error
// text is served in the probe's body, so it must name a reason, never a
// payload or a credential.
type Check func(ctx context.Context) error

// ServerConfig configures a [Server]. Only Addr is required.
type ServerConfig struct {
	// Addr is the listen address, e.g. ":9090" or "127.0.0.1:0".
	Addr string
	// Gatherer is what /metrics serves. Default: an empty registry.
	Gatherer prometheus.Gatherer
	// Healthy answers /healthz. Default: always healthy.
	Healthy Check
	// Ready answers /readyz. Default: Healthy.
	Ready Check
	// CheckTimeout bounds one check. Default: 5s.
	CheckTimeout time.Duration
	// Logger receives the server's errors. The zero value discards.
	Logger zerolog.Logger
}

// Server serves /metrics, /healthz and /readyz over HTTP.
type Server struct {
	srv  *http.Server
	ln   net.Listener
	done chan struct{}
	once sync.Once
	err  error
}

// Listen binds cfg.Addr and serves in the background until Close. The
// address is bound when Listen returns (see Addr for port 0).
func Listen(cfg ServerConfig) (*Server, error) {
	if cfg.Addr == "" {
		return nil, errors.New("metrics: no listen address")
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("metrics: listening on %s: %w", cfg.Addr, err)
	}
	s := &Server{
		srv: &http.Server{
			Handler:           Handler(cfg),
			ReadHeaderTimeout: readHeaderTimeout,
		},
		ln:   ln,
		done: make(chan struct{}),
	}
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			cfg.Logger.Error().Err(err).Msg("metrics server stopped")
		}
	}()
	cfg.Logger.Info().Str("addr", ln.Addr().String()).Msg("serving /metrics, /healthz and /readyz")
	return s, nil
}

// Addr is the address the server listens on.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Close stops the server, letting requests in progress finish until ctx
// ends. It is idempotent.
func (s *Server) Close(ctx context.Context) error {
	s.once.Do(func() {
		s.err = s.srv.Shutdown(ctx)
		if s.err != nil {
			s.srv.Close()
		}
		<-s.done
	})
	return s.err
}

// Handler returns the HTTP handler of a Server with cfg.
func Handler(cfg ServerConfig) http.Handler {
	if cfg.Gatherer == nil {
		cfg.Gatherer = prometheus.NewRegistry()
	}
	if cfg.Healthy == nil {
		cfg.Healthy = func(context.Context) error { return nil }
	}
	if cfg.Ready == nil {
		cfg.Ready = cfg.Healthy
	}
	if cfg.CheckTimeout <= 0 {
		cfg.CheckTimeout = DefaultCheckTimeout
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(cfg.Gatherer, promhttp.HandlerOpts{
		ErrorHandling:       promhttp.ContinueOnError,
		MaxRequestsInFlight: 4,
	}))
	mux.Handle("GET /healthz", checkHandler(cfg.Healthy, cfg.CheckTimeout))
	mux.Handle("GET /readyz", checkHandler(cfg.Ready, cfg.CheckTimeout))
	return mux
}

// checkHandler answers 200 "ok" when check passes and 503 with its reason
// otherwise.
func checkHandler(check Check, timeout time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), timeout)
		defer cancel()
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		if err := check(ctx); err != nil {
			reason := err.Error()
			if len(reason) > maxReasonLen {
				reason = strings.ToValidUTF8(reason[:maxReasonLen], "") + "…"
			}
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintln(w, reason)
			return
		}
		fmt.Fprintln(w, "ok")
	})
}
