package natsbus

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/toolfleet/toolfleet/internal/procsec"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// Environment variables read by [Connect] for fields left empty; the same
// names the nats CLI uses.
const (
	EnvURL      = "NATS_URL"
	EnvCreds    = "NATS_CREDS"
	EnvUser     = "NATS_USER"
	EnvPassword = "NATS_PASSWORD"
	EnvToken    = "NATS_TOKEN"
	EnvNKey     = "NATS_NKEY"
	// EnvInboxPrefix sets ConnConfig.InboxPrefix.
	EnvInboxPrefix = "NATS_INBOX_PREFIX"
	// EnvJSDomain sets ConnConfig.JSDomain.
	EnvJSDomain = "NATS_JS_DOMAIN"
)

// Connection defaults.
const (
	// DefaultConnName is the connection name servers show when none is set.
	DefaultConnName = "toolfleet"
	// reconnectWait is the pause between reconnect attempts (plus jitter).
	reconnectWait = 500 * time.Millisecond
	// reconnectBufSize bounds what is buffered while disconnected; publishes
	// beyond it fail instead of growing memory.
	reconnectBufSize = 8 << 20
)

// ConnConfig says how to reach NATS. Empty fields are read from the
// standard environment variables (EnvURL, ...). The auth variables are read
// only when no auth field is set, so flags and environment never mix into
// two credentials; the one exception is a User set alone, whose Password
// is then $NATS_PASSWORD.
type ConnConfig struct {
	// URL is one server URL or a comma-separated list. Default: $NATS_URL,
	// else nats://127.0.0.1:4222. Ignored when an in-process option is given.
	URL string
	// Name is the connection name servers show. Default: "toolfleet".
	Name string
	// CredsFile is a JWT credentials file. Default: $NATS_CREDS.
	CredsFile string
	// User and Password authenticate with a user name. Default: $NATS_USER,
	// $NATS_PASSWORD; a User set without a Password takes $NATS_PASSWORD.
	User     string
	Password string
	// Token authenticates with a token. Default: $NATS_TOKEN.
	Token string
	// NKeyFile is a file holding an NKey seed. Default: $NATS_NKEY.
	NKeyFile string
	// InboxPrefix is the prefix of this connection's reply subjects
	// (request/reply, JetStream API answers and pulled messages). A
	// deployment lets each user subscribe to its own prefix only, so no
	// user reads another's replies (deploy/nats-server.conf grants
	// _INBOX_<user>.>). Default: $NATS_INBOX_PREFIX, else _INBOX_<User>
	// when User is a valid subject token, else NATS's _INBOX.
	InboxPrefix string
	// JSDomain is the JetStream domain of the fleet's streams. It is set
	// where a process connects to a leaf node whose own server has no (or
	// another) JetStream: its JetStream API requests then go to
	// $JS.<domain>.API, which the leaf connection carries to the hub (NATS
	// does not carry plain $JS.API across a leaf connection). Default:
	// $NATS_JS_DOMAIN, else none.
	JSDomain string
	// Logger receives connection state changes. The zero value discards.
	Logger zerolog.Logger
	// Getenv reads the environment. Default: procsec.Getenv, which also
	// sees the secrets procsec.Take moved out of the environment (a
	// command that forgot to set it would otherwise log in without its
	// password).
	Getenv func(string) string
}

// getenv is cfg.Getenv or its default.
func (cfg ConnConfig) getenv() func(string) string {
	if cfg.Getenv != nil {
		return cfg.Getenv
	}
	return procsec.Getenv
}

// Domain returns the JetStream domain: JSDomain, else $NATS_JS_DOMAIN.
func (cfg ConnConfig) Domain() string {
	if cfg.JSDomain != "" {
		return cfg.JSDomain
	}
	return cfg.getenv()(EnvJSDomain)
}

// NewJetStream returns the JetStream context of nc for domain ("" for the
// server's own JetStream).
func NewJetStream(nc *nats.Conn, domain string) (jetstream.JetStream, error) {
	if domain == "" {
		return jetstream.New(nc)
	}
	return jetstream.NewWithDomain(nc, domain)
}

// Validate checks cfg as Connect would, without connecting: the ways to
// authenticate, the inbox prefix and that the credentials and NKey files
// exist. The error is a [*ConfigError].
func (cfg ConnConfig) Validate() error {
	_, err := cfg.resolved()
	return err
}

