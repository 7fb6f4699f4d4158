package embedded

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
)

// DefaultHost is the interface the server listens on when none is configured.
const DefaultHost = "127.0.0.1"

// readyTimeout bounds how long Start waits for the server to accept clients.
const readyTimeout = 10 * time.Second

// Config configures an embedded server. The zero value starts a server
// that serves in-process connections only (no TCP listener) with its store
// in a fresh temporary directory.
type Config struct {
	// Listen opens the TCP client listener on Host:Port. Default: false,
	// in-process connections only (nats-server's DontListen): no other
	// process, and no tool a worker runs, can reach the server.
	Listen bool
	// GenerateCredentials makes the server accept only one user, with a
	// password drawn at start ([Server.Credentials]); [Server.InProcess]
	// presents it. Use it whenever the server listens for anyone but the
	// tests. Ignored when ConfigText sets an authorization of its own.
	GenerateCredentials bool
	// StoreDir is JetStream's directory (the server adds "jetstream/" below
	// it). Default: a new temporary directory, removed by Shutdown.
	StoreDir string
	// Host is the client listener's interface. Default: 127.0.0.1.
	Host string
	// Port is the client listener's port. Default: random (-1); 0 also
	// means random.
	Port int
	// ServerName names the server in logs and monitoring. Default: chosen by
	// nats-server.
	ServerName string
	// ConfigText is nats-server configuration in the server's config-file
	// syntax (accounts, authorization, limits), applied first. Host, Port and
	// StoreDir above always override its listen and store_dir settings, and
	// JetStream is always enabled. Default: none.
	ConfigText string
	// Logger receives the server's notices, warnings and errors (and debug
	// lines when its level allows). Default: the zero Logger, which makes
	// the server log nothing.
	Logger zerolog.Logger
}

// Server is a running embedded nats-server.
type Server struct {
	cfg       Config
	srv       *server.Server
	storeDir  string
	ownsStore bool
	port      int
	once      sync.Once
	// user and password are the generated credentials, "" without.
	user, password string
}

// GeneratedUser is the user name of generated credentials.
const GeneratedUser = "toolfleet"

// randomPassword draws a password of 32 random bytes, hex-encoded and
// starting with letters (nats-server reads configuration values by their
// look).
func randomPassword() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return "tf-" + hex.EncodeToString(b), nil
}

// Credentials returns the generated user and password, or "" and "" when
// the server has none (see Config.GenerateCredentials). Never log the
// password.
func (s *Server) Credentials() (user, password string) { return s.user, s.password }

// Listening reports whether the server has a TCP client listener.
func (s *Server) Listening() bool { return s.cfg.Listen }

// Start validates cfg, starts the server and waits until it accepts
// clients.
func Start(cfg Config) (*Server, error) {
	opts := &server.Options{}
	if cfg.ConfigText != "" {
		if err := opts.ProcessConfigString(cfg.ConfigText); err != nil {
			return nil, fmt.Errorf("embedded: parsing server configuration: %w", err)
		}
	}
	if cfg.Port < -1 || cfg.Port > 65535 {
		return nil, fmt.Errorf("embedded: port %d: must be -1..65535", cfg.Port)
	}
	opts.Host = cfg.Host
	if opts.Host == "" {
		opts.Host = DefaultHost
	}
	opts.Port = cfg.Port
	if opts.Port == 0 {
		opts.Port = server.RANDOM_PORT
	}
	opts.DontListen = !cfg.Listen
	var user, password string
	if cfg.GenerateCredentials && opts.Username == "" && len(opts.Users) == 0 && len(opts.Nkeys) == 0 && opts.Authorization == "" {
		pw, err := randomPassword()
		if err != nil {
			return nil, fmt.Errorf("embedded: drawing a password: %w", err)
		}
		user, password = GeneratedUser, pw
		opts.Username, opts.Password = user, password
	}
	if cfg.ServerName != "" {
		opts.ServerName = cfg.ServerName
	}
	opts.JetStream = true
	opts.NoSigs = true
	opts.Trace, opts.TraceVerbose = false, false

	s := &Server{storeDir: cfg.StoreDir, user: user, password: password}
	if s.storeDir == "" {
		dir, err := os.MkdirTemp("", "toolfleet-nats-")
		if err != nil {
			return nil, fmt.Errorf("embedded: creating a store directory: %w", err)
		}
		s.storeDir, s.ownsStore = dir, true
	}
	opts.StoreDir = s.storeDir

	logging := enabled(cfg.Logger)
	opts.NoLog = !logging
	debug := logging && cfg.Logger.GetLevel() <= zerolog.DebugLevel
	opts.Debug = debug

	srv, err := server.NewServer(opts)
	if err != nil {
		s.removeStore()
		return nil, fmt.Errorf("embedded: %w", err)
	}
	if logging {
		srv.SetLoggerV2(serverLogger{cfg.Logger.With().Str("component", "nats-server").Logger()}, debug, false, false)
	}
	s.srv = srv
	srv.Start()
	if !srv.ReadyForConnections(readyTimeout) {
		s.Shutdown()
		return nil, errors.New("embedded: server not ready for connections within 10s")
	}
	if addr, ok := srv.Addr().(*net.TCPAddr); ok && cfg.Listen {
		s.port = addr.Port
	}
	s.cfg = cfg
	s.cfg.Host, s.cfg.Port, s.cfg.StoreDir = opts.Host, s.port, s.storeDir
	return s, nil
}

// Config returns the configuration the server runs with, its port and
// store directory resolved: starting a server from it after Shutdown
// reuses both (a temporary store is removed by Shutdown, though).
func (s *Server) Config() Config { return s.cfg }

// ClientURL is the URL TCP clients connect to, nats://host:port, or ""
// when the server does not listen.
func (s *Server) ClientURL() string {
	if !s.cfg.Listen {
		return ""
	}
	return s.srv.ClientURL()
}

// Port is the client listener's port, resolved when it was random.
func (s *Server) Port() int { return s.port }

// StoreDir is the directory JetStream keeps its files under.
func (s *Server) StoreDir() string { return s.storeDir }

// InProcess is the nats.Option that connects to this server without the
// network: nats.Connect("", s.InProcess()). With generated credentials it
// presents them too.
func (s *Server) InProcess() nats.Option {
	if s.user == "" {
		return nats.InProcessServer(s.srv)
	}
	return func(o *nats.Options) error {
		if err := nats.InProcessServer(s.srv)(o); err != nil {
			return err
		}
		return nats.UserInfo(s.user, s.password)(o)
	}
}

// NATSServer exposes the underlying server, for health checks and tests.
func (s *Server) NATSServer() *server.Server { return s.srv }

// Shutdown stops the server and waits until it has stopped. It is
// idempotent. A temporary store directory is removed.
func (s *Server) Shutdown() {
	s.once.Do(func() {
		if s.srv != nil {
			s.srv.Shutdown()
			s.srv.WaitForShutdown()
		}
		s.removeStore()
	})
}

func (s *Server) removeStore() {
	if s.ownsStore {
		os.RemoveAll(s.storeDir)
	}
}

// enabled reports whether l writes anything at warn level.
func enabled(l zerolog.Logger) bool {
	e := l.Warn()
	if e == nil {
		return false
	}
	e.Discard()
	return true
}
