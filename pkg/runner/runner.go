package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/toolfleet/toolfleet/internal/approval"
	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/internal/natsbus/dispatch"
	"github.com/toolfleet/toolfleet/internal/natsbus/stores"
	"github.com/toolfleet/toolfleet/pkg/agent"
	"github.com/toolfleet/toolfleet/pkg/config"
	"github.com/toolfleet/toolfleet/pkg/logkey"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// Config configures a [Runner]. Model is required; the zero value of every
// other field means its default.
type Config struct {
	// Model answers the loop. Required, unless Agent and Models are set.
	Model loop.Model
	// Models builds the model client of an agent's model
	// (providers.Models.Model builds those of the shipped providers): with
	// Agent and no Model, the agent's model, and its summarizer's.
	// Default: none.
	Models func(agent.Model) (loop.Model, error)
	// Loop holds the loop's limits (rounds, calls per round, observation
	// size, run duration), its approval settings, its observer and tracer
	// provider. Its Logger is this Config's. Default: loop's defaults.
	Loop loop.Config
	// Prefix is the first token of every subject: the fleet's. Default:
	// "fleet".
	Prefix string
	// JSDomain is the JetStream domain of the fleet's streams. Default: the
	// server's own JetStream.
	JSDomain string
	// StreamCheckInterval is the pause between checks of the fleet's
	// stream configuration. Default: 30s.
	StreamCheckInterval time.Duration
	// Owner names this process in the journals of its durable runs.
	// Default: run@<hostname>-<pid>.
	Owner string
	// ProvisionStreams creates or updates the streams every coordinator
	// uses to their expected configuration: for a connection whose user
	// owns them, as in a program that starts its own server. Default:
	// false, a missing one is created when the server lets it and none is
	// changed.
	ProvisionStreams bool
	// Registerer receives the runner's metrics: runs, calls and model
	// calls, calls held for their client's share, the tool catalog's
	// anomalies and the checks of the fleet's streams (docs/operations.md
	// lists them). A collector of the same name already registered there
	// (by another component of the process) is shared. Default: nil, no
	// metrics.
	Registerer prometheus.Registerer
	// Agent, when set, is the agent every run of this runner runs as
	// (pkg/agent, docs/agents.md): its instructions open each run, the
	// model is offered only its tools (a call to another is unknown_tool
	// and never published), and its limits, approvals and budget apply
	// over Loop. A Model set beside it must be the agent's: New refuses
	// one that names another provider or model ([agent.Model.Match], with
	// the error's field "Model"). Default: none.
	Agent *agent.Definition
	// Logger receives the runner's and the loop's logs. The zero value
	// discards.
	Logger zerolog.Logger
}

// Validate checks c without connecting to anything. Each error is a
// [config.Error] naming the field ("Model", "Loop.MaxRounds"); New calls it
// first.
func (c Config) Validate() error {
	if c.Model == nil && (c.Agent == nil || c.Models == nil) {
		return config.Errorf("Model", "required (or Agent and Models)")
	}
	if _, err := protocol.NewSubjects(c.Prefix); err != nil {
		return config.Errorf("Prefix", "must match %s, got %q", protocol.TokenPattern, c.Prefix)
	}
	if c.StreamCheckInterval < 0 {
		return config.Errorf("StreamCheckInterval", "must be > 0, got %v", c.StreamCheckInterval)
	}
	if c.Agent != nil {
		if err := c.Agent.Validate(); err != nil {
			var ce config.Error
			if errors.As(err, &ce) {
				return config.Prefix("Agent", ce)
			}
			return err
		}
		if c.Model != nil {
			if err := c.Agent.Model.Match(c.Model); err != nil {
				return &config.FieldError{Field: "Model", Err: err}
			}
		}
	}
	if err := c.Loop.Validate(); err != nil {
		var ce config.Error
		if errors.As(err, &ce) {
			return config.Prefix("Loop", ce)
		}
		return err
	}
	return nil
}

// ErrNoJournal is returned by [Runner.Resume] for a run without a journal,
// or one that was not started by [Runner.RunDurable].
var ErrNoJournal = errors.New("runner: the run has no journal to resume from")

// Runner runs the loop over the fleet on a connection its caller owns. It
// is safe for concurrent use: runs are independent.
type Runner struct {
	cfg      Config
	nc       *nats.Conn
	subjects protocol.Subjects
	js       natsbus.JetStream
	metrics  *runnerMetrics // nil without Config.Registerer
	guard    *natsbus.StreamGuard
	catalog  *stores.Catalog
	disp     *dispatch.Dispatcher
	gate     loop.Gate
	base     loop.Config // Config.Loop with the logger and metrics, before an agent's settings
	loop     *loop.Runner
	stop     context.CancelFunc
	once     sync.Once

	// fleetDisps are the dispatchers Fleet handed out, closed by Close.
	fleetMu    sync.Mutex
	fleetDisps []*dispatch.Dispatcher
}