// resolved returns cfg with environment defaults applied, and checks that
// at most one way to authenticate is configured.
func (cfg ConnConfig) resolved() (ConnConfig, error) {
	getenv := cfg.getenv()
	if cfg.URL == "" {
		cfg.URL = getenv(EnvURL)
	}
	if cfg.URL == "" {
		cfg.URL = nats.DefaultURL
	}
	if err := checkURLs(cfg.URL); err != nil {
		return cfg, err
	}
	if cfg.Name == "" {
		cfg.Name = DefaultConnName
	}
	if cfg.CredsFile == "" && cfg.User == "" && cfg.Password == "" && cfg.Token == "" && cfg.NKeyFile == "" {
		cfg.CredsFile = getenv(EnvCreds)
		cfg.User, cfg.Password = getenv(EnvUser), getenv(EnvPassword)
		cfg.Token = getenv(EnvToken)
		cfg.NKeyFile = getenv(EnvNKey)
	}
	if cfg.User != "" && cfg.Password == "" && cfg.CredsFile == "" && cfg.Token == "" && cfg.NKeyFile == "" {
		// A user named by flag (--user NAME) with its password kept out of
		// the process list, in the environment: the form the shipped conf
		// recommends.
		cfg.Password = getenv(EnvPassword)
	}
	if cfg.InboxPrefix == "" {
		cfg.InboxPrefix = getenv(EnvInboxPrefix)
	}
	if cfg.InboxPrefix == "" && cfg.User != "" && protocol.ValidToken(cfg.User) {
		cfg.InboxPrefix = "_INBOX_" + cfg.User
	}
	if cfg.InboxPrefix != "" && !validInboxPrefix(cfg.InboxPrefix) {
		return cfg, ConfigErr("InboxPrefix", "must be subject tokens without wildcards, got %q", clip(cfg.InboxPrefix))
	}
	var methods []string
	if cfg.CredsFile != "" {
		methods = append(methods, "creds")
	}
	if cfg.User != "" || cfg.Password != "" {
		methods = append(methods, "user")
	}
	if cfg.Token != "" {
		methods = append(methods, "token")
	}
	if cfg.NKeyFile != "" {
		methods = append(methods, "nkey")
	}
	if len(methods) > 1 {
		return cfg, ConfigErr("auth", "more than one way to authenticate is set (%s); use one", strings.Join(methods, ", "))
	}
	if cfg.Password != "" && cfg.User == "" {
		return cfg, ConfigErr("User", "a password is set without a user")
	}
	for field, path := range map[string]string{"CredsFile": cfg.CredsFile, "NKeyFile": cfg.NKeyFile} {
		if path == "" {
			continue
		}
		if _, err := os.Stat(path); err != nil {
			return cfg, ConfigErr(field, "%w", err)
		}
	}
	return cfg, nil
}

// Connect connects to NATS. The connection reconnects forever, buffers a
// bounded amount while disconnected and logs every state change. The first
// connection is retried while the servers cannot be reached, until ctx
// ends; an authentication or configuration error is returned at once. opts
// are applied last (e.g. an embedded server's InProcess option).
func Connect(ctx context.Context, cfg ConnConfig, opts ...nats.Option) (*nats.Conn, error) {
	cfg, err := cfg.resolved()
	if err != nil {
		return nil, err
	}
	log := cfg.Logger
	asyncLog := Sampled(log)
	options := []nats.Option{
		nats.Name(cfg.Name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(reconnectWait),
		nats.ReconnectJitter(100*time.Millisecond, time.Second),
		nats.ReconnectBufSize(reconnectBufSize),
		nats.DisconnectErrHandler(func(nc *nats.Conn, err error) {
			if nc.IsClosed() {
				return // our own Close: the closed handler says so
			}
			ev := log.Warn().Str(logURL, nc.ConnectedUrlRedacted())
			if err != nil {
				ev = ev.Err(err)
			}
			ev.Msg("disconnected from NATS; reconnecting")
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			log.Info().Str(logURL, nc.ConnectedUrlRedacted()).Msg("reconnected to NATS")
		}),
		nats.ClosedHandler(func(*nats.Conn) { log.Debug().Msg("NATS connection closed") }),
		nats.LameDuckModeHandler(func(nc *nats.Conn) {
			log.Warn().Str(logURL, nc.ConnectedUrlRedacted()).Msg("NATS server entering lame duck mode")
		}),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			ev := asyncLog.Warn().Err(err)
			if sub != nil {
				ev = ev.Str(LogSubject, sub.Subject)
			}
			ev.Msg("NATS asynchronous error")
		}),
	}
	switch {
	case cfg.CredsFile != "":
		options = append(options, nats.UserCredentials(cfg.CredsFile))
	case cfg.NKeyFile != "":
		opt, err := nats.NkeyOptionFromSeed(cfg.NKeyFile)
		if err != nil {
			// The error may describe the seed's content: keep only its kind.
			return nil, ConfigErr("NKeyFile", "not a readable NKey seed file")
		}
		options = append(options, opt)
	case cfg.Token != "":
		options = append(options, nats.Token(cfg.Token))
	case cfg.User != "":
		options = append(options, nats.UserInfo(cfg.User, cfg.Password))
	}
	if cfg.InboxPrefix != "" {
		options = append(options, nats.CustomInboxPrefix(cfg.InboxPrefix))
	}
	options = append(options, opts...)

	wait := 100 * time.Millisecond
	for attempt := 1; ; attempt++ {
		nc, err := nats.Connect(cfg.URL, options...)
		if err == nil {
			log.Info().Str(logURL, nc.ConnectedUrlRedacted()).Msg("connected to NATS")
			return nc, nil
		}
		if !retryableConnectError(err) {
			return nil, fmt.Errorf("natsbus: connecting to %s: %w", redactURL(cfg.URL), err)
		}
		if attempt == 1 || attempt%10 == 0 {
			log.Warn().Err(err).Str(logURL, redactURL(cfg.URL)).Int(LogAttempt, attempt).
				Msg("cannot reach NATS yet; retrying")
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("natsbus: connecting to %s: %w (last error: %v)", redactURL(cfg.URL), ctx.Err(), err)
		case <-time.After(wait):
		}
		wait = min(2*wait, 2*time.Second)
	}
}

