package dispatch

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/trace"

	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/internal/natsbus/admission"
	"github.com/toolfleet/toolfleet/internal/natsbus/streammsg"
	"github.com/toolfleet/toolfleet/internal/tracing"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// DefaultInboxSize is how many events an [Inbox] buffers before it drops.
const DefaultInboxSize = 1024

// defaultOpTimeout bounds a NATS operation whose context has no deadline.
const defaultOpTimeout = 5 * time.Second

// resultsConsumerInactive is how long the server keeps a results consumer
// once nobody reads it (a coordinator that died); Dispatcher.Close and
// the end of a catch-up read delete theirs at once.
const resultsConsumerInactive = time.Minute

// deleteConsumerTimeout bounds the deletion of a results consumer.
const deleteConsumerTimeout = time.Second

// DispatcherConfig configures a [Dispatcher]. The zero value means the
// defaults.
type DispatcherConfig struct {
	// Logger receives refusals and drops. The zero value discards.
	Logger zerolog.Logger
	// MaxMessageBytes bounds a published call and a decoded result or
	// progress notice. Default: protocol.DefaultMaxMessageBytes.
	MaxMessageBytes int
	// InboxSize is how many events each run's inbox buffers; when the loop
	// falls that far behind, further events are dropped and counted.
	// Default: 1024.
	InboxSize int
	// Guard, when set, refuses to publish a call while the fleet's
	// streams differ from their expected configuration. Default: nil,
	// no check.
	Guard *natsbus.StreamGuard
	// ShareObserver, when set, is told about calls held for their
	// client's share of a tool (share.go). Default: nil.
	ShareObserver admission.ShareObserver
	// OnForeignProgress, when set, is called for each progress report
	// dropped because it names another tool than its call's (only a
	// call's own tool reports its progress). Default: nil.
	OnForeignProgress func()
}

// Dispatcher publishes a coordinator's calls into the calls stream and
// brings results and progress notices back. It implements
// [loop.Dispatcher] and is safe for concurrent use.
type Dispatcher struct {
	nc       *nats.Conn
	js       jetstream.JetStream
	subjects protocol.Subjects
	cfg      DispatcherConfig
	log      zerolog.Logger
	garbage  zerolog.Logger
	// inboxes are the open inboxes by run, so that Publish tells each the
	// tool of every call it publishes and results hands each its run's
	// results.
	inboxes sync.Map // protocol.RunID -> *Inbox
	results *resultsReader
	// batchHeader is every call's protocol.HeaderResultBatch.
	batchHeader string

	callsMu sync.Mutex
	calls   jetstream.Stream // the calls stream, once a withdrawal looked it up

	// routes are the runs' clients and classes, shares the calls held
	// for their client's share (share.go).
	routes sync.Map // protocol.RunID -> Route
	shares *shares
}

var _ loop.Dispatcher = (*Dispatcher)(nil)

// NewDispatcher returns a Dispatcher for the fleet named by subjects.
func NewDispatcher(nc *nats.Conn, js jetstream.JetStream, subjects protocol.Subjects, cfg DispatcherConfig) *Dispatcher {
	if cfg.MaxMessageBytes <= 0 {
		cfg.MaxMessageBytes = protocol.DefaultMaxMessageBytes
	}
	if cfg.InboxSize <= 0 {
		cfg.InboxSize = DefaultInboxSize
	}
	d := &Dispatcher{
		nc: nc, js: js, subjects: subjects, cfg: cfg,
		log:     cfg.Logger,
		garbage: natsbus.Sampled(cfg.Logger),

		batchHeader: protocol.ResultBatchHeader(cfg.MaxMessageBytes),
	}
	d.shares = newShares(d)
	d.results = &resultsReader{
		js: js, stream: subjects.ResultsStream(),
		root:    strings.TrimSuffix(subjects.Results(), ">"),
		inboxes: &d.inboxes,
		log:     d.garbage,
	}
	return d
}

// Close stops reading results and deletes the Dispatcher's results
// consumer; Open fails after it. Open inboxes receive no more results.
// It is idempotent.
func (d *Dispatcher) Close() error {
	d.results.stop()
	d.shares.close()
	return nil
}

