package harness

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"
	"unicode/utf8"

	"github.com/rs/zerolog"

	"github.com/toolfleet/toolfleet/pkg/protocol"
	"github.com/toolfleet/toolfleet/pkg/schema"
)

// Error types the harness reports itself (in [Result].ErrorType).
const (
	// ErrorTypeOverloaded: the call was refused, never run, because
	// [Config].MaxAbandoned Go tools are still running past their deadline.
	ErrorTypeOverloaded = "harness.Overloaded"
	// ErrorTypeGoexit: the tool called runtime.Goexit instead of returning.
	ErrorTypeGoexit = "harness.Goexit"
)

// abandonGrace is how long Execute still waits, after the call's context
// ended, for a tool that honours it to return before counting it abandoned.
const abandonGrace = 5 * time.Millisecond

// Call is one tool call to execute.
type Call struct {
	Tool      protocol.ToolName
	Arguments json.RawMessage
	// Deadline is absolute. Zero: now + the tool's timeout.
	Deadline time.Time
	// MaxOutputChars bounds the output, in runes. 0: the config's bound;
	// otherwise protocol.OutputLimit of this and the config's bound.
	MaxOutputChars int
	// CallKey is the call's idempotency key, passed to the tool: Go tools
	// read it with CallKeyFrom, exec tools in $TOOLFLEET_CALL_KEY. Empty:
	// none.
	CallKey protocol.CallKey
}

// Result is what a call produced.
type Result struct {
	// Outcome is one of ok, failed, invalid_arguments, unknown_tool, timeout
	// and cancelled.
	Outcome protocol.Outcome
	// Output is the tool's output (ok, truncated) or the validator's message
	// (invalid_arguments); empty otherwise.
	Output    string
	Truncated bool
	// ErrorType is set for failed: the error's Go type ("*fs.PathError"),
	// "panic: <type of the value>", "exit status N" for exec tools, or one of
	// the ErrorType constants. Never a message.
	ErrorType string
	Duration  time.Duration
}

// errDeadline is the cause of a call context that reached its deadline.
var errDeadline = errors.New("harness: call deadline")

// Execute runs one call and writes its line to [Config].Logger (at debug
// for an ok call, at info otherwise). It never panics and returns by the
// call's deadline (plus a few milliseconds). If ctx ends first, the outcome
// is cancelled; if the deadline passes, timeout.
func (h *Harness) Execute(ctx context.Context, call Call) Result {
	res := h.ExecuteUnlogged(ctx, call)
	h.logCall(call, res)
	return res
}

// ExecuteUnlogged runs one call as [Harness.Execute] does but writes no
// line for it: for a caller that records each call itself, once, on a line
// of its own that carries [CallFields] and its own ids (a worker adds the
// run's). The harness's warnings are still logged.
func (h *Harness) ExecuteUnlogged(ctx context.Context, call Call) Result {
	start := h.cfg.Now()
	res := h.execute(ctx, call)
	res.Duration = max(h.cfg.Now().Sub(start), 0)
	return res
}

// execute runs the call.
func (h *Harness) execute(ctx context.Context, call Call) Result {
	e, ok := h.tools[call.Tool]
	if !ok {
		return Result{Outcome: protocol.OutcomeUnknownTool}
	}
	limit := protocol.OutputLimit(call.MaxOutputChars, h.cfg.MaxOutputChars)
	if err := e.schema.Validate(call.Arguments); err != nil {
		msg := "arguments do not match the schema"
		var ae *schema.ArgumentError
		if errors.As(err, &ae) {
			msg = ae.Msg
		}
		out, trunc := protocol.Truncate(msg, limit)
		return Result{Outcome: protocol.OutcomeInvalidArguments, Output: out, Truncated: trunc}
	}

	deadline := call.Deadline
	if deadline.IsZero() {
		// contexts run on the real clock
		deadline = protocol.NewCallDeadline(time.Now(), e.timeout, 0).At
	}
	if ctx.Err() != nil {
		return Result{Outcome: protocol.OutcomeCancelled}
	}
	tctx, cancel := context.WithDeadlineCause(ctx, deadline, errDeadline)
	defer cancel()
	if tctx.Err() != nil { // the deadline has passed: do not start
		return Result{Outcome: endOutcome(tctx)}
	}
	args := slices.Clone(call.Arguments)
	if call.CallKey != "" {
		tctx = WithCallKey(tctx, string(call.CallKey))
	}

	if e.tool.cmd != nil {
		return h.runCommand(tctx, e, args, limit)
	}
	if h.abandoned.Load() >= int64(h.cfg.MaxAbandoned) {
		h.cfg.Logger.Error().Str(logKeyTool, e.tool.Name).Int(logKeyAbandoned, h.Abandoned()).
			Msg("tool call refused: too many abandoned tool goroutines")
		return Result{Outcome: protocol.OutcomeFailed, ErrorType: ErrorTypeOverloaded}
	}
	r, finished := h.runGo(tctx, e, args)
	if !finished {
		return Result{Outcome: endOutcome(tctx)}
	}
	switch {
	case r.panicType != "":
		return Result{Outcome: protocol.OutcomeFailed, ErrorType: r.panicType}
	case r.goexit:
		return Result{Outcome: protocol.OutcomeFailed, ErrorType: ErrorTypeGoexit}
	case r.err != nil && tctx.Err() != nil:
		// Most likely the tool returned ctx.Err(): report why the context ended.
		return Result{Outcome: endOutcome(tctx)}
	case r.err != nil:
		return Result{Outcome: protocol.OutcomeFailed, ErrorType: fmt.Sprintf("%T", r.err)}
	}
	out, trunc := protocol.Truncate(r.out, limit)
	return Result{Outcome: protocol.OutcomeOK, Output: out, Truncated: trunc}
}

