// Package loop is the coordinator side of a toolfleet agent: the ReAct loop
// that asks a [Model] for its next message, hands the tool calls it asks for
// to the fleet through a [Dispatcher], gathers their results against
// deadlines and appends one observation per call, until the model answers
// without calling a tool or [Config.MaxRounds] is reached.
//
// The package is transport-free: it imports no NATS package. Production
// wiring supplies a Dispatcher, [Catalog] and [Gate] backed by JetStream;
// tests use the in-memory ones of package looptest.
//
// # A round
//
// A round runs in five phases, called in order from round.go, each in the
// file named for it: validate (steps 1 to 3 below), approve (4), dispatch
// (5: publish, and wait until the fleet stored the calls), gather (6) and
// record (7). Each call of the round is a roundCall from its validation to
// its answer; its events (started, queued, answered, recorded) are emitted
// once each, in call_events.go, to their sinks: the Result, the log
// lines, the call's span, the Observer and the CallObserver.
//
// For the tool calls of one assistant message, in request order:
//
//  1. Calls beyond MaxToolCallsPerRound are never validated, traced, sent
//     to the gate or executed; each is answered "rejected" with a text
//     naming the limit.
//  2. Call ids are made usable (see "Call ids" below); a repeat is answered
//     once and never executed twice.
//  3. An unknown tool is answered unknown_tool; arguments that are not a
//     JSON object or fail the tool's schema are answered invalid_arguments
//     with the validator's message. Neither is ever published. Empty
//     arguments mean {}.
//  4. Calls that need approval go to the Gate, concurrently, after
//     validation. Only a timely, explicit approval lets a call run.
//  5. The remaining calls are published concurrently, each with an absolute
//     deadline (now + timeout).
//  6. Results are gathered until every call is answered or its deadline plus
//     Grace passes; unanswered calls get timeout (or outcome_unknown, when a
//     worker may have started a non-idempotent call) and a Cancel is
//     published for them. With a [WithdrawInbox], a non-idempotent call
//     still unanswered at its deadline is first withdrawn: if no worker
//     claimed it, it never runs and is answered timeout at once.
//  7. Every observation is bounded to MaxObservationChars and appended as a
//     tool message, in request order.
//
// # Invariants
//
//   - Every tool call id of every assistant message the loop stores is
//     answered by exactly one tool message, right after that message and in
//     request order — after a cap, bad arguments, an unknown tool, a denial,
//     a timeout, a dead worker, a transport failure, a model error or a
//     cancelled context alike. [Result.Messages] is always a transcript a
//     model API accepts.
//   - Nothing the model wrote reaches a subject, a log line or a worker
//     before it is validated: tool names must match protocol.TokenPattern,
//     arguments are sent in canonical form only after they pass the schema,
//     call ids never leave the coordinator except as the model's own label
//     in [protocol.Call.CallID]. The wire uses coordinator-made call keys.
//   - A run costs at most MaxRounds model calls × MaxToolCallsPerRound
//     executed calls, each bounded by its timeout, with observations bounded
//     by MaxObservationChars. A round uses at most MaxToolCallsPerRound
//     goroutines per phase, however many calls the model asks for.
//   - A result counts only if it is valid, of this run, for an open call
//     key, with an outcome a worker may report. Anything else — a duplicate,
//     a late result, an unknown key, another run's result, a forged
//     outcome — is dropped and logged with ids only.
//   - The gate fails closed: an error, a nil gate, an expiry or an answer
//     after the deadline all keep the call from running. Only an explicit
//     "no" is reported as a human's denial.
//   - Trace lines carry ids, tool names, argument keys, an argument digest,
//     outcomes, durations and counts — never argument values (unless
//     [Config.TraceArgs]), tool output, validation messages, operator
//     reasons or error messages.
//
// # Call ids
//
// Model APIs refuse a transcript in which an assistant tool call has no tool
// message, or two. Models nevertheless send empty ids, repeat an id within
// one message, or restart their numbering every turn. Before anything else
// the loop rewrites, in the stored assistant message, every id that is
// empty, longer than protocol.MaxCallIDLen, or already used in the
// transcript, to a fresh coordinator-made id ("call_" + a new id), and
// answers that id. So every id in the transcript is unique.
//
//   - An empty, over-long or earlier-round id is only renamed: the call is
//     new and runs normally.
//   - An id that repeats an earlier call of the same message is renamed and
//     its call is answered "rejected" ("call id '<id>' repeats an earlier
//     call in this round") without running: it is the same call asked
//     twice. It counts in rejected_tool_calls, not tool_calls_made.
//
// [CallRecord.CallID] is the id as stored.
//
// # What the model reads
//
// Every call is answered by a tool message whose content is the tool's
// output (outcome ok) or one of the loop's own texts, one per way a call
// can end: [OutcomeTexts] lists each with its outcome and when it is
// sent. [Result.Call] gives a call's outcome and that text by its
// tool_call_id.
//
// # Observing
//
// [Config.Observer] receives measurements for metrics without the loop
// importing a metrics library: each run's start and termination reason,
// each model call's latency and tokens, each answered call's tool, outcome
// and duration, and how the gate settled each call that needed approval.
// It is given catalog tool names only — a name the model made up is passed
// as "" — so metric labels stay bounded.
//
// # Input transcripts
//
// [Runner.RunMessages] repairs what a crash leaves behind before the first
// model call: the tool messages after an assistant message are put in
// request order, and a call with no tool message is answered
// outcome_unknown ("may or may not have taken effect; check before calling
// it again"), never "cancelled". Providers convert their own transcript
// formats to []Message first.
//
// # Tracing
//
// Each run is an OpenTelemetry trace from [Config.TracerProvider] (default:
// the global provider): a span for the run, each round, each model call
// ("chat") and each tool call ("execute_tool", from validation to the
// answer), with GenAI semantic-convention attributes. The call span's
// context travels in [Outgoing].Trace, for the transport to carry to the
// worker. Spans carry what trace lines carry.
//
// # Durable runs
//
// [Runner.RunDurable] journals every step that decides what happens next
// in a [Journal] before it takes effect — a round's tools, the model's
// response, the approval requests (with their deadline) and decisions, the
// calls about to be published, that every publish returned, the round's
// observations, the end — and a run given a journal with entries replays
// them instead of doing them again. Call keys and replacement call ids are
// derived from the run id, the round and the call's index, so a resumed run
// addresses the calls it published before; the Dispatcher's inbox must
// deliver the results stored for the run (a [CatchUpInbox] says when it has).
// A journal that refuses an append ([ErrFenced]: another owner took the
// run) stops the run at once, and [Durable.Handoff] stops it at its next
// step boundary; neither answers, cancels or publishes anything more. The
// loop itself stays transport-free: the JetStream journal lives in
// internal/natsbus, the in-memory one in looptest.
//
// Durability enters a round through one seam: the run's runJournal, which
// the phases call at named points (the round replayed, approvals
// requested and decided, calls dispatched, all published, observed, and
// checkpoint at each step boundary). A plain run's is a no-op; a durable
// run's journals each point and replays what it finds (replay.go, beside
// journal.go).
//
// # Run control
//
// A journal knows what every call of an ended run did, and which of them
// were side effects. [Replay] re-runs the model steps of such a run with
// another model or other instructions: every call is answered from the
// journal (the same tool and canonical arguments) or not_replayed, and
// nothing is published; its [ReplayReport] names the first round that
// differs. [ForkMessages] rebuilds the transcript a new run starts from at
// a round, none of its calls run again. [Config].DryRun runs only the
// tools declared read-only and answers every other call simulated after
// the gate. Both enter the round at two named points (control.go), and
// every [Result] lists its SideEffects. A durable run given
// [Durable].Park parks when its model fails and Park names a reason: it
// journals EntryParked and ends TerminationParked, every earlier call
// answered; resumed from the journal, it asks that round's model again
// and runs no completed call again.
// A durable run given [Durable].Input takes its client's new messages
// ([Input]): each is journaled (EntryInput) before it takes effect, seen
// at the next model step; an interrupt withdraws the round's
// non-idempotent calls no worker claimed first, answered interrupted
// (input.go). A resume, a replay and a fork put each back where it was.
//
// # Caveats
//
// Go cannot stop a goroutine: a Gate or Dispatcher that ignores its context
// is abandoned at its deadline (plus grace) and the call answered, but its
// goroutine lives until it returns. The loop reads the Inbox only while a
// round gathers, so a Dispatcher must buffer or drop events between rounds.
// The loop never retries a call; a timed-out call is the model's to retry.
package loop
