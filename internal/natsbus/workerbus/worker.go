package workerbus

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"golang.org/x/sync/semaphore"

	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/internal/natsbus/admission"
	"github.com/toolfleet/toolfleet/internal/natsbus/stores"
	"github.com/toolfleet/toolfleet/internal/natsbus/workqueue"
	"github.com/toolfleet/toolfleet/pkg/harness"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// Timeouts of the worker's own NATS operations.
const (
	// ackTimeout bounds the claim of a non-idempotent call.
	ackTimeout = 5 * time.Second
	// publishTimeout bounds a first round of attempts to publish one
	// result. If the server still does not answer, the result is retried
	// until the coordinator's wait for it ends (the call's
	// protocol.CallDeadline: its deadline plus the grace it carries),
	// unless the worker is cancelling its calls to stop, so it survives an
	// outage for as long as the coordinator waits for it.
	publishTimeout = 5 * time.Second
	// consumerTimeout bounds one attempt to create or update a consumer.
	consumerTimeout = 2 * time.Second
	// maxCancelBytes bounds a decoded cancel message.
	maxCancelBytes = 4 << 10
)

// Causes of a call context that ended before its deadline.
var (
	errCancelRequested = errors.New("natsbus: the coordinator cancelled the call")
	errShutdown        = errors.New("natsbus: the worker is shutting down")
)

// Worker serves the tools of one harness from the calls stream: it pulls
// calls from each tool's shared consumer, runs them and publishes their
// results. See the package documentation for its invariants.
type Worker struct {
	nc       *nats.Conn
	js       jetstream.JetStream
	subjects protocol.Subjects
	h        *harness.Harness
	cfg      WorkerConfig
	log      zerolog.Logger
	limited  zerolog.Logger
	tools    []*toolConsumer
	limitsKV jetstream.KeyValue // the fleet's rate limits (ratelimit.go); nil without the bucket
	sem      *semaphore.Weighted
	settling *semaphore.Weighted // calls storing their result after giving back their slot
	started  atomic.Bool
	inflight sync.WaitGroup

	// toolByName indexes tools; read-only after NewWorker.
	toolByName map[protocol.ToolName]*toolConsumer

	// calls is the calls stream, looked up by Run before it serves.
	calls jetstream.Stream
	// routes says where each tool's execution and start records go
	// (records.go).
	routes *stores.RecordRoutes

	mu      sync.Mutex
	running map[callRef]runningCall // cancels of each call running here
	nextID  uint64
	active  map[callRef]uint64 // stream sequence of idempotent calls running here

	// toResults is the option every result's publish carries: stored in
	// the results stream only. Made once: the stream's name is built.
	toResults jetstream.PublishOpt

	// resultLanes coalesces results of calls whose coordinator reads
	// batches; resultsAlone counts the results published in their own
	// message whose first attempt has not ended.
	resultLanes  resultLanes
	resultsAlone atomic.Int64

	approvalsMu sync.Mutex
	approvals   jetstream.Stream // the approvals stream, looked up when first needed
}

// toolConsumer is one tool this worker serves and its shared consumer.
type toolConsumer struct {
	name protocol.ToolName
	// spanName names the span of each delivery of its calls.
	spanName   string
	idempotent bool
	subject    string
	spec       protocol.ToolSpec
	meter      *toolMeter
	config     jetstream.ConsumerConfig
	queue      *workqueue.WorkQueue
	limiter    *admission.RateLimiter // ratelimit.go
	// batchConfig and batch are the consumer and queue of the tool's
	// batch calls, which gate orders after the interactive ones
	// (priority.go).
	batchConfig jetstream.ConsumerConfig
	batch       *workqueue.WorkQueue
	gate        *admission.ClassGate
}

