package serve

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
	"golang.org/x/sync/semaphore"

	"github.com/toolfleet/toolfleet/internal/agents"
	"github.com/toolfleet/toolfleet/internal/approval"
	"github.com/toolfleet/toolfleet/internal/metrics"
	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/internal/natsbus/admission"
	"github.com/toolfleet/toolfleet/internal/natsbus/dispatch"
	"github.com/toolfleet/toolfleet/internal/natsbus/stores"
	"github.com/toolfleet/toolfleet/internal/natsbus/workqueue"
	"github.com/toolfleet/toolfleet/pkg/agent"
	"github.com/toolfleet/toolfleet/pkg/config"
	"github.com/toolfleet/toolfleet/pkg/logkey"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// Timeouts of the server's own NATS operations.
const (
	opTimeout = 5 * time.Second
	// startTimeout bounds New's setup of the runs stream, consumer and
	// bucket and the agents bucket.
	startTimeout = 10 * time.Second
	// storeTimeout bounds the retries of storing one result.
	storeTimeout = 30 * time.Second
	// termMalformed is the reason of a terminated request, visible in the
	// server's advisories.
	termMalformed = "malformed"
)

// Log keys of the server.
const (
	logRun         = logkey.RunID
	logAttempt     = logkey.Attempt
	logCoordinator = "coordinator"
	logCode        = "code"
	logField       = "field"
	logBytes       = "bytes"
	logClient      = "client"
	logAgent       = "agent"
	logSubmission  = "submission"
)

// ErrServing is returned by [Server.Serve] called a second time, or after
// [Server.Close].
var ErrServing = errors.New("serve: Serve may be called once, before Close")

// errShutdown is the cause of a run cancelled because the shutdown grace
// ended.
var errShutdown = errors.New("coordinator: shutting down")

// Server is one serving coordinator: [New] sets it up on a connection,
// [Server.Serve] serves runs until its context ends, [Server.Close]
// releases what New started.
type Server struct {
	cfg      Config
	nc       *nats.Conn
	js       natsbus.JetStream
	subjects protocol.Subjects
	log      zerolog.Logger
	limited  zerolog.Logger
	metrics  *serverMetrics       // nil without Config.Registerer
	fleet    *natsbus.StreamGuard // the fleet's streams
	guard    *natsbus.StreamGuard // the runs stream and bucket
	stop     context.CancelFunc   // ends the guards' checks
	catalog  *stores.Catalog
	queue    *workqueue.WorkQueue
	results  *stores.RunResults
	disp     *dispatch.Dispatcher
	gate     *approval.Gate
	// agents resolves each run's agent (docs/agents.md): its revision,
	// pinned in the run's journal, its model, tools, limits and budget.
	agents   *agents.Serving
	slots    *semaphore.Weighted
	inflight sync.WaitGroup
	// handoff is closed when shutting down: runs in flight stop at their
	// next step boundary and go back to the stream.
	handoff chan struct{}
	// owned holds the cancel of every run this coordinator runs.
	mu    sync.Mutex
	owned map[protocol.RunID]context.CancelCauseFunc
	// inputs holds where each run it runs takes its client's input
	// (input.go).
	inputs map[protocol.RunID]*runInput
	served atomic.Bool
	once   sync.Once
}

