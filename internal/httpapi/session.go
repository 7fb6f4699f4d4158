package httpapi

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/pkg/client"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// CookieName is the session cookie's name; CSRFHeader the header that
// carries the session's CSRF token on every state-changing request.
const (
	CookieName = "toolfleet_session"
	CSRFHeader = "X-CSRF-Token"
)

// maxCredentialBytes bounds a user name and a password.
const maxCredentialBytes = 1024

// session is one user's NATS connection and what acts on it.
type session struct {
	id   string // cookie sessions: the cookie's value; Basic: a digest of the credentials
	csrf string // cookie sessions only
	user string
	nc   *nats.Conn
	cl   *client.Client
	js   natsbus.JetStream
	// reader reads what the session shows: direct gets, no consumer
	rd *natsbus.DirectReader

	mu       sync.Mutex
	lastUsed time.Time
	inflight map[*int]context.CancelCauseFunc
	streams  int // event streams open
}

// refused is the connection's error handler: a permissions violation ends
// every request of the session in flight with errRefused.
func (ss *session) refused(_ *nats.Conn, _ *nats.Subscription, err error) {
	if !errors.Is(err, nats.ErrPermissionViolation) {
		return
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	for _, cancel := range ss.inflight {
		cancel(errRefused)
	}
}

// begin returns the context of one request on the session: it ends with
// errRefused at the server's permissions violation. end releases it.
func (ss *session) begin(ctx context.Context, now time.Time) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	key := new(int)
	ss.mu.Lock()
	ss.lastUsed = now
	ss.inflight[key] = cancel
	ss.mu.Unlock()
	return ctx, func() {
		ss.mu.Lock()
		delete(ss.inflight, key)
		ss.mu.Unlock()
		cancel(nil)
	}
}

// idle says whether the session was last used before t and has no
// request in flight (an open stream keeps it).
func (ss *session) idle(t time.Time) bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return len(ss.inflight) == 0 && ss.lastUsed.Before(t)
}

// sessions holds the open sessions, bounded.
type sessions struct {
	max  int
	salt []byte // keys the digest of Basic credentials
	mu   sync.Mutex
	byID map[string]*session
}

func newSessions(max int) *sessions {
	return &sessions{max: max, salt: randomBytes(32), byID: map[string]*session{}}
}

func (s *sessions) get(id string) *session {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.byID[id]
}

// add stores ss and returns it, or the session stored under its id
// before (two first requests of one Basic user at once: the caller closes
// its own); false when the bound is reached.
func (s *sessions) add(ss *session) (*session, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if had := s.byID[ss.id]; had != nil {
		return had, true
	}
	if len(s.byID) >= s.max {
		return nil, false
	}
	s.byID[ss.id] = ss
	return ss, true
}

func (s *sessions) remove(id string) {
	s.mu.Lock()
	ss := s.byID[id]
	delete(s.byID, id)
	s.mu.Unlock()
	if ss != nil {
		ss.nc.Close()
	}
}

func (s *sessions) closeIdle(before time.Time) {
	s.mu.Lock()
	var idle []*session
	for id, ss := range s.byID {
		if ss.idle(before) {
			idle = append(idle, ss)
			delete(s.byID, id)
		}
	}
	s.mu.Unlock()
	for _, ss := range idle {
		ss.nc.Close()
	}
}

func (s *sessions) closeAll() {
	s.mu.Lock()
	all := s.byID
	s.byID = map[string]*session{}
	s.mu.Unlock()
	for _, ss := range all {
		ss.nc.Close()
	}
}

// basicID is the key of the shared connection of Basic credentials: a
// keyed digest, so the map holds no password.
func (s *sessions) basicID(user, password string) string {
	m := hmac.New(sha256.New, s.salt)
	m.Write([]byte(user))
	m.Write([]byte{0})
	m.Write([]byte(password))
	return "basic:" + base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return b
}

func randomID() string { return base64.RawURLEncoding.EncodeToString(randomBytes(32)) }

// loginLimiter bounds the failed logins per user name and per remote
// address within a window.
type loginLimiter struct {
	perUser, perAddr int
	window           time.Duration
	mu               sync.Mutex
	failures         map[string]*failureCount
}

type failureCount struct {
	n     int
	start time.Time
}

// maxTracked bounds the names and addresses the limiter tracks; past it,
// the entries whose window passed are dropped, and a new name or address
// is refused while it is still full (fail closed).
const maxTracked = 100_000

func newLoginLimiter(perUser, perAddr int, window time.Duration) *loginLimiter {
	return &loginLimiter{perUser: perUser, perAddr: perAddr, window: window, failures: map[string]*failureCount{}}
}

// allowed says whether a login of user from addr may be tried now.
func (l *loginLimiter) allowed(user, addr string, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.under("u:"+user, l.perUser, now) && l.under("a:"+addr, l.perAddr, now)
}

func (l *loginLimiter) under(key string, max int, now time.Time) bool {
	f := l.failures[key]
	if f == nil {
		return len(l.failures) < maxTracked || l.prune(now)
	}
	if now.Sub(f.start) >= l.window {
		delete(l.failures, key)
		return true
	}
	return f.n < max
}

func (l *loginLimiter) prune(now time.Time) bool {
	for k, f := range l.failures {
		if now.Sub(f.start) >= l.window {
			delete(l.failures, k)
		}
	}
	return len(l.failures) < maxTracked
}