// Open starts receiving run's results and progress notices and returns the
// inbox their events arrive in.
//
// Results are read from the results stream by the Dispatcher's one
// ordered consumer of every result subject (created by the first Open),
// which hands each to the inbox of its run: a result stored after Open
// returns — also while this connection was down (a partition, a server
// restart) — is delivered once the connection is back, so a worker's
// answer is never lost to a reconnect. Results stored before Open are
// read only by [Inbox.CaughtUp], which a resumed run calls. Progress
// notices travel on core NATS and are subscribed to before Open returns;
// one sent while the connection is down is lost (see the package
// documentation).
func (d *Dispatcher) Open(ctx context.Context, run protocol.RunID) (loop.Inbox, error) {
	resultSubj, err := d.subjects.ResultsOf(run)
	if err != nil {
		return nil, fmt.Errorf("natsbus: run id: %w", err)
	}
	progressSubj, err := d.subjects.Started(run)
	if err != nil {
		return nil, fmt.Errorf("natsbus: run id: %w", err)
	}
	in := &Inbox{
		run:      run,
		events:   make(chan loop.Event, d.cfg.InboxSize),
		limit:    d.cfg.MaxMessageBytes,
		log:      d.log.With().Str(natsbus.LogRun, string(run)).Logger(),
		garbage:  d.garbage,
		prefix:   strings.TrimSuffix(resultSubj, ">"),
		progress: progressSubj,
	}
	in.js, in.reader = d.js, d.results
	in.resultSubject, in.resultsStream = resultSubj, d.subjects.ResultsStream()
	in.forget = func() { d.inboxes.CompareAndDelete(run, in) }
	in.callsStream = d.callsStream
	in.subjects = d.subjects
	sub, err := d.nc.Subscribe(progressSubj, in.onProgress)
	if err != nil {
		in.Close()
		return nil, fmt.Errorf("natsbus: subscribing to %s: %w", progressSubj, err)
	}
	in.subs = append(in.subs, sub)
	if err := in.followProgress(ctx, d.nc, d.subjects, d.cfg.OnForeignProgress); err != nil {
		in.Close()
		return nil, err
	}
	fctx, cancel := withDefaultTimeout(ctx)
	defer cancel()
	if in.openSeq, err = d.results.register(fctx, in); err != nil {
		in.Close()
		return nil, fmt.Errorf("natsbus: reading the results of run %s: %w", run, err)
	}
	if err := d.nc.FlushWithContext(fctx); err != nil {
		in.Close()
		return nil, fmt.Errorf("natsbus: registering the inbox of run %s: %w", run, err)
	}
	return in, nil
}

// Publish stores call in the calls stream on its tool's subject, with the
// headers workers need: dedup id, reply subject, deadline and version. A
// call published twice within the duplicate window is stored once.
func (d *Dispatcher) Publish(ctx context.Context, o loop.Outgoing) error {
	msg, err := d.callMsg(ctx, &o)
	if err != nil {
		return err
	}
	pctx, cancel := withDefaultTimeout(ctx)
	defer cancel()
	ack, held, err := d.publishOrHold(pctx, msg, o)
	if err != nil {
		return fmt.Errorf("natsbus: publishing call to %s: %w", msg.Subject, err)
	}
	if !held {
		d.stored(o, ack)
	}
	return nil
}

// stored tells the inbox of call's run where the calls stream stored it,
// for [Inbox.Withdraw], when the call is one to withdraw at its deadline:
// published [loop.Outgoing.AtMostOnce].
func (d *Dispatcher) stored(o loop.Outgoing, ack *jetstream.PubAck) {
	if !o.AtMostOnce {
		return
	}
	d.storedSeq(o.Call, ack)
}

// storedSeq tells the inbox of call's run where the calls stream stored it.
func (d *Dispatcher) storedSeq(call protocol.Call, ack *jetstream.PubAck) {
	if ack == nil || ack.Sequence == 0 {
		return
	}
	if v, ok := d.inboxes.Load(call.RunID); ok {
		v.(*Inbox).published(call, ack.Sequence)
	}
}

var _ loop.BatchDispatcher = (*Dispatcher)(nil)