// New validates cfg and sets a serving coordinator up on nc: it checks the
// fleet's streams (creating a missing one when the server lets it, or
// creating and updating them all with Config.ProvisionStreams), the runs
// stream and bucket, creates or updates the runs consumer, opens the agents
// bucket and starts reading the tool catalog. It takes no run: submissions
// wait in the runs stream until [Server.Serve].
//
// A nil nc and a bad cfg are [config.Error]s (the nil connection's field is
// "Conn"; a Config field's error is a [*ConfigError]), returned before any
// I/O. A stream configured otherwise than expected is an error naming it.
// The connection stays the caller's: Close does not close it.
func New(ctx context.Context, nc *nats.Conn, cfg Config) (_ *Server, err error) {
	if nc == nil {
		return nil, config.Errorf("Conn", "a connection is required, got nil")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	if limit := int(nc.MaxPayload()) - 8<<10; limit > 1024 && cfg.MaxResultBytes > limit {
		cfg.MaxResultBytes = limit
	}
	subjects, _ := protocol.NewSubjects(cfg.Prefix)
	js, err := natsbus.NewJetStream(nc, cfg.JSDomain)
	if err != nil {
		return nil, fmt.Errorf("serve: %w", err)
	}
	s := &Server{
		cfg: cfg, nc: nc, js: js, subjects: subjects,
		log:     cfg.Logger.With().Str(logCoordinator, cfg.Name).Logger(),
		metrics: newServerMetrics(cfg.Registerer),
		slots:   semaphore.NewWeighted(int64(cfg.MaxConcurrentRuns)),
		handoff: make(chan struct{}),
		owned:   map[protocol.RunID]context.CancelCauseFunc{},
		inputs:  map[protocol.RunID]*runInput{},
	}
	s.limited = s.log.Sample(&zerolog.BurstSampler{Burst: 10, Period: time.Second})
	if s.metrics != nil {
		s.cfg.Loop.Observer = loop.Observers(s.cfg.Loop.Observer, s.metrics.coord)
	}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	gctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s.stop = cancel
	if err := s.checkFleet(ctx, gctx); err != nil {
		return nil, err
	}
	octx, ocancel := context.WithTimeout(ctx, startTimeout)
	defer ocancel()
	s.guard = natsbus.NewServeGuard(js, subjects, streamConfig(cfg), natsbus.StreamGuardConfig{
		Interval: cfg.StreamCheckInterval, Logger: cfg.Logger, Observer: s.metrics.streamsObserver(),
	})
	cons, results, err := s.ensureRuns(octx, true)
	if err != nil {
		return nil, err
	}
	s.results = results
	go s.guard.Run(gctx)
	if s.catalog, err = stores.NewCatalogWith(ctx, js, subjects, stores.CatalogConfig{Logger: cfg.Logger, Observer: s.metrics.catalogObserver()}); err != nil {
		return nil, fmt.Errorf("serve: reading the tool catalog: %w", err)
	}
	s.queue = workqueue.NewWorkQueue(workqueue.WorkQueueConfig{
		Slots: s.slots, PollWait: cfg.PollWait, InFlight: &s.inflight, Logger: s.log, Noun: "run requests",
		Ensure: func(ctx context.Context) (natsbus.Consumer, error) {
			octx, cancel := context.WithTimeout(ctx, opTimeout)
			defer cancel()
			cons, _, err := s.ensureRuns(octx, false)
			return cons, err
		},
		// Streams that differ from the expected configuration: take no run.
		Wait: func(ctx context.Context) error {
			if err := s.fleet.Wait(ctx); err != nil {
				return err
			}
			return s.guard.Wait(ctx)
		},
	}, s.handle)
	s.queue.SetConsumer(cons)
	s.disp = dispatch.NewDispatcher(nc, js, subjects, dispatch.DispatcherConfig{Logger: cfg.Logger, Guard: s.fleet, ShareObserver: s.metrics.shareObserver(),
		OnForeignProgress: func() { s.refused(metrics.RefusedProgress) }})
	s.gate = approval.NewGate(nc, js, subjects, approval.GateConfig{Logger: cfg.Logger})
	store, err := stores.OpenAgents(octx, js, subjects)
	if err != nil {
		return nil, fmt.Errorf("serve: the agents bucket %s (coordinator provision creates it): %w", subjects.AgentsBucket(), err)
	}
	models := cfg.Models
	if models == nil {
		models = noModels
	}
	s.agents = &agents.Serving{
		Registry: &agents.Registry{Store: store, Invalid: s.invalidAgentRevision},
		Models:   models,
		Metrics:  s.metrics.agentsMetrics(),
	}
	return s, nil
}

// checkFleet sets up the streams every coordinator uses (see New), checks
// their configuration, refusing to start when it differs, and keeps
// checking them until gctx ends.
func (s *Server) checkFleet(ctx, gctx context.Context) error {
	s.fleet = natsbus.NewCoordinatorGuard(s.js, s.subjects, natsbus.StreamGuardConfig{
		Interval: s.cfg.StreamCheckInterval, Logger: s.cfg.Logger, Observer: s.metrics.streamsObserver(),
	})
	if err := s.fleet.Setup(ctx, s.cfg.ProvisionStreams); err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	if err := s.fleet.CheckAtStart(ctx); err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	go s.fleet.Run(gctx)
	return nil
}

// noModels is the model hook of a Server without Config.Models: every
// stored agent's run is refused, naming why.
func noModels(agent.Model) (loop.Model, error) {
	return nil, config.Errorf("model", "this coordinator builds no agent's model (its serve.Config.Models is not set)")
}

// Err is nil while the fleet's streams and the runs stream and bucket have
// their expected configuration, and the error of the last check that found
// one otherwise (the server takes no run meanwhile): for a readiness probe.
func (s *Server) Err() error {
	if err := s.fleet.Err(); err != nil {
		return err
	}
	return s.guard.Err()
}

// Serve serves runs until ctx ends: it takes the submissions clients
// stored in the runs stream ([protocol.Subjects.RunSubmission]) from the
// stream's shared consumer whenever it has a free slot (at most
// MaxConcurrentRuns at once), checks each, runs it, and stores each run's
// result (or why it was refused) in the runs bucket and announces it on the
// run's result subject. It answers no request: a submission is accepted by
// the server's acknowledgement of the stored message.
//
// When ctx ends Serve stops taking submissions, hands the runs in flight
// off at their next step boundary (another coordinator resumes each from
// its journal), waits for them for up to ShutdownGrace, then cancels the
// rest (their results, with termination reason "cancelled", are stored like
// any other) and returns nil. It returns an error only when it cannot
// start; a second call, or one after Close, is [ErrServing].
func (s *Server) Serve(ctx context.Context) error {
	if !s.served.CompareAndSwap(false, true) {
		return ErrServing
	}
	return s.serve(ctx)
}

// Close stops the stream checks and the catalog and deletes the server's
// results consumer. Call it after Serve returned (runs in flight need
// them). It does not close the connection. It is idempotent.
func (s *Server) Close() error {
	s.once.Do(func() {
		s.served.Store(true)
		if s.stop != nil {
			s.stop()
		}
		if s.disp != nil {
			s.disp.Close()
		}
		if s.catalog != nil {
			s.catalog.Close()
		}
	})
	return nil
}

func (s *Server) serve(ctx context.Context) error {
	// Submissions are stored by the server, not answered by a coordinator:
	// nothing here publishes on a subject a peer chose.
	abandoned, err := s.nc.QueueSubscribe(s.subjects.RunsMaxDeliveries(), s.subjects.CoordinatorsGroup(), s.onMaxDeliveries)
	if err != nil {
		return fmt.Errorf("serve: subscribing to %s: %w", s.subjects.RunsMaxDeliveries(), err)
	}
	defer abandoned.Unsubscribe()
	cancels, err := s.nc.Subscribe(s.subjects.JournalCancels(), s.onCancelRequest)
	if err != nil {
		return fmt.Errorf("serve: subscribing to %s: %w", s.subjects.JournalCancels(), err)
	}
	defer cancels.Unsubscribe()
	resumes, err := s.nc.QueueSubscribe(s.subjects.JournalResumes(), s.subjects.CoordinatorsGroup(), s.onResumeRequest)
	if err != nil {
		return fmt.Errorf("serve: subscribing to %s: %w", s.subjects.JournalResumes(), err)
	}
	defer resumes.Unsubscribe()
	inputs, err := s.nc.Subscribe(s.subjects.RunInputs(), s.onRunInput)
	if err != nil {
		return fmt.Errorf("serve: subscribing to %s: %w", s.subjects.RunInputs(), err)
	}
	defer inputs.Unsubscribe()
	if err := s.nc.FlushTimeout(opTimeout); err != nil {
		return fmt.Errorf("serve: registering the subscriptions: %w", err)
	}

	// Runs outlive ctx by up to ShutdownGrace.
	execCtx, cancelExec := context.WithCancelCause(context.WithoutCancel(ctx))
	defer cancelExec(nil)
	pulled := make(chan struct{})
	go func() {
		defer close(pulled)
		s.queue.Run(ctx, execCtx)
	}()
	s.log.Info().Str("submit", s.subjects.RunSubmissions()).Str("stream", s.subjects.RunsStream()).
		Str("bucket", s.subjects.RunsBucket()).Int("max_concurrent_runs", s.cfg.MaxConcurrentRuns).Msg("serving runs")

	<-ctx.Done()
	s.log.Info().Msg("shutting down: no new runs are taken")
	<-pulled

	// Hand the runs in flight off: each stops at its next step boundary
	// (a model call in flight may finish for up to ShutdownGrace) and its
	// request goes back to the stream for another coordinator.
	close(s.handoff)
	s.queue.Drain(s.cfg.ShutdownGrace, func() {
		s.log.Warn().Dur("grace", s.cfg.ShutdownGrace).Msg("shutdown grace over: cancelling the runs still in flight")
		cancelExec(errShutdown)
	})
	s.log.Info().Msg("stopped serving runs")
	return nil
}

// handle runs one request taken from the stream, stores its result and
// acknowledges it. A request that cannot run gets an error result and is
// terminated, never redelivered.
func (s *Server) handle(ctx context.Context, d *workqueue.Delivery) workqueue.Decision {
	m := d.Msg
	rec := &protocol.RunResult{V: protocol.Version, Coordinator: s.cfg.Name, Attempt: d.Attempt}
	if !d.Stored.IsZero() {
		rec.SubmittedAt = d.Stored.UTC()
	}
	sub, subErr := s.subjects.ParseStoredSubmission(m.Subject(), m.Headers().Get(protocol.HeaderMsgID), m.Headers().Get(protocol.HeaderAgent))
	if sub.Client == "" {
		s.limited.Warn().Str("subject", m.Subject()).Msg("terminated a submission whose subject and Nats-Msg-Id name no valid client and submission id")
		return workqueue.Term(termMalformed)
	}
	client, agent, submission := sub.Client, sub.Agent, sub.Submission
	run := protocol.SubmissionRunID(client, submission)
	rec.RunID, rec.Submission, rec.Agent = run, submission, agent
	log := s.log.With().Str(logRun, string(run)).Int(logAttempt, rec.Attempt).Str(logClient, client).
		Str(logAgent, agent).Str(logSubmission, submission).Logger()
	// A submission taken while a stream differs from its expected
	// configuration (by a pull made before the check found it) waits here,
	// kept in progress, until the streams are right again: submissions are
	// stored whatever the streams' state, and only run on good ones.
	if s.fleet.Err() != nil || s.guard.Err() != nil {
		log.Warn().Msg("a stream is not configured as expected: the run waits until it is")
		stop := d.Heartbeat(s.cfg.AckWait / 3)
		err := s.waitStreams(ctx)
		stop()
		if err != nil {
			return workqueue.Nak(0)
		}
	}
	// A retry of a submission past the stream's duplicate window is a new
	// message on the same subject, so the same run: it never runs twice.
	if s.answered(client, run) {
		log.Info().Msg("the run already has a result: its submission is acknowledged, not run again")
		return workqueue.Ack
	}
	req, msgs, err := decodeRunRequest(m.Data(), s.cfg.MaxRequestBytes)
	req.Agent = agent
	if subErr != nil {
		// Its Fleet-Agent header names no agent: refused, not guessed.
		err = subErr
	}
	if err != nil {
		rec.Error = protocol.RunErrorFrom(err)
		log.Warn().Str(logCode, rec.Error.Code).Str(logField, rec.Error.Field).Msg("queued run request refused")
		return s.finish(log, client, rec, true)
	}

	lim := applyLimits(s.cfg.Loop, req)
	rec.Limits, rec.Clamped = &lim.record, lim.clamped

	stop := d.Heartbeat(s.cfg.AckWait / 3)
	defer stop()
	rec.StartedAt = time.Now().UTC()
	note := "start"
	if rec.Attempt > 1 {
		note = "resume"
	}
	octx, ocancel := context.WithTimeout(ctx, storeTimeout)
	j, err := stores.OpenJournal(octx, s.js, s.subjects, run, s.cfg.Name, note)
	ocancel()
	if err != nil {
		// The journal cannot be read or taken: another coordinator (or
		// this one, later) takes the run again from it.
		stop()
		if errors.Is(err, loop.ErrFenced) {
			log.Warn().Msg("another coordinator took the run while this one was opening its journal: leaving it")
			return workqueue.Leave
		}
		log.Warn().Err(err).Msg("could not open the run's journal: the run is released for a retry")
		return workqueue.Nak(time.Second)
	}
	if len(j.Entries()) == 0 {
		// The client names the result's key (<client>.<run>) for
		// "coordinator runs".
		data, _ := encodeJSON(struct {
			Limits  protocol.RunLimits `json:"limits"`
			Clamped []string           `json:"clamped,omitempty"`
			Client  string             `json:"client,omitempty"`
			Agent   string             `json:"agent,omitempty"`
		}{lim.record, lim.clamped, client, agent})
		if err := j.Append(ctx, loop.JournalEntry{Kind: stores.EntryRequest, Data: data}); err != nil {
			stop()
			return s.released(log, j, err)
		}
	} else {
		log.Info().Int("journal_entries", len(j.Entries())).Msg("resuming the run from its journal")
	}
	rctx, cancelRun := context.WithCancelCause(ctx)
	defer cancelRun(nil)
	unregister := s.own(run, cancelRun)
	defer unregister()
	if s.cancelRequested(run) {
		cancelRun(errRunCancelled)
	}
	var lj loop.Journal = j
	if s.cfg.AfterAppend != nil {
		lj = hookedJournal{j, s.cfg.AfterAppend}
	}
	runner, msgs, lim, err := s.runner(ctx, client, run, req, msgs, lj)
	if err != nil {
		stop()
		if errors.Is(err, loop.ErrJournal) || errors.Is(err, loop.ErrFenced) {
			return s.released(log, j, err)
		}
		log.Warn().Err(err).Msg("could not configure the run")
		rec.Error = protocol.RunErrorFrom(err)
		return s.finish(log, client, rec, true)
	}
	rec.Limits, rec.Clamped = &lim.record, lim.clamped
	ev := log.Info().Int("max_rounds", lim.record.MaxRounds).Int("max_tool_calls_per_round", lim.record.MaxToolCallsPerRound).
		Int("max_observation_chars", lim.record.MaxObservationChars).Int64("tool_timeout_ms", lim.record.ToolTimeoutMS)
	if len(lim.clamped) > 0 {
		ev = ev.Strs("clamped", lim.clamped)
	}
	ev.Msg("run started")
	rctx = s.withClientProgress(rctx, client, run)
	// The run's calls go out under its client and class: its share of
	// each tool, and its priority (natsbus share.go, priority.go).
	if forget, err := s.disp.Route(run, admission.Route{Client: client, Class: lim.class}); err == nil {
		defer forget()
	}
	input, forgetInput := s.takeInputs(run, client)
	res, runErr := runner.RunDurable(rctx, loop.Durable{Prompt: req.Prompt, Messages: msgs, RunID: run, Journal: lj, Handoff: s.handoff,
		Park: parkReason, ParkData: parkData(client, agent, submission, m.Data()), Input: input})
	// The loop takes no more input: refuse it (ErrNotRunning) before the
	// result is stored and announced, so that a client that has read the
	// result never has an input accepted.
	forgetInput()
	if errors.Is(runErr, loop.ErrJournal) && errors.Is(runErr, protocol.ErrTooLarge) {
		// Retrying cannot help: a step is larger than a journal entry may be.
		log.Error().Msg("a step of the run is over the journal's entry limit: the run fails")
		rec.FinishedAt = time.Now().UTC()
		rec.Error = &protocol.RunError{Code: protocol.CodeTooLarge,
			Message: fmt.Sprintf("a step of the run (a model response or a round's tools) is over the %d-byte journal entry limit", stores.MaxJournalEntryBytes)}
		return s.finish(log, client, rec, true)
	}
	if errors.Is(runErr, loop.ErrHandedOff) || errors.Is(runErr, loop.ErrJournal) {
		stop()
		return s.released(log, j, runErr)
	}
	rec.FinishedAt = time.Now().UTC()
	switch {
	case res == nil && errors.Is(runErr, loop.ErrInvalidInput):
		rec.Error = &protocol.RunError{Code: protocol.CodeInvalidField, Field: "messages",
			Message: "not a transcript a model API accepts: every tool call must be answered once, right after its assistant message"}
	case res == nil:
		log.Error().Err(runErr).Msg("the run could not start")
		rec.Error = protocol.RunErrorFrom(runErr)
	default:
		if err := fillResult(rec, res); err != nil {
			log.Error().Err(err).Msg("encoding the run's result")
			rec.Error = protocol.RunErrorFrom(err)
		}
		if res.RunID != run {
			log.Warn().Str("loop_run", string(res.RunID)).Msg("the loop ran under another run id")
		}
		if runErr != nil && rec.Error == nil {
			log.Warn().Err(runErr).Msg("the run failed")
			rec.Error = &protocol.RunError{Code: protocol.CodeRunFailed,
				Message: "the model or the tool catalog failed; every tool call is answered; see the coordinator's logs"}
		}
	}
	return s.finish(log, client, rec, false)
}

// invalidAgentRevision logs and counts a revision of agent name that does
// not validate, passed over for an older one. Its text is not logged: it
// may quote what whoever wrote the revision chose.
func (s *Server) invalidAgentRevision(name string, rev uint64, _ error) {
	s.refused(metrics.RefusedAgentRevision)
	s.limited.Warn().Str(logAgent, name).Uint64("revision", rev).
		Msg("a revision of the agent does not validate: its runs start on the newest one that does (coordinator agents show)")
}

// waitStreams waits until every stream the server uses is as expected,
// or ctx ends, or the server hands its runs off.
func (s *Server) waitStreams(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-s.handoff:
			cancel()
		case <-ctx.Done():
		}
	}()
	if err := s.fleet.Wait(ctx); err != nil {
		return err
	}
	return s.guard.Wait(ctx)
}

