package httpapi

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/toolfleet/toolfleet/pkg/config"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// Defaults of Config.
const (
	DefaultIdleTimeout       = 30 * time.Minute
	DefaultMaxSessions       = 1000
	DefaultMaxStreams        = 256
	DefaultMaxSessionStreams = 16
	DefaultMaxBodyBytes      = 1 << 20
	DefaultRequestTimeout    = 10 * time.Second
	DefaultHeartbeat         = 15 * time.Second
	DefaultPollInterval      = 500 * time.Millisecond
	DefaultStreamBuffer      = 64
	DefaultLoginFailures     = 5
	DefaultLoginWindow       = time.Minute
	DefaultAddressFailures   = 20
)

// Dialer connects to NATS as user with password: the connection every
// request of one session acts on.
type Dialer func(ctx context.Context, user, password string, opts ...nats.Option) (*nats.Conn, error)

// Config configures a Server. Its zero value, with Dial set, means the
// defaults.
type Config struct {
	// Dial connects to NATS as a user (required): natsbus.Connect with the
	// fleet's URL, the user, the password and the inbox prefix
	// _INBOX_<user>, and nothing from the environment.
	Dial Dialer
	// Prefix is the fleet's subject prefix. Default: "fleet".
	Prefix string
	// Domain is the JetStream domain of the fleet's streams. Default: none.
	Domain string
	// SecureCookies marks the session cookie Secure even when the server
	// is not served over TLS (behind a TLS-terminating proxy). Over TLS it
	// is always Secure. Default: false.
	SecureCookies bool
	// IdleTimeout closes a session (and its NATS connection) unused this
	// long. Default: 30m.
	IdleTimeout time.Duration
	// MaxSessions bounds the open sessions, Basic-auth connections
	// included; a login past it is refused (503). Default: 1000.
	MaxSessions int
	// MaxStreams bounds the event streams open at once; one past it is
	// refused (503). Default: 256.
	MaxStreams int
	// MaxSessionStreams bounds the event streams one session (or one
	// user's Basic credentials) has open at once; one past it is refused
	// (429), so that one user cannot hold every stream. Default: 16.
	MaxSessionStreams int
	// MaxBodyBytes bounds a request's body. Default: 1 MiB.
	MaxBodyBytes int64
	// RequestTimeout bounds the NATS work of one request (not a stream's).
	// Default: 10s.
	RequestTimeout time.Duration
	// Heartbeat is the interval of a stream's comment lines that keep
	// proxies from closing it. Default: 15s.
	Heartbeat time.Duration
	// PollInterval is how often an event stream reads what was stored
	// since its last read (a run's journal, the approval requests): with
	// direct gets, no consumer. Default: 500ms.
	PollInterval time.Duration
	// StreamBuffer bounds the events held for one stream's connection; a
	// connection that falls this far behind is closed (its viewer
	// reconnects with Last-Event-ID), so a slow browser never holds the
	// fleet up. Default: 64.
	StreamBuffer int
	// LoginFailures bounds the failed logins of one user name within
	// LoginWindow, and AddressFailures those of one remote address; past
	// either, logins are refused (429) until the window passes. Defaults:
	// 5, 20, 1m.
	LoginFailures   int
	AddressFailures int
	LoginWindow     time.Duration
	// Now is the clock. Default: time.Now.
	Now func() time.Time
	// Logger receives one line per refused or failed request (never a
	// credential, an argument value or an error's text from a tool). The
	// zero value discards.
	Logger zerolog.Logger
}

func (c *Config) fill() {
	if c.Prefix == "" {
		c.Prefix = protocol.DefaultPrefix
	}
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	defD := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	defD(&c.IdleTimeout, DefaultIdleTimeout)
	def(&c.MaxSessions, DefaultMaxSessions)
	def(&c.MaxStreams, DefaultMaxStreams)
	def(&c.MaxSessionStreams, DefaultMaxSessionStreams)
	if c.MaxBodyBytes == 0 {
		c.MaxBodyBytes = DefaultMaxBodyBytes
	}
	defD(&c.RequestTimeout, DefaultRequestTimeout)
	defD(&c.Heartbeat, DefaultHeartbeat)
	defD(&c.PollInterval, DefaultPollInterval)
	def(&c.StreamBuffer, DefaultStreamBuffer)
	def(&c.LoginFailures, DefaultLoginFailures)
	def(&c.AddressFailures, DefaultAddressFailures)
	defD(&c.LoginWindow, DefaultLoginWindow)
	if c.Now == nil {
		c.Now = time.Now
	}
}