// PublishBatch implements [loop.BatchDispatcher]: it writes every call
// asynchronously, then waits for their acknowledgements together. A call
// whose acknowledgement is an error that may pass, or that is not in
// within one publish attempt's time, is published again with the same
// Nats-Msg-Id (stored at most once) as [Dispatcher.Publish] does, until
// ctx ends.
func (d *Dispatcher) PublishBatch(ctx context.Context, calls []loop.Outgoing) []error {
	errs := make([]error, len(calls))
	msgs := make([]*nats.Msg, len(calls))
	futures := make([]jetstream.PubAckFuture, len(calls))
	for i := range calls {
		o := &calls[i]
		msg, err := d.callMsg(ctx, o)
		if err != nil {
			errs[i] = err
			continue
		}
		if d.shares.waiting(msg.Subject) {
			d.shares.hold(msg, *o)
			continue
		}
		msgs[i] = msg
		// A call the client cannot queue now is published again below.
		futures[i], _ = d.js.PublishMsgAsync(msg)
	}
	pctx, cancel := withDefaultTimeout(ctx)
	defer cancel()
	attempt := time.NewTimer(natsbus.PublishAttemptTimeout)
	defer attempt.Stop()
	waiting := true // for acknowledgements, until the attempt's time is up
	for i, f := range futures {
		if msgs[i] == nil {
			continue
		}
		if f != nil && waiting {
			select {
			case ack := <-f.Ok():
				d.stored(calls[i], ack)
				continue
			case err := <-f.Err():
				if admission.OverShare(err) {
					d.shares.hold(msgs[i], calls[i])
					continue
				}
				if !natsbus.Transient(err) {
					errs[i] = fmt.Errorf("natsbus: publishing call to %s: %w", msgs[i].Subject, err)
					continue
				}
			case <-attempt.C:
				waiting = false
			case <-pctx.Done():
				waiting = false
			}
		} else if f != nil {
			select {
			case ack := <-f.Ok():
				d.stored(calls[i], ack)
				continue
			default:
			}
		}
		ack, held, err := d.publishOrHold(pctx, msgs[i], calls[i])
		if err != nil {
			errs[i] = fmt.Errorf("natsbus: publishing call to %s: %w", msgs[i].Subject, err)
			continue
		}
		if !held {
			d.stored(calls[i], ack)
		}
	}
	return errs
}

// callMsg checks o's call and builds its message: the call on its tool's
// subject with the headers workers need. o is only read.
func (d *Dispatcher) callMsg(ctx context.Context, o *loop.Outgoing) (*nats.Msg, error) {
	call := &o.Call
	if err := call.Validate(); err != nil {
		return nil, fmt.Errorf("natsbus: call: %w", err)
	}
	if err := d.cfg.Guard.Err(); err != nil {
		return nil, err
	}
	var in *Inbox
	if v, ok := d.inboxes.Load(call.RunID); ok {
		in = v.(*Inbox)
	}
	subject, replyTo, err := d.callSubjects(in, call)
	if err != nil {
		return nil, fmt.Errorf("natsbus: call: %w", err)
	}
	if in != nil {
		in.Expect(call.CallKey, call.Tool)
	}
	data, err := protocol.Encode(call)
	if err != nil {
		return nil, fmt.Errorf("natsbus: encoding call: %w", err)
	}
	if len(data) > d.cfg.MaxMessageBytes {
		return nil, fmt.Errorf("natsbus: call is %d bytes, limit %d: %w", len(data), d.cfg.MaxMessageBytes, protocol.ErrTooLarge)
	}
	h := callHeader{h: make(nats.Header)}
	h.set(protocol.HeaderMsgID, protocol.CallMsgID(call.CallKey))
	h.set(protocol.HeaderReplyTo, replyTo)
	h.set(protocol.HeaderDeadline, call.CallDeadline().Header())
	h.set(protocol.HeaderVersion, versionHeader)
	if !o.StartedNotices {
		// The run's inbox withdraws an unclaimed non-idempotent call at
		// its deadline, which tells whether it started: no notice needed.
		h.set(protocol.HeaderStartedNotice, protocol.StartedNoticeNone)
	}
	if o.AtMostOnce {
		h.set(protocol.HeaderAtMostOnce, "1")
	}
	// This Dispatcher's inboxes read a worker's batch of results, of up
	// to the size they decode.
	h.set(protocol.HeaderResultBatch, d.batchHeader)
	msg := &nats.Msg{Subject: subject, Data: data, Header: h.h}
	if o.Trace.IsValid() {
		ctx = trace.ContextWithSpanContext(ctx, o.Trace)
	}
	tracing.Inject(ctx, msg.Header)
	return msg, nil
}

// versionHeader is every call's protocol.HeaderVersion.
var versionHeader = strconv.Itoa(protocol.Version)

// callHeader builds a call's headers with one allocation for all their
// values. The keys are protocol's constants, spelled as workers read
// them (NATS headers are case-sensitive, and nats.Header.Set keeps a key
// as given).
type callHeader struct {
	h    nats.Header
	vals [7]string // the most callMsg sets
	n    int
}