// endOutcome says why a call context ended: its own deadline (timeout) or the
// caller's context (cancelled).
func endOutcome(tctx context.Context) protocol.Outcome {
	if errors.Is(context.Cause(tctx), errDeadline) {
		return protocol.OutcomeTimeout
	}
	return protocol.OutcomeCancelled
}

// argKeys returns the sorted top-level keys of validated arguments, bounded
// for logging.
func argKeys(args []byte) []string {
	obj, err := schema.ParseObject(args)
	if err != nil {
		return nil
	}
	keys := make([]string, 0, min(len(obj), maxLoggedKeys))
	for k := range obj {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	if len(keys) > maxLoggedKeys {
		keys = keys[:maxLoggedKeys]
	}
	for i, k := range keys {
		keys[i], _ = protocol.Truncate(k, maxLoggedKeyLen)
	}
	return keys
}

// validated reports whether a call that ended with res had its arguments
// validated: all but an unknown tool's and invalid arguments did.
func validated(res Result) bool {
	return res.Outcome != protocol.OutcomeUnknownTool && res.Outcome != protocol.OutcomeInvalidArguments
}

// logCall writes the one line Execute gives every call. Argument keys and
// digest are worked out only when the line is written: an ok call logs at
// debug.
func (h *Harness) logCall(call Call, res Result) {
	var ev *zerolog.Event
	switch res.Outcome {
	case protocol.OutcomeOK:
		ev = h.cfg.Logger.Debug()
	default:
		ev = h.cfg.Logger.Info()
	}
	if ev == nil {
		return
	}
	if call.Tool.Valid() {
		ev = ev.Str(logKeyTool, string(call.Tool))
	} else {
		ev = ev.Int(logKeyToolNameLen, len(call.Tool))
	}
	callFields(ev, call, res, validated(res)).Msg("tool call")
}

// CallFields adds to ev what the harness logs of a call that ended with
// res, never a value: the outcome, the duration in whole milliseconds
// (logkey.DurationMS, an integer), the size of the arguments, the
// output's size and truncation for an ok call, the error type, and — for
// a call that did not end ok and whose arguments passed validation — the
// arguments' keys and digest (they take a parse and a hash to work out,
// which an ok call's line, the common one, does without). The tool is the
// caller's to name, first, with its own ids. It returns ev; a nil ev (a
// disabled level) stays nil and costs nothing.
func CallFields(ev *zerolog.Event, call Call, res Result) *zerolog.Event {
	return callFields(ev, call, res, res.Outcome != protocol.OutcomeOK && validated(res))
}

// callFields is CallFields, with the arguments' keys and digest when
// withArgs is set.
func callFields(ev *zerolog.Event, call Call, res Result, withArgs bool) *zerolog.Event {
	if ev == nil {
		return nil
	}
	ev = ev.Str(logKeyOutcome, string(res.Outcome)).
		Int64(logKeyDurationMS, res.Duration.Milliseconds()).
		Int(logKeyArgsBytes, len(call.Arguments))
	if withArgs {
		ev = ev.Strs(logKeyArgKeys, argKeys(call.Arguments)).Str(logKeyArgsDigest, protocol.ArgsDigest(call.Arguments))
	}
	if res.Outcome == protocol.OutcomeOK {
		ev = ev.Int(logKeyOutputChars, utf8.RuneCountInString(res.Output)).Bool(logKeyTruncated, res.Truncated)
	}
	if res.ErrorType != "" {
		ev = ev.Str(logKeyErrorType, res.ErrorType)
	}
	return ev
}