// released leaves a run that stopped at a step boundary to whoever takes
// it next: handed off (the request goes back at once), fenced (another
// coordinator owns it: nothing is acknowledged), or stopped by a journal
// failure (the request goes back after a pause).
func (s *Server) released(log zerolog.Logger, j *stores.Journal, err error) workqueue.Decision {
	switch {
	case errors.Is(err, loop.ErrHandedOff):
		log.Info().Msg("run handed off at a step boundary: another coordinator resumes it from its journal")
		return workqueue.Nak(0)
	case j.Fenced():
		log.Warn().Msg("another coordinator took the run over: this one stops without acknowledging, publishing or storing anything more")
		return workqueue.Leave
	default:
		log.Warn().Err(err).Msg("could not append to the run's journal: the run is released for a retry")
		return workqueue.Nak(time.Second)
	}
}

// runner returns the loop runner of one run of client, whose run id is
// run, and the transcript it starts from: under the run's agent
// (req.Agent, resolved and pinned in j by s.agents; docs/agents.md) its
// model, scoped catalog, limits, approvals and budget, the request
// lowering the agent's limits as it lowers the operator's; without one
// (the default agent, when the fleet defines none) Config.Model and the
// operator's limits. An agent the fleet does not hold refuses the run, and
// so does the default agent when the fleet holds none and Config.Model is
// nil, and an agent whose definition's clients do not name client.
func (s *Server) runner(ctx context.Context, client string, run protocol.RunID, req protocol.RunRequest, msgs []loop.Message, j loop.Journal) (*loop.Runner, []loop.Message, appliedLimits, error) {
	lim := applyLimits(s.cfg.Loop, req)
	model := s.cfg.Model
	var cat loop.Catalog = s.catalog
	in := msgs
	if in == nil {
		in = []loop.Message{{Role: "user", Content: req.Prompt}}
	}
	base := s.cfg.Loop
	base.Logger = s.cfg.Logger
	p, err := s.agents.Prepare(ctx, req.Agent, j, base, cat, in)
	switch {
	case err == nil && !p.Definition.ServesClient(client):
		return nil, nil, lim, &protocol.Error{Code: protocol.CodeInvalidField, Field: "agent", Msg: "the agent does not serve this client: its definition's clients do not name it"}
	case err == nil:
		lim = applyLimits(p.Config, req)
		model, cat, msgs = p.Model, p.Catalog, p.Messages
		lim.class, _ = protocol.ParseClass(p.Definition.Class)
	case errors.Is(err, agents.ErrNotFound) && (req.Agent == "" || req.Agent == protocol.DefaultAgent) && model != nil:
		// No default agent defined: the coordinator's own.
	case errors.Is(err, agents.ErrNotFound) && (req.Agent == "" || req.Agent == protocol.DefaultAgent):
		return nil, nil, lim, &protocol.Error{Code: protocol.CodeInvalidField, Field: "agent",
			Msg: "the fleet has no default agent, and this coordinator has no model of its own: name an agent"}
	case errors.Is(err, agents.ErrNotFound):
		return nil, nil, lim, &protocol.Error{Code: protocol.CodeInvalidField, Field: "agent", Msg: "the fleet has no agent of that name"}
	case agents.IsConfig(err):
		// A stored definition this coordinator refuses to run (one
		// that sends a key to a host not allowed for it, or needs a
		// variable not set here): the error names the field, never
		// a value.
		return nil, nil, lim, &protocol.Error{Code: protocol.CodeInvalidField, Field: "agent", Msg: "the agent's definition is refused here: " + err.Error()}
	default:
		return nil, nil, lim, err
	}

	if req.Class != "" {
		lim.class = protocol.Class(req.Class)
	}
	lc := lim.loop
	lc.Logger = s.cfg.Logger
	lc.Observer = s.withClientStarts(lc.Observer, client, run)
	// The loop draws the run id first, before any call key.
	var drawn atomic.Bool
	lc.NewID = func() string {
		if drawn.CompareAndSwap(false, true) {
			return string(run)
		}
		return protocol.NewID()
	}
	if lim.toolCap > 0 {
		cat = cappedCatalog{inner: cat, max: lim.toolCap}
	}
	r, err := loop.New(lc, model, cat, s.disp, s.gate)
	return r, msgs, lim, err
}