// Validate reports the first field that cannot work, as a config.Error.
func (c Config) Validate() error {
	switch {
	case c.Dial == nil:
		return &config.FieldError{Field: "Dial", Err: fmt.Errorf("is required")}
	case c.IdleTimeout < 0:
		return &config.FieldError{Field: "IdleTimeout", Err: fmt.Errorf("must not be negative")}
	case c.MaxSessions < 0:
		return &config.FieldError{Field: "MaxSessions", Err: fmt.Errorf("must not be negative")}
	case c.MaxStreams < 0:
		return &config.FieldError{Field: "MaxStreams", Err: fmt.Errorf("must not be negative")}
	case c.MaxSessionStreams < 0:
		return &config.FieldError{Field: "MaxSessionStreams", Err: fmt.Errorf("must not be negative")}
	case c.MaxBodyBytes < 0:
		return &config.FieldError{Field: "MaxBodyBytes", Err: fmt.Errorf("must not be negative")}
	case c.RequestTimeout < 0:
		return &config.FieldError{Field: "RequestTimeout", Err: fmt.Errorf("must not be negative")}
	case c.Heartbeat < 0:
		return &config.FieldError{Field: "Heartbeat", Err: fmt.Errorf("must not be negative")}
	case c.PollInterval < 0:
		return &config.FieldError{Field: "PollInterval", Err: fmt.Errorf("must not be negative")}
	case c.StreamBuffer < 0:
		return &config.FieldError{Field: "StreamBuffer", Err: fmt.Errorf("must not be negative")}
	case c.LoginFailures < 0 || c.AddressFailures < 0 || c.LoginWindow < 0:
		return &config.FieldError{Field: "LoginFailures", Err: fmt.Errorf("the login bounds must not be negative")}
	}
	if _, err := protocol.NewSubjects(c.Prefix); err != nil {
		return &config.FieldError{Field: "Prefix", Err: err}
	}
	return nil
}

// Server serves the API. It is an http.Handler; Close closes every
// session's NATS connection.
type Server struct {
	cfg      Config
	subjects protocol.Subjects
	mux      *http.ServeMux
	sessions *sessions
	logins   *loginLimiter
	streams  chan struct{}
	routes   []route

	stop     chan struct{}
	stopOnce sync.Once
	wg       sync.WaitGroup
}

var _ http.Handler = (*Server)(nil)

// New returns a Server for cfg, or a config.Error naming the field that
// cannot work.
func New(cfg Config) (*Server, error) {
	cfg.fill()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	subjects, _ := protocol.NewSubjects(cfg.Prefix)
	s := &Server{
		cfg:      cfg,
		subjects: subjects,
		mux:      http.NewServeMux(),
		sessions: newSessions(cfg.MaxSessions),
		logins:   newLoginLimiter(cfg.LoginFailures, cfg.AddressFailures, cfg.LoginWindow),
		streams:  make(chan struct{}, cfg.MaxStreams),
		stop:     make(chan struct{}),
	}
	s.register()
	s.wg.Add(1)
	go s.sweep()
	return s, nil
}

// ServeHTTP serves one request.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "same-origin")
	s.mux.ServeHTTP(w, r)
}

// Close closes every session and its NATS connection. It may be called
// more than once.
func (s *Server) Close() error {
	s.stopOnce.Do(func() { close(s.stop) })
	s.wg.Wait()
	s.sessions.closeAll()
	return nil
}

// sweep closes the sessions idle past the idle timeout, until Close.
func (s *Server) sweep() {
	defer s.wg.Done()
	every := min(s.cfg.IdleTimeout/4, time.Minute)
	t := time.NewTicker(max(every, time.Second))
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			s.sessions.closeIdle(s.cfg.Now().Add(-s.cfg.IdleTimeout))
		}
	}
}