// failed counts a failed login of user from addr.
func (l *loginLimiter) failed(user, addr string, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, k := range []string{"u:" + user, "a:" + addr} {
		f := l.failures[k]
		if f == nil || now.Sub(f.start) >= l.window {
			if len(l.failures) >= maxTracked && !l.prune(now) {
				continue
			}
			f = &failureCount{start: now}
			l.failures[k] = f
		}
		f.n++
	}
}

// remoteAddr is the request's remote host (no port).
func remoteAddr(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// connect opens a session for user and password: the NATS connection as
// that user, and the client over it. A refused login is 401, the same
// for an unknown user and a wrong password.
func (s *Server) connect(ctx context.Context, r *http.Request, id, user, password string) (*session, *apiError) {
	if user == "" || password == "" || len(user) > maxCredentialBytes || len(password) > maxCredentialBytes ||
		!protocol.ValidToken(user) {
		return nil, errorf(http.StatusUnauthorized, CodeUnauthenticated, "a NATS user name (a subject token) and password are required")
	}
	now := s.cfg.Now()
	addr := remoteAddr(r)
	if !s.logins.allowed(user, addr, now) {
		return nil, errorf(http.StatusTooManyRequests, CodeTooManyLogins, "too many failed logins; wait a minute")
	}
	ss := &session{id: id, user: user, lastUsed: now, inflight: map[*int]context.CancelCauseFunc{}}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.RequestTimeout)
	defer cancel()
	nc, err := s.cfg.Dial(ctx, user, password, nats.ErrorHandler(ss.refused), nats.Name("toolfleet-console-"+user))
	if err != nil {
		if errors.Is(err, nats.ErrAuthorization) {
			s.logins.failed(user, addr, now)
			s.cfg.Logger.Info().Str(keyUser, user).Msg("http api login refused by the NATS server")
			return nil, errorf(http.StatusUnauthorized, CodeUnauthenticated, "the NATS server refused this user and password")
		}
		return nil, errorf(http.StatusServiceUnavailable, CodeUnavailable, "NATS cannot be reached; try again")
	}
	cl, err := client.New(nc, client.Config{Prefix: s.cfg.Prefix, Client: user, Domain: s.cfg.Domain})
	if err != nil {
		nc.Close()
		return nil, errorf(http.StatusInternalServerError, CodeInternal, "internal error")
	}
	js, err := natsbus.NewJetStream(nc, s.cfg.Domain)
	if err != nil {
		nc.Close()
		return nil, errorf(http.StatusInternalServerError, CodeInternal, "internal error")
	}
	ss.nc, ss.cl, ss.js, ss.rd = nc, cl, js, natsbus.NewDirectReader(js)
	return ss, nil
}

// authenticate returns the request's session: its cookie's, or the
// shared connection of its Basic credentials (opened on first use). A
// state-changing request must come from the same origin, and with a
// cookie carry the session's CSRF token.
func (s *Server) authenticate(r *http.Request) (*session, *apiError) {
	if user, password, ok := r.BasicAuth(); ok {
		if e := sameOrigin(r); e != nil {
			return nil, e
		}
		id := s.sessions.basicID(user, password)
		if ss := s.sessions.get(id); ss != nil {
			return ss, nil
		}
		ss, e := s.connect(r.Context(), r, id, user, password)
		if e != nil {
			return nil, e
		}
		stored, ok := s.sessions.add(ss)
		if stored != ss {
			ss.nc.Close()
		}
		if !ok {
			return nil, errorf(http.StatusServiceUnavailable, CodeUnavailable, "too many sessions")
		}
		return stored, nil
	}
	c, err := r.Cookie(CookieName)
	if err != nil || c.Value == "" {
		return nil, errorf(http.StatusUnauthorized, CodeUnauthenticated, "log in first (POST /v1/session) or send Authorization: Basic")
	}
	ss := s.sessions.get(c.Value)
	if ss == nil || strings.HasPrefix(c.Value, "basic:") {
		return nil, errorf(http.StatusUnauthorized, CodeUnauthenticated, "the session ended; log in again")
	}
	if changesState(r) {
		if e := sameOrigin(r); e != nil {
			return nil, e
		}
		if t := r.Header.Get(CSRFHeader); subtle.ConstantTimeCompare([]byte(t), []byte(ss.csrf)) != 1 {
			return nil, errorf(http.StatusForbidden, CodeCrossSite, "a state-changing request needs the session's "+CSRFHeader+" header")
		}
	}
	return ss, nil
}

func changesState(r *http.Request) bool {
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return false
	}
	return true
}

// sameOrigin refuses a request a browser says comes from another site:
// Sec-Fetch-Site other than same-origin or none, or an Origin other than
// the request's own. A program that sends neither header passes.
func sameOrigin(r *http.Request) *apiError {
	crossSite := errorf(http.StatusForbidden, CodeCrossSite, "cross-site requests are refused")
	if sfs := r.Header.Get("Sec-Fetch-Site"); sfs != "" && sfs != "same-origin" && sfs != "none" {
		return crossSite
	}
	origin := r.Header.Get("Origin")
	if origin == "" {
		return nil
	}
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" || !strings.EqualFold(u.Host, r.Host) {
		return crossSite
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	if u.Scheme != scheme && !(u.Scheme == "https" && r.Header.Get("X-Forwarded-Proto") == "https") {
		return crossSite
	}
	return nil
}
