package loop

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/toolfleet/toolfleet/pkg/protocol"
	"github.com/toolfleet/toolfleet/pkg/schema"
)

// MaxArgumentsBytes bounds a call's arguments. Larger arguments are
// answered invalid_arguments and never published.
const MaxArgumentsBytes = 512 << 10

// validate is a round's first phase (docs/design.md §4, steps 1 to 3). It
// makes the ids of msg's calls usable, stores msg, and returns the calls
// within the round's cap (limit), each with a call key, validated against
// the round's catalog: a repeat, an unknown tool or bad arguments is
// answered here. The calls past the cap are answered when the round
// records (record.go).
func (ru *run) validate(ctx context.Context, round int, msg Message, tools map[protocol.ToolName]*toolEntry, dropped int) ([]roundCall, int) {
	asked := msg.ToolCalls
	n := len(asked)
	limit := ru.callLimit(n)
	calls := ru.callIDs(round, asked, min(n, limit))
	ru.msgs = append(ru.msgs, msg)

	start := ru.cfg.Now()
	for i := range calls {
		c := &calls[i]
		c.start, c.round = start, round
		if c.repeatOf != "" {
			ru.answerRepeat(c)
			continue
		}
		ru.res.Metadata.ToolCallsMade++
		c.key = ru.newKey(round, i)
		raw := asked[i].Function.Arguments
		obj := ru.validateCall(c, raw, tools)
		ru.callStarted(ctx, round, c, raw, obj)
		if !c.done {
			c.approval = ru.approvals.needs(&c.entry.spec) || ru.j.replay().requested(round, c.key)
		}
	}
	if n > len(calls) {
		ru.log.Warn().Str(logKeyEvent, evCallsRejected).Int(logKeyRound, round).
			Int(logKeyRequested, n+dropped).Int(logKeyLimit, limit).Int(logKeyCount, n-len(calls)).
			Int(logKeyDropped, dropped).Send()
	}
	ru.res.Metadata.DroppedToolCalls += dropped
	return calls, limit
}

// callLimit is the number of a round's calls that may be attempted: the
// per-round cap, or what is left of the tool-call budget if less.
func (ru *run) callLimit(n int) int {
	limit := ru.cfg.MaxToolCallsPerRound
	if b := ru.cfg.Budget.ToolCalls; b > 0 {
		left := max(b-ru.res.Metadata.ToolCallsMade, 0)
		if left < limit && n > left {
			ru.b.cut = true
			return left
		}
	}
	return limit
}

// token returns a fresh id from newID that is a valid subject token and
// not in used (falling back to protocol.NewID for a bad newID), as a run
// id, a call key or the text of a call id: it is where the loop mints them.
func token[T ~string](newID func() string, used func(T) bool) T {
	for i := 0; ; i++ {
		id := newID()
		if i > 0 || !validToolName(id) {
			id = protocol.NewID()
		}
		if used == nil || !used(T(id)) {
			return T(id)
		}
	}
}

// newKey returns a call key unused in this run: derived from the run's
// secret, id, round and index in a durable run, so a resumed run
// addresses the same calls.
func (ru *run) newKey(round, i int) protocol.CallKey {
	if ru.secret != "" {
		for n := 0; ; n++ {
			k := protocol.CallKey(derivedToken(ru.secret, ru.id, "key"+strconv.Itoa(n), round, i))
			if _, used := ru.keys[k]; !used {
				return k
			}
		}
	}
	return token(ru.cfg.NewID, func(k protocol.CallKey) bool { _, ok := ru.keys[k]; return ok })
}

// freshCallID returns a coordinator-made call id unused in the transcript
// (derived, in a durable run, like newKey).
func (ru *run) freshCallID(round, i int) string {
	if ru.secret != "" {
		for n := 0; ; n++ {
			id := "call_" + derivedToken(ru.secret, ru.id, "id"+strconv.Itoa(n), round, i)
			if _, used := ru.ids[id]; !used {
				return id
			}
		}
	}
	return "call_" + token(ru.cfg.NewID, func(k string) bool { _, ok := ru.ids["call_"+k]; return ok })
}

// callIDs makes the ids of asked unique, bounded and non-empty, in place,
// before anything answers them, and returns the first within calls.
func (ru *run) callIDs(round int, asked []ToolCall, within int) []roundCall {
	calls := make([]roundCall, within)
	seen := make(map[string]struct{}, within)
	for i := range asked {
		orig := asked[i].ID
		var why string
		_, inRound := seen[orig]
		_, inRun := ru.ids[orig]
		switch {
		case orig == "":
			why = "empty"
		case len(orig) > protocol.MaxCallIDLen:
			why = "too_long"
		case i < within && inRound:
			why = "repeat"
		case inRun:
			why = "reused"
		}
		if i < within && orig != "" {
			seen[orig] = struct{}{}
		}
		if why != "" {
			asked[i].ID = ru.freshCallID(round, i)
		}
		ru.ids[asked[i].ID] = struct{}{}
		if asked[i].Type == "" {
			asked[i].Type = "function"
		}
		if i < within {
			name := asked[i].Function.Name
			calls[i] = roundCall{id: asked[i].ID, name: name, tool: clipName(name), idText: clipName(asked[i].ID)}
			if why == "repeat" {
				calls[i].repeatOf = orig
			}
			if why != "" {
				ru.log.Info().Str(logKeyEvent, evCallIDReplaced).Int(logKeyRound, round).
					Str(logKeyCallID, asked[i].ID).Str(logKeyIDProblem, why).Send()
			}
		}
	}
	return calls
}

// validateCall resolves the tool and checks the arguments; on failure it
// answers the call. It returns the parsed arguments (for trace keys) when
// they are a JSON object.
func (ru *run) validateCall(c *roundCall, raw string, tools map[protocol.ToolName]*toolEntry) map[string]any {
	c.entry = catalogTool(c.name, tools)
	if c.entry == nil {
		ru.answerUnknownTool(c)
		return nil
	}
	if strings.TrimSpace(raw) == "" {
		raw = "{}"
	}
	if len(raw) > MaxArgumentsBytes {
		ru.answerArgumentError(c, fmt.Sprintf("arguments are too large: %d bytes, limit %d", len(raw), MaxArgumentsBytes))
		return nil
	}
	// Parsed once: validated and canonicalised from the same object.
	obj, err := schema.ParseObject([]byte(raw))
	if err == nil {
		err = c.entry.schema.ValidateObject(obj)
	}
	if err == nil {
		c.args, err = protocol.CanonicalValue(obj)
		if err != nil {
			err = &schema.ArgumentError{Msg: "arguments are not valid JSON"}
		}
	}
	if err != nil {
		msg := "arguments do not match the schema"
		var ae *schema.ArgumentError
		if errors.As(err, &ae) {
			msg = ae.Msg
		}
		c.args = nil
		ru.answerArgumentError(c, msg)
	}
	return obj
}

// catalogTool returns the entry of the round's catalog that the model's
// tool name names, or nil. It is where the model's text becomes a
// [protocol.ToolName], through [protocol.ParseToolName]; a call carries its
// entry's spec name from then on.
func catalogTool(name string, tools map[protocol.ToolName]*toolEntry) *toolEntry {
	tool, err := protocol.ParseToolName(name)
	if err != nil {
		return nil
	}
	return tools[tool]
}

// catalogName returns name when it names a tool of the round's catalog,
// else "".
func catalogName(name string, tools map[protocol.ToolName]*toolEntry) string {
	if e := catalogTool(name, tools); e != nil {
		return string(e.spec.Name)
	}
	return ""
}
