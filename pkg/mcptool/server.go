package mcptool

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rs/zerolog"
)

// Implementation is how the worker introduces itself to MCP servers.
var Implementation = mcp.Implementation{Name: "toolfleet-toolworker", Version: "1"}

// Server is one supervised MCP server. Its methods are safe for concurrent
// use.
type Server struct {
	cfg     ServerConfig
	log     zerolog.Logger
	secrets *redactor
	client  *mcp.Client

	ctx     context.Context // ends at Close
	cancel  context.CancelFunc
	done    chan struct{} // closed when the supervisor returned
	refresh chan struct{} // a tools/list_changed arrived

	mu       sync.Mutex
	live     *session      // nil while (re)starting
	liveCh   chan struct{} // closed when live is set
	tools    []*toolEntry
	onChange func()
	restarts int

	calls    atomic.Int64 // numbers the calls' progress tokens
	progress atomic.Int64 // progress notifications received
	sinks    progressSinks

	cancelsAnswered, cancelsUnanswered atomic.Int64
	kills                              atomic.Int64 // for a cancelled call left unanswered
}

// session is one connection to the server.
type session struct {
	cs    *mcp.ClientSession
	proc  *process // nil for HTTP
	track *tracker // nil for HTTP
}

// Start starts the server (or connects to it), lists its tools and starts
// supervising it. It fails, naming the server and the tool, when the
// server cannot be started within StartTimeout or a tool cannot be served
// (a schema that does not compile, a name that collides or is invalid).
func Start(ctx context.Context, cfg ServerConfig) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	s := &Server{
		cfg:     cfg,
		log:     cfg.Logger.With().Str("mcp_server", cfg.Name).Logger(),
		secrets: newRedactor(secretsOf(cfg)),
		done:    make(chan struct{}),
		refresh: make(chan struct{}, 1),
		liveCh:  make(chan struct{}),
	}
	s.client = mcp.NewClient(&Implementation, &mcp.ClientOptions{
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {
			select {
			case s.refresh <- struct{}{}:
			default:
			}
		},
		ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
			s.progress.Add(1)
			// The message is the server's text: not logged.
			s.log.Debug().Float64("progress", req.Params.Progress).Float64("total", req.Params.Total).
				Msg("mcp server progress")
			s.onProgress(req)
		},
	})
	sctx, cancel := context.WithTimeout(ctx, cfg.StartTimeout)
	defer cancel()
	sess, err := s.connect(sctx)
	if err != nil {
		return nil, s.startError(err)
	}
	tools, err := s.list(sctx, sess, true)
	if err != nil {
		s.closeSession(sess)
		return nil, s.startError(err)
	}
	s.tools = tools
	s.ctx, s.cancel = context.WithCancel(context.WithoutCancel(ctx))
	s.setLive(sess)
	go s.supervise(sess)
	s.log.Info().Int("tools", len(tools)).Msg("mcp server started")
	return s, nil
}

func (s *Server) startError(err error) error {
	var ce *ConfigError
	if errors.As(err, &ce) {
		return err
	}
	return &ConfigError{Index: -1, Server: s.cfg.Name, Err: fmt.Errorf("start: %s", s.secrets.redact(err.Error()))}
}

// Name is the server's name from the manifest.
func (s *Server) Name() string { return s.cfg.Name }

// Progress counts the progress notifications the server sent for calls.
func (s *Server) Progress() int64 { return s.progress.Load() }

// CancelStats counts the cancelled requests of a stdio server it answered
// within the grace, and those it left unanswered (it was then killed,
// unless TrustCancel).
func (s *Server) CancelStats() (answered, unanswered int64) {
	return s.cancelsAnswered.Load(), s.cancelsUnanswered.Load()
}

// Kills counts the times a stdio server was killed for leaving a cancelled
// call unanswered past the grace (each is followed by a restart).
func (s *Server) Kills() int64 { return s.kills.Load() }

// Up reports whether the server is connected and serving calls (false while
// it restarts, and after Close).
func (s *Server) Up() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.live != nil && s.ctx.Err() == nil
}

// Restarts counts the restarts of the server since Start.
func (s *Server) Restarts() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.restarts
}

// OnChange sets f to be called (from the server's goroutine) after the
// server's tool list changed: a tools/list_changed notification, or a
// restarted server that lists other tools. Tools then returns the new list.
func (s *Server) OnChange(f func()) {
	s.mu.Lock()
	s.onChange = f
	s.mu.Unlock()
}

// Close stops supervising, kills a stdio server's process group and waits
// for it. Calls still running answer [ErrServerClosed] or [ErrConnectionLost].
func (s *Server) Close() error {
	s.cancel()
	s.mu.Lock()
	live := s.live
	s.mu.Unlock()
	if live != nil {
		s.closeSession(live)
	}
	<-s.done
	return nil
}