// NewWorker returns a worker for every tool of h. It validates cfg and
// starts nothing: see Run.
func NewWorker(nc *nats.Conn, js jetstream.JetStream, subjects protocol.Subjects, h *harness.Harness, cfg WorkerConfig) (*Worker, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if h == nil {
		return nil, natsbus.ConfigErr("harness", "required")
	}
	specs := h.Specs()
	if len(specs) == 0 {
		return nil, natsbus.ConfigErr("tools", "the harness serves no tool")
	}
	w := &Worker{
		nc: nc, js: js, subjects: subjects, h: h, cfg: cfg,
		log:     cfg.Logger.With().Str(natsbus.LogWorker, cfg.Name).Logger(),
		sem:     semaphore.NewWeighted(int64(cfg.Concurrency)),
		running: make(map[callRef]runningCall),
		active:  make(map[callRef]uint64),
		routes:  stores.NewRecordRoutes(js, subjects),

		toResults: jetstream.WithExpectStream(subjects.ResultsStream()),
	}
	// As many calls again may be storing their result out of their slots
	// (Delivery.FreeSlot): a pull is not held back by PubAcks.
	w.settling = semaphore.NewWeighted(int64(cfg.Concurrency))
	w.limited = natsbus.Sampled(w.log)
	for _, spec := range specs {
		interactive, batch, err := classConsumerConfigs(subjects, spec.Name, cfg)
		if err != nil {
			return nil, fmt.Errorf("natsbus: tool %q: %w", spec.Name, err)
		}
		subject := natsbus.ToolCallsSubject(subjects, spec.Name)
		w.tools = append(w.tools, &toolConsumer{
			name:        spec.Name,
			spanName:    callSpanName(spec.Name),
			idempotent:  spec.Idempotent,
			subject:     subject,
			spec:        spec,
			meter:       newToolMeter(subject),
			config:      interactive,
			batchConfig: batch,
			gate:        admission.NewClassGate(),
			limiter:     admission.NewRateLimiter(spec.Name, h.RateLimit(spec.Name)),
		})
	}
	w.toolByName = make(map[protocol.ToolName]*toolConsumer, len(w.tools))
	for _, tc := range w.tools {
		w.toolByName[tc.name] = tc
		tc.queue = workqueue.NewWorkQueue(workqueue.WorkQueueConfig{
			Slots: w.sem, Settling: w.settling, MaxFetchBatch: cfg.MaxFetchBatch, PollWait: cfg.PollWait, InFlight: &w.inflight, JS: js,
			Logger: w.log.With().Str(natsbus.LogTool, string(tc.name)).Logger(), Noun: "calls",
			Ensure: func(ctx context.Context) (jetstream.Consumer, error) { return w.ensureConsumer(ctx, tc.config) },
			// Streams that differ from the expected configuration: take no call.
			Wait:   cfg.Guard.Wait,
			Pulled: tc.gate.InteractivePulled,
		}, func(ctx context.Context, d *workqueue.Delivery) workqueue.Decision { return w.process(ctx, tc, d) })
		tc.batch = w.batchQueue(tc)
	}
	return w, nil
}

// ToolStats returns the counters of one of the worker's tools, and false
// when the worker does not serve it.
func (w *Worker) ToolStats(tool protocol.ToolName) (ToolStats, bool) {
	tc := w.toolByName[tool]
	if tc == nil {
		return ToolStats{}, false
	}
	return tc.meter.stats(), true
}

// Pulls reports the pulls of calls the worker made, over every tool, and
// the calls they took.
func (w *Worker) Pulls() (pulls, calls int64) {
	for _, tc := range w.tools {
		for _, q := range []*workqueue.WorkQueue{tc.queue, tc.batch} {
			p, n := q.Pulls()
			pulls += p
			calls += n
		}
	}
	return pulls, calls
}

// Run creates or updates each tool's consumer and serves calls until ctx
// ends. Then it stops pulling, waits up to ShutdownGrace for the calls in
// flight, cancels those still running (they answer cancelled) and returns
// nil once every call has been answered; if ctx ends before the consumers
// are ready, it returns nil at once. Run may be called once.
func (w *Worker) Run(ctx context.Context) error {
	if !w.started.CompareAndSwap(false, true) {
		return errors.New("natsbus: Worker.Run called twice")
	}
	// A stop before the worker serves is no failure: it ran no call.
	if err := w.lookUpCallsStream(ctx); err != nil {
		return stoppedEarly(ctx, err)
	}
	for _, tc := range w.tools {
		if err := tc.queue.EnsureRetrying(ctx); err != nil {
			return stoppedEarly(ctx, err)
		}
		if err := tc.batch.EnsureRetrying(ctx); err != nil {
			return stoppedEarly(ctx, err)
		}
	}
	w.openLimits(ctx)
	sub, err := w.nc.Subscribe(w.subjects.Cancels(), w.onCancel)
	if err != nil {
		return fmt.Errorf("natsbus: subscribing to cancels: %w", err)
	}
	defer sub.Unsubscribe()

	// Calls outlive ctx by up to ShutdownGrace.
	execCtx, cancelExec := context.WithCancelCause(context.WithoutCancel(ctx))
	defer cancelExec(nil)

	var pullers sync.WaitGroup
	for _, tc := range w.tools {
		pullers.Go(func() { tc.queue.Run(ctx, execCtx) })
		pullers.Go(func() { tc.batch.Run(ctx, execCtx) })
	}
	pullers.Go(func() { w.refreshLimits(ctx) })
	svc := w.startDiscovery()
	w.log.Info().Int("tools", len(w.tools)).Int("concurrency", w.cfg.Concurrency).Msg("worker started")
	<-ctx.Done()
	if svc != nil {
		svc.Stop() // leave discovery first: coordinators stop counting on this worker
	}
	pullers.Wait()

	workqueue.Drain(&w.inflight, w.cfg.ShutdownGrace, func() {
		w.log.Warn().Dur("grace", w.cfg.ShutdownGrace).Msg("shutdown grace over: cancelling the calls still running")
		cancelExec(errShutdown)
	})
	w.log.Info().Msg("worker stopped")
	return nil
}

