package natsbus

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// Defaults of [StreamGuardConfig].
const (
	DefaultStreamCheckInterval = 30 * time.Second
	DefaultStreamCheckTimeout  = 5 * time.Second
	DefaultStreamStartWait     = 30 * time.Second
)

// FieldMissing is the [Drift] field of a stream that does not exist.
const FieldMissing = "missing"

// Drift is one field of one stream that differs from the expected
// configuration.
type Drift struct {
	// Stream names the stream (KV_<bucket> for a bucket).
	Stream string
	// Field is the configuration field, by its JetStream name, or
	// FieldMissing.
	Field string
}

// DriftError is the error of a process whose streams are not configured
// as expected: it refuses to serve until they are.
type DriftError struct {
	Drifts []Drift
}

func (e *DriftError) Error() string {
	var b strings.Builder
	b.WriteString("natsbus: the fleet's streams differ from the expected configuration (run coordinator provision):")
	for i, d := range e.Drifts {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, " %s %s", d.Stream, d.Field)
	}
	return b.String()
}

// StreamGuardObserver receives every completed check of a [StreamGuard],
// for metrics: the drifts found, none when the configuration is as
// expected.
type StreamGuardObserver interface {
	StreamsChecked(expected []string, drifts []Drift)
}

// StreamGuardConfig configures a [StreamGuard]. Streams is required.
type StreamGuardConfig struct {
	// Streams are the streams to check (see [FleetStreams], [StreamsOf]).
	Streams []FleetStream
	// Interval is the pause between periodic checks. Default: 30s.
	Interval time.Duration
	// Timeout bounds one check. Default: 5s.
	Timeout time.Duration
	// StartWait bounds how long [StreamGuard.CheckAtStart] checks again
	// while the server does not answer. Default: 30s.
	StartWait time.Duration
	// Logger receives one error line per drifted stream and field, and a
	// line when the configuration is back. The zero value discards.
	Logger zerolog.Logger
	// Observer receives each check's drifts. Default: nil.
	Observer StreamGuardObserver
}

// StreamGuard checks that the streams a process uses have exactly their
// expected configuration, at start and periodically. While one differs
// (or is missing), [StreamGuard.Err] is a *DriftError: the process
// refuses to serve (workers take no calls, coordinators publish none and
// take no runs, /readyz fails) until a check finds them as expected
// again. A nil *StreamGuard is always satisfied. It is safe for concurrent
// use.
type StreamGuard struct {
	js  jetstream.JetStream
	cfg StreamGuardConfig

	mu      sync.Mutex
	err     error          // the last check's drift, nil when none
	changed chan struct{}  // closed when err changes
	logged  map[Drift]bool // drifts already logged
}

// NewStreamGuard returns a guard of cfg.Streams. It checks nothing until
// Check or Run.
func NewStreamGuard(js jetstream.JetStream, cfg StreamGuardConfig) *StreamGuard {
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultStreamCheckInterval
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultStreamCheckTimeout
	}
	if cfg.StartWait <= 0 {
		cfg.StartWait = DefaultStreamStartWait
	}
	return &StreamGuard{js: js, cfg: cfg, changed: make(chan struct{}), logged: map[Drift]bool{}}
}

// The guards of each audience: the streams one kind of process uses, as
// [FleetStreams] lists them for its [Role]. cfg.Streams is set to them.

// NewCoordinatorGuard returns the guard of the streams every coordinator
// uses (RoleCoordinator), in their default configuration: a coordinator
// relies on no field a provisioning option tunes.
func NewCoordinatorGuard(js jetstream.JetStream, subjects protocol.Subjects, cfg StreamGuardConfig) *StreamGuard {
	cfg.Streams = StreamsOf(FleetStreams(subjects, StreamConfig{}), RoleCoordinator)
	return NewStreamGuard(js, cfg)
}

// NewServeGuard returns the guard of the streams a serving coordinator
// uses beyond those of every coordinator (RoleServe: the runs stream and
// bucket), as streams configures them.
func NewServeGuard(js jetstream.JetStream, subjects protocol.Subjects, streams StreamConfig, cfg StreamGuardConfig) *StreamGuard {
	cfg.Streams = StreamsOf(FleetStreams(subjects, streams), RoleServe)
	return NewStreamGuard(js, cfg)
}

// NewWorkerGuard returns the guard of the streams a worker uses
// (RoleWorker), as streams configures them.
func NewWorkerGuard(js jetstream.JetStream, subjects protocol.Subjects, streams StreamConfig, cfg StreamGuardConfig) *StreamGuard {
	cfg.Streams = StreamsOf(FleetStreams(subjects, streams), RoleWorker)
	return NewStreamGuard(js, cfg)
}