// set sets key to value. Each value is a slice of one element whose
// capacity ends at that element, so that an Add to one header (a trace
// propagator's, say) copies it rather than writes over the next.
func (c *callHeader) set(key, value string) {
	if c.n == len(c.vals) { // a header more than callMsg sets today
		c.h[key] = []string{value}
		return
	}
	c.vals[c.n] = value
	c.h[key] = c.vals[c.n : c.n+1 : c.n+1]
	c.n++
}

// Cancel asks whichever worker runs the call to stop it (core NATS, best
// effort).
func (d *Dispatcher) Cancel(ctx context.Context, c protocol.Cancel) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if c.V == 0 {
		c.V = protocol.Version
	}
	if err := c.Validate(); err != nil {
		return fmt.Errorf("natsbus: cancel: %w", err)
	}
	subject, err := d.subjects.Cancel(c.RunID, c.CallKey)
	if err != nil {
		return fmt.Errorf("natsbus: cancel: %w", err)
	}
	data, err := protocol.Encode(&c)
	if err != nil {
		return fmt.Errorf("natsbus: encoding cancel: %w", err)
	}
	if err := d.nc.Publish(subject, data); err != nil {
		return fmt.Errorf("natsbus: publishing cancel: %w", err)
	}
	return nil
}

// Inbox receives one run's results and progress notices. Its Events
// channel is bounded: when the reader falls behind, events are dropped and
// counted rather than blocking NATS. Garbage (undecodable messages or
// messages of another run) is dropped, counted and logged by subject and
// error code.
type Inbox struct {
	run     protocol.RunID
	limit   int
	log     zerolog.Logger
	garbage zerolog.Logger
	subs    []*nats.Subscription
	// progressSub is the run's progress subscription, drained (not just
	// unsubscribed) on Close: a call's last report, published before its
	// result, is passed on even when the run ends first.
	progressSub *nats.Subscription
	js          jetstream.JetStream
	reader      *resultsReader // the Dispatcher's, which hands the run's results on
	// openSeq is the last stream sequence the reader handed on before it
	// registered the inbox: later results come from it, earlier ones
	// only from CaughtUp.
	openSeq uint64
	// resultSubject and resultsStream are where the run's results are.
	resultSubject, resultsStream string
	closeOnce                    sync.Once
	// prefix is the run's result subject without the tool token.
	prefix string
	// progress is the run's progress subject. A push consumer delivers a
	// stream's messages to any subject with the server's authority, but
	// under their own subject: a notice is taken only on this one.
	progress string
	// tools are the tools of the calls published for the run, by key.
	tools callTools
	// lastSubjects are the subjects of the run's calls built last
	// (Dispatcher.callSubjects).
	lastSubjects lastSubjects
	// seqs are where the calls stream stored the run's calls, by key, as
	// their PubAcks said, and their deadlines: what Withdraw takes back.
	seqs sync.Map // protocol.CallKey -> publishedCall
	// callsStream looks up the calls stream, for Withdraw.
	callsStream func(context.Context) (jetstream.Stream, error)
	// subjects names the start records Withdraw writes.
	subjects protocol.Subjects
	forget   func()

	mu     sync.Mutex // serialises sends with Close
	closed bool
	// Catching up (CaughtUp): the channel closed once the results stored
	// before Open are delivered, and the read of them while it runs.
	caught    chan struct{}
	catchUp   jetstream.ConsumeContext
	catchCons jetstream.Consumer
	events    chan loop.Event
	dropped   atomic.Int64
}

var (
	_ loop.CatchUpInbox = (*Inbox)(nil)
	_ loop.ExpectInbox  = (*Inbox)(nil)
)

// Events delivers the run's events until Close.
func (in *Inbox) Events() <-chan loop.Event { return in.events }

// Dropped counts events lost because the channel was full.
func (in *Inbox) Dropped() int64 { return in.dropped.Load() }

// Close stops the run's results reaching the inbox (and a catch-up read)
// and closes the Events channel. It is idempotent.
func (in *Inbox) Close() error {
	if in.forget != nil {
		in.forget()
	}
	in.mu.Lock()
	if !in.closed {
		in.closed = true
		close(in.events)
	}
	in.mu.Unlock()
	in.closeOnce.Do(in.stopReading)
	return nil
}

func (in *Inbox) stopReading() {
	for _, s := range in.subs {
		s.Unsubscribe()
	}
	if in.progressSub != nil {
		in.progressSub.Drain()
	}
	in.mu.Lock()
	cc, cons := in.catchUp, in.catchCons
	in.catchUp, in.catchCons = nil, nil
	in.mu.Unlock()
	if cc != nil {
		cc.Stop()
		deleteConsumer(in.js, cons)
	}
}