// stoppedEarly is err, or nil when ctx ended.
func stoppedEarly(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// lookUpCallsStream finds the calls stream, retrying while the failure is
// transient and ctx lasts.
func (w *Worker) lookUpCallsStream(ctx context.Context) error {
	for failures := 1; ; failures++ {
		cctx, cancel := context.WithTimeout(ctx, consumerTimeout)
		s, err := w.js.Stream(cctx, w.subjects.CallsStream())
		cancel()
		if err == nil {
			w.calls = s
			return nil
		}
		if ctx.Err() != nil || !natsbus.Transient(err) {
			return fmt.Errorf("natsbus: stream %s: %w", w.subjects.CallsStream(), err)
		}
		w.limited.Warn().Err(err).Str(natsbus.LogStream, w.subjects.CallsStream()).Int("failures", failures).Msg("looking up the calls stream failed; retrying")
		if !natsbus.SleepCtx(ctx, natsbus.Backoff(failures)) {
			return ctx.Err()
		}
	}
}

// ensureConsumer makes one of a tool's consumers ready, once: it looks the
// consumer up and keeps it when it already has config's settings, and
// creates or updates it otherwise. A worker in an account of its own
// (deploy/nats-server.conf: DEPLOY, EDGE) may neither create nor change a
// consumer, whose deliver subject could name any subject of the fleet's
// account: it serves the consumer "coordinator provision --tool-consumer"
// made for its tool, with that consumer's settings, as long as it takes
// exactly config's calls. A push consumer is never served, nor changed.
func (w *Worker) ensureConsumer(ctx context.Context, config jetstream.ConsumerConfig) (jetstream.Consumer, error) {
	stream := w.subjects.CallsStream()
	lctx, cancel := context.WithTimeout(ctx, consumerTimeout)
	defer cancel()
	found, err := w.js.Consumer(lctx, stream, config.Durable)
	switch {
	case errors.Is(err, jetstream.ErrNotPullConsumer), err == nil && found.CachedInfo().Config.DeliverSubject != "":
		return nil, fmt.Errorf("natsbus: consumer %s on %s: %w", config.Durable, stream, natsbus.ErrForeignConsumer)
	case err == nil && sameCalls(found.CachedInfo().Config, config) && sameSettings(found.CachedInfo().Config, config):
		return found, nil
	case err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound):
		return nil, fmt.Errorf("natsbus: consumer %s on %s: %w", config.Durable, stream, err)
	}
	cctx, cancel := context.WithTimeout(ctx, consumerTimeout)
	defer cancel()
	cons, cerr := w.js.CreateOrUpdateConsumer(cctx, stream, config)
	switch {
	case cerr == nil:
		return cons, nil
	case err == nil && sameCalls(found.CachedInfo().Config, config):
		// The heartbeats of a running call keep it only within the ack
		// wait of the consumer it came from.
		if got := found.CachedInfo().Config.AckWait; got != config.AckWait {
			return nil, fmt.Errorf("natsbus: consumer %s on %s waits %v for an ack, this worker's AckWait is %v: %w",
				config.Durable, stream, got, config.AckWait, natsbus.ErrProvisionedAckWait)
		}
		w.log.Info().Str(natsbus.LogStream, stream).Str(natsbus.LogConsumer, config.Durable).
			Msg("serving the consumer with its provisioned settings: this worker may not change them")
		return found, nil
	}
	return nil, fmt.Errorf("natsbus: consumer %s on %s: %w", config.Durable, stream, cerr)
}

// sameCalls reports whether got takes exactly want's calls, acknowledged
// as want's are.
func sameCalls(got, want jetstream.ConsumerConfig) bool {
	return got.FilterSubject == want.FilterSubject && len(got.FilterSubjects) == 0 && got.AckPolicy == want.AckPolicy
}