// answered reports whether run already has its result in the bucket:
// a value under its key that decodes as a result of run, and is not a
// parked run's that an operator resumed (one not resumed waits for an
// operator, whoever submits it again). Any other value
// there (a server's acknowledgement a stream stored, another run's result)
// answers nothing: the run runs, and its result replaces the value (put,
// which logs and counts it).
func (s *Server) answered(client string, run protocol.RunID) bool {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	data, _, err := s.results.Entry(ctx, protocol.RunKey(client, run))
	return err == nil && resultOf(data, run) == nil && !resumedResult(data)
}

// resultOf checks that data is a result of run.
func resultOf(data []byte, run protocol.RunID) error {
	res, err := protocol.DecodeRunResult(data, len(data)+1)
	if err == nil && res.RunID != run {
		err = &protocol.Error{Code: protocol.CodeInvalidField, Field: "run_id", Msg: "another run's"}
	}
	return err
}

// finish stores rec (once per run id, whichever coordinator is first),
// announces it, and acknowledges the request — or terminates it when term
// is set or the result could not be stored: a request that ran, or cannot
// run, is never delivered again.
func (s *Server) finish(log zerolog.Logger, client string, rec *protocol.RunResult, term bool) workqueue.Decision {
	data, created, err := s.store(client, rec)
	switch {
	case err != nil:
		log.Error().Err(err).Msg("could not store the run's result: it is lost")
		return workqueue.Term("result_not_stored")
	case !created:
		log.Warn().Msg("another coordinator stored this run's result first: this one is dropped")
	default:
		if subject, err := s.subjects.ClientRunResult(client, rec.RunID); err == nil {
			if err := s.nc.Publish(subject, data); err != nil {
				log.Warn().Err(err).Msg("could not announce the run's result (it is stored)")
			}
		}
	}
	dec := workqueue.Ack
	if term {
		dec = workqueue.Term(termMalformed)
	}
	ev := log.Info().Int(logBytes, len(data))
	if rec.TerminationReason != "" {
		ev = ev.Str("termination", rec.TerminationReason)
	}
	if rec.Error != nil {
		ev = ev.Str(logCode, rec.Error.Code)
	}
	if rec.TranscriptOmitted {
		ev = ev.Bool("transcript_omitted", true)
	}
	ev.Msg("run finished")
	return dec
}