// Expect records that the call key of the run is a call to tool: its
// result is taken only from the subject of that tool's results, which a
// deployment lets only that tool's workers publish on. [Dispatcher.Publish] records every call
// it publishes; a process that resumes a run whose calls another
// published records them with Expect ([loop.ExpectInbox]).
func (in *Inbox) Expect(key protocol.CallKey, tool protocol.ToolName) { in.tools.store(key, tool) }

// callTools are the tools of a run's calls, by key: written as the calls
// are published, read as their results and progress come. A key is never
// removed: the inbox lives as long as its run. The zero value is empty.
type callTools struct {
	mu    sync.RWMutex
	tools map[protocol.CallKey]protocol.ToolName
}

func (t *callTools) store(key protocol.CallKey, tool protocol.ToolName) {
	t.mu.Lock()
	if t.tools == nil {
		t.tools = make(map[protocol.CallKey]protocol.ToolName)
	}
	t.tools[key] = tool
	t.mu.Unlock()
}

// load returns the tool of the call key, if a call with it was published
// or expected.
func (t *callTools) load(key protocol.CallKey) (protocol.ToolName, bool) {
	t.mu.RLock()
	tool, ok := t.tools[key]
	t.mu.RUnlock()
	return tool, ok
}

var _ loop.WithdrawInbox = (*Inbox)(nil)

// callsStream returns the calls stream, looked up once.
func (d *Dispatcher) callsStream(ctx context.Context) (jetstream.Stream, error) {
	d.callsMu.Lock()
	defer d.callsMu.Unlock()
	if d.calls != nil {
		return d.calls, nil
	}
	st, err := d.js.Stream(ctx, d.subjects.CallsStream())
	if err != nil {
		return nil, err
	}
	d.calls = st
	return st, nil
}

// CaughtUp implements [loop.CatchUpInbox]: its first call starts a read
// of the results stored for the run before Open (up to the last the
// Dispatcher's consumer handed on then, so none is delivered twice), and
// the channel is closed once they are delivered (or at once when it cannot
// tell). A resumed run waits for it before it judges any deadline.
func (in *Inbox) CaughtUp() <-chan struct{} {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.caught == nil {
		in.caught = make(chan struct{})
		if in.js == nil || in.resultSubject == "" || in.closed || in.openSeq == 0 {
			close(in.caught)
		} else {
			go in.readPast()
		}
	}
	return in.caught
}

// readPast delivers the run's results of stream sequence up to in.openSeq,
// then closes in.caught.
func (in *Inbox) readPast() {
	ctx, cancel := context.WithTimeout(context.Background(), defaultOpTimeout)
	defer cancel()
	upTo := in.openSeq
	st, err := in.js.Stream(ctx, in.resultsStream)
	if err == nil {
		var m *jetstream.RawStreamMsg
		switch m, err = st.GetLastMsgForSubject(ctx, in.resultSubject); {
		case errors.Is(err, jetstream.ErrMsgNotFound):
			upTo, err = 0, nil
		case err == nil:
			upTo = min(upTo, m.Sequence)
		}
	}
	if err != nil || upTo == 0 {
		if err != nil {
			in.garbage.Warn().Err(err).Msg("reading the run's past results failed")
		}
		in.caughtUp()
		return
	}
	cons, err := in.js.OrderedConsumer(ctx, in.resultsStream, jetstream.OrderedConsumerConfig{
		FilterSubjects:    []string{in.resultSubject},
		DeliverPolicy:     jetstream.DeliverAllPolicy,
		InactiveThreshold: resultsConsumerInactive,
	})
	if err != nil {
		in.garbage.Warn().Err(err).Msg("reading the run's past results failed")
		in.caughtUp()
		return
	}
	var done atomic.Bool
	cc, err := cons.Consume(func(m jetstream.Msg) {
		md, err := m.Metadata()
		if err != nil || done.Load() {
			return
		}
		if md.Sequence.Stream > upTo {
			done.Store(true)
			in.caughtUp()
			return
		}
		in.onResult(m)
		if md.Sequence.Stream >= upTo || md.NumPending == 0 {
			done.Store(true)
			in.caughtUp()
		}
	}, jetstream.ConsumeErrHandler(in.reader.onConsumeError))
	if err != nil {
		deleteConsumer(in.js, cons)
		in.garbage.Warn().Err(err).Msg("reading the run's past results failed")
		in.caughtUp()
		return
	}
	in.mu.Lock()
	if in.closed || done.Load() {
		in.mu.Unlock()
		cc.Stop()
		deleteConsumer(in.js, cons)
		return
	}
	in.catchUp, in.catchCons = cc, cons
	in.mu.Unlock()
}