// sameSettings reports whether got has every other setting a worker gives
// its consumer in want.
func sameSettings(got, want jetstream.ConsumerConfig) bool {
	return got.Description == want.Description && got.DeliverPolicy == want.DeliverPolicy &&
		got.AckWait == want.AckWait && got.MaxDeliver == want.MaxDeliver && got.MaxAckPending == want.MaxAckPending
}

func (w *Worker) onCancel(m *nats.Msg) {
	c, err := protocol.DecodeCancel(m.Data, maxCancelBytes)
	if err == nil {
		if want, _ := w.subjects.Cancel(c.RunID, c.CallKey); m.Subject != want {
			err = natsbus.CodedError("subject_mismatch")
		}
	}
	if err != nil {
		w.limited.Warn().Str(natsbus.LogSubject, m.Subject).Str(natsbus.LogCode, natsbus.ErrorCode(err)).Msg("ignored a malformed cancel")
		return
	}
	w.mu.Lock()
	n := w.running[callRefOf(c.RunID, c.CallKey)].cancel(errCancelRequested)
	w.mu.Unlock()
	if n > 0 {
		w.log.Info().Str(natsbus.LogRun, string(c.RunID)).Str(natsbus.LogCallKey, string(c.CallKey)).Msg("cancel requested")
	}
}

// register makes cancel reachable by cancel messages for the call, until
// unregister is given the registration it returns.
func (w *Worker) register(run protocol.RunID, key protocol.CallKey, cancel context.CancelCauseFunc) registration {
	reg := registration{ref: callRefOf(run, key)}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.nextID++
	reg.id = w.nextID
	rc := w.running[reg.ref]
	if rc.first == nil {
		rc.firstID, rc.first = reg.id, cancel
	} else {
		if rc.more == nil {
			rc.more = make(map[uint64]context.CancelCauseFunc, 1)
		}
		rc.more[reg.id] = cancel
	}
	w.running[reg.ref] = rc
	return reg
}

// unregister removes the cancel of reg.
func (w *Worker) unregister(reg registration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	rc, ok := w.running[reg.ref]
	if !ok {
		return
	}
	if rc.first != nil && rc.firstID == reg.id {
		rc.firstID, rc.first = 0, nil
	} else {
		delete(rc.more, reg.id)
	}
	if rc.first == nil && len(rc.more) == 0 {
		delete(w.running, reg.ref)
		return
	}
	w.running[reg.ref] = rc
}

// registration is one delivery's cancel, registered for its call.
type registration struct {
	ref callRef
	id  uint64
}

// runningCall holds the cancels of one call's deliveries running here, by
// registration id. Nearly always one delivery runs, kept without a map of
// its own; more holds the others when deliveries of the call run here at
// once. first is nil when only more holds any.
type runningCall struct {
	firstID uint64
	first   context.CancelCauseFunc
	more    map[uint64]context.CancelCauseFunc
}

// cancel cancels every delivery of the call with cause and returns how
// many there were.
func (rc runningCall) cancel(cause error) int {
	n := 0
	if rc.first != nil {
		rc.first(cause)
		n++
	}
	for _, cancel := range rc.more {
		cancel(cause)
		n++
	}
	return n
}

// begin marks an idempotent call as running here, unless this worker
// already runs the same call from the same stream message (seq); then it
// returns false. seq 0 (unknown) never matches.
func (w *Worker) begin(run protocol.RunID, key protocol.CallKey, seq uint64) bool {
	ref := callRefOf(run, key)
	w.mu.Lock()
	defer w.mu.Unlock()
	if cur, ok := w.active[ref]; ok && seq != 0 && cur == seq {
		return false
	}
	w.active[ref] = seq
	return true
}

// end forgets an idempotent call begun here from message seq.
func (w *Worker) end(run protocol.RunID, key protocol.CallKey, seq uint64) {
	ref := callRefOf(run, key)
	w.mu.Lock()
	defer w.mu.Unlock()
	if cur, ok := w.active[ref]; ok && cur == seq {
		delete(w.active, ref)
	}
}

// callRef names a call of a run in the worker's maps, with no string built
// per call.
type callRef struct {
	run protocol.RunID
	key protocol.CallKey
}

func callRefOf(run protocol.RunID, key protocol.CallKey) callRef { return callRef{run, key} }

// toolConsumerConfig is the durable consumer every worker serving tool
// shares, with cfg's defaults applied.
func toolConsumerConfig(durable string, tool protocol.ToolName, subject string, cfg WorkerConfig) jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:       durable,
		Description:   "toolfleet workers serving " + string(tool),
		FilterSubject: subject,
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       cfg.AckWait,
		MaxDeliver:    cfg.MaxDeliver,
		MaxAckPending: cfg.ToolMaxAckPending,
	}
}