// put stores data, the result of run, under its key unless a result of
// run is there already (created is then false). A value there that is not
// a result of run is logged, counted and replaced; a write between the
// read and the replacement fails, for store to retry.
func (s *Server) put(ctx context.Context, client string, run protocol.RunID, data []byte) (created bool, err error) {
	key := protocol.RunKey(client, run)
	created, err = s.results.Create(ctx, key, data)
	if err != nil || created {
		return created, err
	}
	old, rev, err := s.results.Entry(ctx, key)
	if err != nil {
		return false, err
	}
	bad := resultOf(old, run)
	if bad == nil && parkedResult(old) {
		// The run was parked, and resumed: its result replaces that one.
		if err := s.results.Replace(ctx, key, data, rev); err != nil {
			return false, fmt.Errorf("replacing the run's parked result: %w", err)
		}
		return true, nil
	}
	if bad == nil {
		return false, nil
	}
	if err := s.results.Replace(ctx, key, data, rev); err != nil {
		return false, fmt.Errorf("replacing a value that is not a result of the run: %w", err)
	}
	s.refused(metrics.RefusedRunResult)
	code, field := protoError(bad)
	s.log.Warn().Str(logRun, string(run)).Str(logClient, client).Str(logCode, code).Str(logField, field).
		Msg("the run's key held a value that is not a result of the run: the run's result replaced it")
	return true, nil
}

// store writes rec under its key (the client's and run id) unless a
// result is already there, retrying transient failures for up to
// storeTimeout.
func (s *Server) store(client string, rec *protocol.RunResult) (data []byte, created bool, err error) {
	data, err = encodeBounded(rec, s.cfg.MaxResultBytes)
	if err != nil {
		return nil, false, err
	}
	deadline := time.Now().Add(storeTimeout)
	for attempt := 1; ; attempt++ {
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		created, err = s.put(ctx, client, rec.RunID, data)
		cancel()
		switch {
		case err == nil:
			return data, created, nil
		case time.Now().After(deadline):
			return data, false, err
		}
		s.limited.Warn().Err(err).Str(logRun, string(rec.RunID)).Int(logAttempt, attempt).Msg("storing a run's result failed; retrying")
		time.Sleep(min(time.Duration(attempt)*100*time.Millisecond, 2*time.Second))
	}
}