// New validates cfg, checks the fleet's streams (creating a missing one
// when the server lets it, changing none; with ProvisionStreams, creating
// or updating them), starts reading the tool catalog
// and returns a runner. A nil nc and a bad cfg are [config.Error]s (the nil
// connection's field is "Conn"), returned before any I/O. Close releases
// what New started; the connection stays the caller's.
func New(ctx context.Context, nc *nats.Conn, cfg Config) (*Runner, error) {
	return newRunner(ctx, nc, cfg)
}

func newRunner(ctx context.Context, nc *nats.Conn, cfg Config) (_ *Runner, err error) {
	if nc == nil {
		return nil, config.Errorf("Conn", "a connection is required, got nil")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	subjects, _ := protocol.NewSubjects(cfg.Prefix)
	if cfg.Owner == "" {
		host, _ := os.Hostname()
		cfg.Owner = fmt.Sprintf("run@%s-%d", host, os.Getpid())
	}
	js, err := natsbus.NewJetStream(nc, cfg.JSDomain)
	if err != nil {
		return nil, fmt.Errorf("runner: %w", err)
	}
	r := &Runner{cfg: cfg, nc: nc, subjects: subjects, js: js, metrics: newRunnerMetrics(cfg.Registerer)}
	defer func() {
		if err != nil {
			r.Close()
		}
	}()
	r.guard = natsbus.NewCoordinatorGuard(js, subjects, natsbus.StreamGuardConfig{
		Interval: cfg.StreamCheckInterval, Logger: cfg.Logger, Observer: r.metrics.streamsObserver(),
	})
	if err := r.guard.Setup(ctx, cfg.ProvisionStreams); err != nil {
		return nil, fmt.Errorf("runner: %w", err)
	}
	if err := r.guard.CheckAtStart(ctx); err != nil {
		return nil, fmt.Errorf("runner: %w", err)
	}
	gctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	r.stop = cancel
	go r.guard.Run(gctx)
	if r.catalog, err = stores.NewCatalogWith(ctx, js, subjects, stores.CatalogConfig{Logger: cfg.Logger, Observer: r.metrics.catalogObserver()}); err != nil {
		return nil, fmt.Errorf("runner: reading the tool catalog: %w", err)
	}
	r.disp = r.newDispatcher()
	r.gate = approval.NewGate(nc, js, subjects, approval.GateConfig{Logger: cfg.Logger})
	lc := cfg.Loop
	lc.Logger = cfg.Logger
	if r.metrics != nil {
		lc.Observer = loop.Observers(lc.Observer, r.metrics.coord)
	}
	r.base = lc
	var catalog loop.Catalog = r.catalog
	model := cfg.Model
	if a := cfg.Agent; a != nil {
		lc, catalog = a.LoopConfig(lc), a.Catalog(catalog)
		if model, lc.Summarizer, err = agentModels(cfg, lc.Summarizer); err != nil {
			return nil, err
		}
	}
	if r.loop, err = loop.New(lc, model, catalog, r.disp, r.gate); err != nil {
		return nil, err
	}
	return r, nil
}

// newDispatcher returns a dispatcher on the runner's connection, held
// back while the fleet's streams differ from their expected
// configuration.
func (r *Runner) newDispatcher() *dispatch.Dispatcher {
	return dispatch.NewDispatcher(r.nc, r.js, r.subjects, dispatch.DispatcherConfig{
		Logger: r.cfg.Logger, Guard: r.guard, ShareObserver: r.metrics.shareObserver(),
	})
}

// Fleet is what a front end other than the loop's model needs to run
// calls exactly as the runner's loop runs them: an MCP server runs each
// client's call as a loop of one call (loop.New with a model that asks
// for it) on these.
type Fleet struct {
	// Catalog is the fleet's live tool catalog (all of it: an agent's
	// choice of tools is not applied).
	Catalog loop.Catalog
	// Dispatcher publishes calls to the fleet's workers and gathers their
	// results; it is held back while the fleet's streams differ from their
	// expected configuration.
	Dispatcher loop.Dispatcher
	// Gate asks for the operator's decision on calls that need approval.
	Gate loop.Gate
	// Loop is Config.Loop with the runner's logger and metrics observer
	// (an agent's settings are not applied).
	Loop loop.Config
}

// Fleet returns the runner's fleet: its catalog, gate and loop settings,
// and a dispatcher of its own (closed by Close), so that the calls of one
// front end are gathered apart from the runner's runs.
func (r *Runner) Fleet() Fleet {
	d := r.newDispatcher()
	r.fleetMu.Lock()
	r.fleetDisps = append(r.fleetDisps, d)
	r.fleetMu.Unlock()
	return Fleet{Catalog: r.catalog, Dispatcher: d, Gate: r.gate, Loop: r.base}
}

// StreamsErr is nil while the fleet's streams have their expected
// configuration, the error of the last check that found one that differs
// otherwise: the runner publishes no call meanwhile.
func (r *Runner) StreamsErr() error { return r.guard.Err() }

// agentModels returns Config.Agent's model (Config.Model, or the one
// Config.Models builds) and its summarizer's (summarizer when set, or the
// one Models builds).
func agentModels(cfg Config, summarizer loop.Model) (model, sum loop.Model, err error) {
	model, sum = cfg.Model, summarizer
	if model == nil {
		if model, err = cfg.Models(cfg.Agent.Model); err != nil {
			return nil, nil, &config.FieldError{Field: "Agent.Model", Err: err}
		}
	}
	if s := cfg.Agent.Summarizer; s != nil && sum == nil && cfg.Models != nil {
		if sum, err = cfg.Models(*s); err != nil {
			return nil, nil, &config.FieldError{Field: "Agent.Summarizer", Err: err}
		}
	}
	return model, sum, nil
}

// WaitForTools returns once the fleet's catalog lists every named tool, or
// with ctx's error: a worker started with the runner serves them.
func (r *Runner) WaitForTools(ctx context.Context, names ...string) error {
	return r.catalog.WaitFor(ctx, names...)
}

// Run runs the loop for one prompt (see loop.Runner.Run). It is not
// journaled: if this process dies, the run is lost (its calls are still
// answered by the workers).
func (r *Runner) Run(ctx context.Context, prompt string) (*loop.Result, error) {
	if msgs := r.agentMessages(prompt); msgs != nil {
		return r.loop.RunMessages(ctx, msgs)
	}
	return r.loop.Run(ctx, prompt)
}

// agentMessages is a run's transcript under Config.Agent: its
// instructions, then prompt; nil without an agent or for an empty prompt
// (which the loop refuses).
func (r *Runner) agentMessages(prompt string) []loop.Message {
	if r.cfg.Agent == nil || strings.TrimSpace(prompt) == "" {
		return nil
	}
	return r.cfg.Agent.Messages([]loop.Message{{Role: "user", Content: prompt}})
}

// RunMessages runs the loop on a transcript (see loop.Runner.RunMessages).
func (r *Runner) RunMessages(ctx context.Context, msgs []loop.Message) (*loop.Result, error) {
	return r.loop.RunMessages(ctx, msgs)
}

// journaledInput is the request entry of a durable run: what Resume needs
// to continue it (the same as "coordinator run" journals).
type journaledInput struct {
	Prompt string `json:"prompt"`
}

// RunDurable runs prompt as the durable run id (protocol.NewRunID makes
// one): every step is journaled in the fleet's journal stream before it
// takes effect, so that [Runner.Resume] of id, in this process or another,
// continues it if this one stops. A finished run's journal gives its
// result again.
func (r *Runner) RunDurable(ctx context.Context, id protocol.RunID, prompt string) (*loop.Result, error) {
	if !id.Valid() {
		return nil, fmt.Errorf("runner: %q is not a run id", id)
	}
	j, err := stores.OpenJournal(ctx, r.js, r.subjects, id, r.cfg.Owner, "start")
	if err != nil {
		return nil, fmt.Errorf("runner: %w", err)
	}
	data, err := json.Marshal(journaledInput{Prompt: prompt})
	if err != nil {
		return nil, err
	}
	if err := j.Append(ctx, loop.JournalEntry{Kind: stores.EntryRequest, Data: data}); err != nil {
		return nil, fmt.Errorf("runner: %w", err)
	}
	return r.loop.RunDurable(ctx, loop.Durable{Prompt: prompt, Messages: r.agentMessages(prompt), RunID: id, Journal: j})
}

// Resume continues the durable run id from its journal: journaled model
// responses are not asked again and answered calls are not run again; a
// finished run gives its result again. A run without a journal of
// RunDurable is [ErrNoJournal].
func (r *Runner) Resume(ctx context.Context, id protocol.RunID) (*loop.Result, error) {
	if !id.Valid() {
		return nil, fmt.Errorf("runner: %q is not a run id", id)
	}
	j, err := stores.OpenJournal(ctx, r.js, r.subjects, id, r.cfg.Owner, "resume")
	if err != nil {
		return nil, fmt.Errorf("runner: %w", err)
	}
	var in *journaledInput
	for _, e := range j.Entries() {
		if e.Kind == stores.EntryRequest {
			var v journaledInput
			if json.Unmarshal(e.Data, &v) == nil && v.Prompt != "" {
				in = &v
			}
		}
	}
	if in == nil {
		return nil, fmt.Errorf("%w: %s", ErrNoJournal, id)
	}
	r.cfg.Logger.Info().Str(logkey.RunID, string(id)).Int("journal_entries", len(j.Entries())).Msg("resuming the run from its journal")
	return r.loop.RunDurable(ctx, loop.Durable{Prompt: in.Prompt, Messages: r.agentMessages(in.Prompt), RunID: id, Journal: j})
}

// Close stops the stream checks and the catalog and deletes the runner's
// results consumer. It does not close the connection. It is idempotent.
func (r *Runner) Close() error {
	r.once.Do(func() {
		if r.stop != nil {
			r.stop()
		}
		if r.disp != nil {
			r.disp.Close()
		}
		r.fleetMu.Lock()
		for _, d := range r.fleetDisps {
			d.Close()
		}
		r.fleetMu.Unlock()
		if r.catalog != nil {
			r.catalog.Close()
		}
	})
	return nil
}