// caughtUp closes in.caught and ends the catch-up read.
func (in *Inbox) caughtUp() {
	in.mu.Lock()
	select {
	case <-in.caught:
	default:
		close(in.caught)
	}
	cc, cons := in.catchUp, in.catchCons
	in.catchUp, in.catchCons = nil, nil
	in.mu.Unlock()
	if cc != nil {
		cc.Stop()
		go deleteConsumer(in.js, cons)
	}
}

// onResult takes a message of the run's results: one result, or a batch
// of them ([protocol.ResultBatch], marked by its header). Each result is
// checked on its own — of this run, and on the subject of its call's tool
// — and delivered as its own event, so one forged result of a batch
// costs only itself. A message stored with the headers of a direct get's
// answer (the server's answer to somebody's direct get, reflected onto
// the results subject: [streammsg.Reflected]) is no worker's result.
func (in *Inbox) onResult(m jetstream.Msg) {
	if streammsg.Reflected(m.Headers()) {
		in.refuse(m.Subject(), natsbus.CodedError("reflected"))
		return
	}
	results, err := protocol.DecodeStoredResults(m.Headers().Get(protocol.HeaderResultBatch), m.Data(), in.limit)
	if err != nil {
		in.refuse(m.Subject(), err)
		return
	}
	for i := range results {
		in.onOneResult(m.Subject(), results[i])
	}
}

// onOneResult checks one result that came on subject and delivers it.
func (in *Inbox) onOneResult(subject string, r protocol.Result) {
	var err error
	if r.RunID != in.run {
		err = natsbus.CodedError("run_mismatch")
	} else if want, ok := in.tools.load(r.CallKey); ok && !onSubject(subject, in.prefix, want) {
		// A worker answering a call of another tool (or a forger).
		err = natsbus.CodedError("tool_mismatch")
	}
	if err != nil {
		in.refuse(subject, err)
		return
	}
	// The loop takes a result for a call it has not published (nor
	// resumed) from nobody, and a result for a call only from its tool's
	// subject, which the event names.
	in.deliver(loop.Event{Result: &r, Tool: protocol.ToolName(strings.TrimPrefix(subject, in.prefix))})
}

// onSubject reports whether subject is prefix followed by tool, as
// subject == prefix+tool, without building that string for every result.
func onSubject(subject, prefix string, tool protocol.ToolName) bool {
	rest, ok := strings.CutPrefix(subject, prefix)
	return ok && rest == string(tool)
}

// recovers reports whether the ordered consumer re-creates itself after
// err (the errors on which nats.go's ordered consumer resets).
func recovers(err error) bool {
	return errors.Is(err, jetstream.ErrNoHeartbeat) || errors.Is(err, jetstream.ErrConsumerDeleted) ||
		errors.Is(err, nats.ErrNoResponders)
}

func (in *Inbox) onProgress(m *nats.Msg) {
	p, err := protocol.DecodeStarted(m.Data, in.limit)
	if err == nil && p.RunID != in.run {
		err = natsbus.CodedError("run_mismatch")
	}
	if err == nil && m.Subject != in.progress {
		err = natsbus.CodedError("subject_mismatch")
	}
	if err != nil {
		in.refuse(m.Subject, err)
		return
	}
	in.deliver(loop.Event{Started: &p})
}

func (in *Inbox) refuse(subject string, err error) {
	in.garbage.Warn().Str(natsbus.LogSubject, subject).Str(natsbus.LogCode, natsbus.ErrorCode(err)).Msg("dropped a malformed message")
}

// deliver never blocks: NATS callbacks must return promptly.
func (in *Inbox) deliver(ev loop.Event) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.closed {
		return
	}
	select {
	case in.events <- ev:
	default:
		n := in.dropped.Add(1)
		if n == 1 || n%100 == 0 {
			in.log.Warn().Int64(natsbus.LogDropped, n).Msg("inbox full: dropped an event")
		}
	}
}

// withDefaultTimeout returns ctx, bounded by defaultOpTimeout when it has
// no deadline.
func withDefaultTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, defaultOpTimeout)
}