// Streams are the streams g checks.
func (g *StreamGuard) Streams() []FleetStream { return g.cfg.Streams }

// Setup makes sure g's streams exist before the first check: with
// provision (the provisioning identity, such as the embedded server's
// owner) it creates or updates them ([ProvisionStreams]); without it, it
// creates only a missing one, when the server lets it, and changes none
// ([CreateMissingStreams]).
func (g *StreamGuard) Setup(ctx context.Context, provision bool) error {
	if provision {
		_, err := ProvisionStreams(ctx, g.js, g.cfg.Streams)
		return err
	}
	CreateMissingStreams(ctx, g.js, g.cfg.Streams, g.cfg.Logger)
	return nil
}

// Err is nil while the last check found the expected configuration, the
// *DriftError it found otherwise.
func (g *StreamGuard) Err() error {
	if g == nil {
		return nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.err
}

// Wait returns nil once the last check found the expected configuration,
// or ctx's error.
func (g *StreamGuard) Wait(ctx context.Context) error {
	if g == nil {
		return nil
	}
	for {
		g.mu.Lock()
		err, changed := g.err, g.changed
		g.mu.Unlock()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-changed:
		}
	}
}

// CheckAtStart is [StreamGuard.Check] for a process that is starting.
// While the server does not answer — a stream's leader is being elected
// after a cluster node was lost, a node is still catching up — it checks
// again, with backoff, for up to StartWait, so a process started during a
// leader change waits instead of exiting. A stream that differs is
// returned at once.
func (g *StreamGuard) CheckAtStart(ctx context.Context) error {
	if g == nil {
		return nil
	}
	deadline := time.Now().Add(g.cfg.StartWait)
	delay := 100 * time.Millisecond
	for {
		err := g.Check(ctx)
		var drift *DriftError
		if err == nil || errors.As(err, &drift) || !Transient(err) || ctx.Err() != nil || !time.Now().Before(deadline) {
			return err
		}
		g.cfg.Logger.Info().Err(err).Msg("the fleet's streams did not answer yet; checking again")
		select {
		case <-ctx.Done():
			return err
		case <-time.After(delay):
		}
		delay = min(2*delay, 2*time.Second)
	}
}

// Check checks every stream now. It returns a *DriftError when one
// differs, another error when the check itself failed (the server did not
// answer: the last state is kept), nil otherwise.
func (g *StreamGuard) Check(ctx context.Context) error {
	if g == nil {
		return nil
	}
	cctx, cancel := context.WithTimeout(ctx, g.cfg.Timeout)
	defer cancel()
	var drifts []Drift
	names := make([]string, 0, len(g.cfg.Streams))
	for _, fs := range g.cfg.Streams {
		names = append(names, fs.Config.Name)
		st, err := g.js.Stream(cctx, fs.Config.Name)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			drifts = append(drifts, Drift{Stream: fs.Config.Name, Field: FieldMissing})
			continue
		}
		if err != nil {
			return fmt.Errorf("natsbus: checking stream %s: %w", fs.Config.Name, err)
		}
		for _, f := range fs.Drift(st.CachedInfo().Config) {
			drifts = append(drifts, Drift{Stream: fs.Config.Name, Field: f})
		}
	}
	g.record(names, drifts)
	return g.Err()
}

func (g *StreamGuard) record(names []string, drifts []Drift) {
	if g.cfg.Observer != nil {
		g.cfg.Observer.StreamsChecked(names, drifts)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	was := g.err
	seen := map[Drift]bool{}
	for _, d := range drifts {
		seen[d] = true
		if !g.logged[d] {
			g.cfg.Logger.Error().Str(LogStream, d.Stream).Str("field", d.Field).
				Msg("stream configuration differs from the expected one: refusing to serve (run coordinator provision)")
		}
	}
	g.logged = seen
	if len(drifts) == 0 {
		g.err = nil
		if was != nil {
			g.cfg.Logger.Info().Msg("stream configuration is as expected again: serving")
		}
	} else {
		g.err = &DriftError{Drifts: drifts}
	}
	if (was == nil) != (g.err == nil) {
		close(g.changed)
		g.changed = make(chan struct{})
	}
}

// Run checks every Interval until ctx ends. A check that fails (no answer
// from the server) is logged and keeps the last state.
func (g *StreamGuard) Run(ctx context.Context) {
	if g == nil {
		return
	}
	t := time.NewTicker(g.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := g.Check(ctx); err != nil && ctx.Err() == nil {
			var de *DriftError
			if !errors.As(err, &de) {
				g.cfg.Logger.Warn().Err(err).Msg("could not check the stream configuration")
			}
		}
	}
}