// connect starts a stdio server or connects to an HTTP one.
func (s *Server) connect(ctx context.Context) (*session, error) {
	if s.cfg.URL != "" {
		t := &mcp.StreamableClientTransport{
			Endpoint:   s.cfg.URL,
			HTTPClient: &http.Client{Transport: &headerTransport{headers: s.cfg.Headers, base: http.DefaultTransport}},
		}
		cs, err := s.client.Connect(ctx, t, nil)
		if err != nil {
			return nil, err
		}
		return &session{cs: cs}, nil
	}
	proc, t, err := s.startProcess()
	if err != nil {
		return nil, err
	}
	sess := &session{proc: proc}
	sess.track = newTracker(s.cfg.CancelGrace, func() {
		s.cancelsUnanswered.Add(1)
		if s.cfg.TrustCancel {
			s.log.Info().Int("pid", proc.pid).Msg("mcp server left a cancelled call unanswered (trust_cancel: not killed)")
			return
		}
		s.log.Warn().Int("pid", proc.pid).Dur("grace", s.cfg.CancelGrace).
			Msg("mcp server did not stop a cancelled call within the grace: killing it")
		s.kills.Add(1)
		proc.kill()
	}, &s.cancelsAnswered)
	cs, err := s.client.Connect(ctx, &trackingTransport{inner: t, t: sess.track}, nil)
	if err != nil {
		proc.kill()
		<-proc.exited
		if st := proc.exitStatus(); st != "" && st != "signal: killed" {
			return nil, fmt.Errorf("%w (the server ended: %s)", err, st)
		}
		return nil, err
	}
	sess.cs = cs
	go func() {
		// A server that exits ends its session, even if something it left
		// behind holds its stdout.
		<-proc.exited
		cs.Close()
	}()
	return sess, nil
}

// closeSession ends a session: a stdio server is killed (its session then
// closes), an HTTP session is closed.
func (s *Server) closeSession(sess *session) {
	if sess.proc != nil {
		sess.proc.kill()
		<-sess.proc.exited
	}
	sess.cs.Close()
}

func (s *Server) setLive(sess *session) {
	s.mu.Lock()
	s.live = sess
	close(s.liveCh)
	s.mu.Unlock()
}

func (s *Server) clearLive() {
	s.mu.Lock()
	s.live = nil
	s.liveCh = make(chan struct{})
	s.mu.Unlock()
}

// waitLive returns the live session, waiting for a restart until ctx ends.
func (s *Server) waitLive(ctx context.Context) (*session, error) {
	for {
		s.mu.Lock()
		live, ch := s.live, s.liveCh
		s.mu.Unlock()
		if live != nil {
			return live, nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-s.ctx.Done():
			return nil, ErrServerClosed
		}
	}
}

// supervise waits for the session to end and starts the server again, with
// backoff, until Close; it also refreshes the tool list on notice.
func (s *Server) supervise(sess *session) {
	defer close(s.done)
	backoff := MinRestartBackoff
	for {
		up := time.Now()
		ended := make(chan struct{})
		go func() { sess.cs.Wait(); close(ended) }()
	serving:
		for {
			select {
			case <-ended:
				break serving
			case <-s.refresh:
				s.relist(sess)
			case <-s.ctx.Done():
				s.closeSession(sess)
				<-ended
				return
			}
		}
		if sess.track != nil {
			sess.track.close()
		}
		s.clearLive()
		if s.ctx.Err() != nil {
			return
		}
		if time.Since(up) > time.Minute {
			backoff = MinRestartBackoff
		}
		ev := s.log.Warn()
		if sess.proc != nil {
			// The connection may have broken with the server still
			// running (garbage on stdout, an oversized message).
			sess.proc.kill()
			<-sess.proc.exited
			ev = ev.Str("status", sess.proc.exitStatus())
			if sess.track.wasTooLarge() {
				ev = ev.Int("max_message_bytes", s.cfg.MaxMessageBytes).Str("reason", "message too large")
			}
		}
		ev.Dur("restart_in", backoff).Msg("mcp server connection ended: restarting")
		for {
			wait := backoff/2 + rand.N(backoff/2+1)
			backoff = min(2*backoff, MaxRestartBackoff)
			select {
			case <-time.After(wait):
			case <-s.ctx.Done():
				return
			}
			cctx, cancel := context.WithTimeout(s.ctx, s.cfg.StartTimeout)
			next, err := s.connect(cctx)
			cancel()
			if err == nil {
				sess = next
				break
			}
			if s.ctx.Err() != nil {
				return
			}
			s.log.Error().Str("error", s.secrets.redact(err.Error())).Dur("restart_in", backoff).
				Msg("mcp server did not start: retrying")
		}
		s.mu.Lock()
		s.restarts++
		s.mu.Unlock()
		s.relist(sess)
		s.setLive(sess)
		s.log.Info().Msg("mcp server restarted")
	}
}

// relist lists the tools again and reports a change.
func (s *Server) relist(sess *session) {
	ctx, cancel := context.WithTimeout(s.ctx, s.cfg.StartTimeout)
	defer cancel()
	tools, err := s.list(ctx, sess, false)
	if err != nil {
		s.log.Error().Str("error", s.secrets.redact(err.Error())).Msg("listing the mcp server's tools failed: keeping the previous list")
		return
	}
	s.mu.Lock()
	changed := !sameTools(s.tools, tools)
	if changed {
		s.tools = tools
	}
	f := s.onChange
	s.mu.Unlock()
	if changed {
		s.log.Info().Int("tools", len(tools)).Msg("mcp server's tool list changed")
		if f != nil {
			f()
		}
	}
}

// headerTransport adds the configured headers to every request.
type headerTransport struct {
	headers map[string]string
	base    http.RoundTripper
}

func (t *headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if len(t.headers) > 0 {
		r = r.Clone(r.Context())
		for k, v := range t.headers {
			r.Header.Set(k, v)
		}
	}
	return t.base.RoundTrip(r)
}
