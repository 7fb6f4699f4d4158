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
	// GenerateCredentials makes the server accept only one user,
	// [GeneratedUser], with a password drawn at start and every permission
	// ([Server.Credentials]); [Server.InProcess] presents it. Ignored when
	// Users is set or ConfigText sets an authorization of its own. A fleet
	// whose server listens uses Users with the roles' permissions
	// ([FleetAccounts]) instead: a superuser's password must not be written
	// where the tools can read it.
	GenerateCredentials bool
	// Users are the only users the server accepts, each with its own
	// permissions; an empty password is drawn at start ([Server.Password]).
	// Ignored when ConfigText sets an authorization of its own. Default:
	// none (see GenerateCredentials).
	Users []User
	// Accounts, when set, are the server's accounts, each with its users,
	// exports and imports, and Users is ignored; the server also gets a
	// system account with no user ([SystemAccount]). Not with
	// ConfigText. Default: none (one account).
	Accounts []Account
	// InProcessUser names the user of Users (or of Accounts) that
	// [Server.InProcess] presents. Default: the first.
	InProcessUser string
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
	// user and password are what InProcess presents, "" without.
	user, password string
	// passwords are every configured user's, by name.
	passwords map[string]string
}

// User is a user the server accepts.
type User struct {
	// Name is the user name.
	Name string
	// Password is the user's password. Default: 32 random bytes drawn at
	// start.
	Password string
	// Permissions bound what the user may publish and subscribe to.
	// Default (nil): everything.
	Permissions *server.Permissions
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

// Credentials returns the user and password InProcess presents (the
// generated user, or Config.InProcessUser), or "" and "" when the server
// has none. Never log the password.
func (s *Server) Credentials() (user, password string) { return s.user, s.password }

// Password returns the password of one of Config.Users (drawn at start
// when it was not given), or "" for a user the server does not have.
// Never log it.
func (s *Server) Password(user string) string { return s.passwords[user] }

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
	user, password, passwords, err := configureUsers(opts, cfg)
	if err != nil {
		return nil, err
	}
	if cfg.ServerName != "" {
		opts.ServerName = cfg.ServerName
	}
	opts.JetStream = true
	opts.NoSigs = true
	opts.Trace, opts.TraceVerbose = false, false

	s := &Server{storeDir: cfg.StoreDir, user: user, password: password, passwords: passwords}
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

// configureUsers sets opts' users from cfg (unless cfg.ConfigText
// configured authorization) and returns the in-process user, its password
// and every user's password.
func configureUsers(opts *server.Options, cfg Config) (user, password string, passwords map[string]string, err error) {
	if len(cfg.Accounts) > 0 && cfg.ConfigText != "" {
		return "", "", nil, errors.New("embedded: Accounts with ConfigText")
	}
	if opts.Username != "" || len(opts.Users) > 0 || len(opts.Nkeys) > 0 || opts.Authorization != "" {
		return "", "", nil, nil
	}
	users := cfg.Users
	if len(cfg.Accounts) > 0 {
		if users, err = accountUsers(cfg.Accounts); err != nil {
			return "", "", nil, err
		}
	}
	if len(users) == 0 {
		if !cfg.GenerateCredentials {
			return "", "", nil, nil
		}
		users = []User{{Name: GeneratedUser}}
	}
	passwords = map[string]string{}
	for _, u := range users {
		if u.Name == "" {
			return "", "", nil, errors.New("embedded: a user without a name")
		}
		if _, dup := passwords[u.Name]; dup {
			return "", "", nil, fmt.Errorf("embedded: user %q twice", u.Name)
		}
		pw := u.Password
		if pw == "" {
			if pw, err = randomPassword(); err != nil {
				return "", "", nil, fmt.Errorf("embedded: drawing a password: %w", err)
			}
		}
		passwords[u.Name] = pw
		if len(cfg.Accounts) == 0 {
			opts.Users = append(opts.Users, &server.User{Username: u.Name, Password: pw, Permissions: u.Permissions})
		}
	}
	if len(cfg.Accounts) > 0 {
		text, err := accountsConfig(cfg.Accounts, passwords)
		if err != nil {
			return "", "", nil, err
		}
		if err := opts.ProcessConfigString(text); err != nil {
			return "", "", nil, fmt.Errorf("embedded: the accounts' configuration: %w", err)
		}
	}
	user = cfg.InProcessUser
	if user == "" {
		user = users[0].Name
	}
	if _, ok := passwords[user]; !ok {
		return "", "", nil, fmt.Errorf("embedded: in-process user %q is not one of the users", user)
	}
	return user, passwords[user], passwords, nil
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
