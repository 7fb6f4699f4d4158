package loop

import (
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// compare reports where res, a replay whose input was the first inputLen
// messages of its transcript, diverges from the recorded run: round by
// round, the calls of the model's responses (by tool and canonical
// arguments) and where either run answered.
func (rec *recorded) compare(res *Result, inputLen int) *ReplayReport {
	var replayed []Message
	if inputLen <= len(res.Messages) {
		for _, m := range res.Messages[inputLen:] {
			if m.Role == "assistant" {
				replayed = append(replayed, m)
			}
		}
	}
	rep := &ReplayReport{
		Recorded: RunSummary{Rounds: rec.rounds, Termination: rec.rp.finished.Termination},
		Replayed: RunSummary{Rounds: res.Metadata.Rounds, Termination: res.TerminationReason, ToolCalls: len(res.Calls)},
	}
	for r := 1; r <= max(rec.rounds, len(replayed)); r++ {
		var a, b *Message
		if resp := rec.rp.model[r]; resp != nil {
			a = &resp.Message
			rep.Recorded.ToolCalls += len(a.ToolCalls)
		}
		if r <= len(replayed) {
			b = &replayed[r-1]
		}
		if d, ok := diffRound(r, a, b); ok {
			rep.Rounds = append(rep.Rounds, d)
		}
	}
	if len(rep.Rounds) > 0 {
		rep.FirstDivergingRound = rep.Rounds[0].Round
	}
	rep.Diverged = len(rep.Rounds) > 0 || rep.Recorded.Termination != rep.Replayed.Termination
	return rep
}

// diffRound compares round r's recorded response a with the replay's b
// (either nil when that run had no such round); ok false when they agree.
func diffRound(r int, a, b *Message) (d RoundDiff, ok bool) {
	d.Round = r
	var was, now []ToolCall
	if a != nil {
		was = a.ToolCalls
	}
	if b != nil {
		now = b.ToolCalls
	}
	answered := func(m *Message) bool { return m != nil && len(m.ToolCalls) == 0 }
	switch {
	case answered(a) && answered(b):
		d.AnswerChanged = a.Content != b.Content
	case answered(a) || answered(b):
		d.AnswerChanged = true
	}
	// The calls both made, each matched once, are left out.
	left := make(map[string][]int, len(was))
	for i, tc := range was {
		k := callMatchKey(tc)
		left[k] = append(left[k], i)
	}
	matched := make([]bool, len(was))
	var added []ToolCall
	for _, tc := range now {
		k := callMatchKey(tc)
		if q := left[k]; len(q) > 0 {
			matched[q[0]], left[k] = true, q[1:]
			continue
		}
		added = append(added, tc)
	}
	var dropped []ToolCall
	for i, tc := range was {
		if !matched[i] {
			dropped = append(dropped, tc)
		}
	}
	// A call added and one dropped of the same tool are one changed call.
	for _, tc := range added {
		j := -1
		for k, dc := range dropped {
			if dc.Function.Name == tc.Function.Name {
				j = k
				break
			}
		}
		if j < 0 {
			d.Added = append(d.Added, digestCall(tc))
			continue
		}
		d.Changed = append(d.Changed, CallChange{From: digestCall(dropped[j]), To: digestCall(tc)})
		dropped = append(dropped[:j], dropped[j+1:]...)
	}
	for _, tc := range dropped {
		d.Dropped = append(d.Dropped, digestCall(tc))
	}
	return d, d.AnswerChanged || len(d.Added)+len(d.Dropped)+len(d.Changed) > 0
}

// callMatchKey is how two runs' calls are compared: the tool name as
// written and the canonical arguments (their text, when not an object).
func callMatchKey(tc ToolCall) string {
	if args, ok := canonicalArgs(tc.Function.Arguments); ok {
		return replayKey(tc.Function.Name, args)
	}
	return replayKey(tc.Function.Name, []byte("\x00"+tc.Function.Arguments))
}

// digestCall names tc without its argument values.
func digestCall(tc ToolCall) CallDigest {
	d := CallDigest{Tool: clipName(tc.Function.Name), ArgKeys: []string{}, Digest: "invalid"}
	if args, ok := canonicalArgs(tc.Function.Arguments); ok {
		d.ArgKeys, d.Digest = canonicalArgKeys(args), protocol.CanonicalArgsDigest(args)
	}
	return d
}