// urlSchemes are the schemes nats.go connects with; a URL without one is
// nats://.
var urlSchemes = []string{"nats", "tls", "ws", "wss"}

// checkURLs refuses a server URL nats.go cannot use (another scheme, no
// host): nats.go would dial it as a NATS server and, failing, retry
// forever.
func checkURLs(list string) error {
	for _, raw := range strings.Split(list, ",") {
		raw = strings.TrimSpace(raw)
		u := raw
		if !strings.Contains(u, "://") {
			u = "nats://" + u
		}
		parsed, err := url.Parse(u)
		if err != nil {
			return ConfigErr("URL", "%s is not a URL", clip(redactURL(raw)))
		}
		if !slices.Contains(urlSchemes, strings.ToLower(parsed.Scheme)) {
			return ConfigErr("URL", "%s: the scheme must be one of %s, got %q", clip(redactURL(raw)), strings.Join(urlSchemes, ", "), clip(parsed.Scheme))
		}
		if parsed.Hostname() == "" {
			return ConfigErr("URL", "%s has no host", clip(redactURL(raw)))
		}
	}
	return nil
}

// validInboxPrefix reports whether p is one or more subject tokens of
// [protocol.TokenPattern] characters (dots between them allowed).
func validInboxPrefix(p string) bool {
	if len(p) > 128 {
		return false
	}
	for _, t := range strings.Split(p, ".") {
		if !protocol.ValidToken(t) {
			return false
		}
	}
	return true
}

// clip bounds a configuration value quoted in an error.
func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

// retryableConnectError reports whether a failed first connection may
// succeed later (the server is not up yet) rather than being refused.
func retryableConnectError(err error) bool {
	for _, fatal := range []error{
		nats.ErrAuthorization, nats.ErrAuthExpired, nats.ErrAuthRevoked, nats.ErrAccountAuthExpired,
		nats.ErrNkeysNotSupported, nats.ErrSecureConnRequired, nats.ErrSecureConnWanted,
		nats.ErrNoEchoNotSupported, nats.ErrHeadersNotSupported,
	} {
		if errors.Is(err, fatal) {
			return false
		}
	}
	msg := strings.ToLower(err.Error())
	return !strings.Contains(msg, "authoriz") && !strings.Contains(msg, "authentic") &&
		!strings.Contains(msg, "permissions violation") && !strings.Contains(msg, "tls")
}

// redactURL hides credentials in a comma-separated list of server URLs:
// whatever stands between the scheme and the last '@' of each URL.
func redactURL(list string) string {
	parts := strings.Split(list, ",")
	for i, p := range parts {
		p = strings.TrimSpace(p)
		if at := strings.LastIndex(p, "@"); at >= 0 {
			start := 0
			if j := strings.Index(p, "://"); j >= 0 && j < strings.Index(p, "@") {
				start = j + len("://")
			}
			p = p[:start] + "[redacted]" + p[at:]
		}
		parts[i] = p
	}
	return strings.Join(parts, ",")
}
