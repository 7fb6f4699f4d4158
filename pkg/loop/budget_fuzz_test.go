package loop

import (
	"math"
	"testing"
)

// FuzzSpend: whatever usages a model reports, the run's counted tokens
// never decrease, never go negative (no overflow), count each believable
// report as reported and every other one as the estimate (input) or the
// max_tokens reserve (output), and the metadata reports what was counted.
func FuzzSpend(f *testing.F) {
	f.Add(1<<62, 10, -5, math.MaxInt, int64(300), 1000)
	f.Add(0, 0, 50, -1, int64(0), 0)
	f.Add(math.MaxInt, math.MaxInt, math.MaxInt, math.MaxInt, int64(math.MaxInt64), math.MaxInt32)
	f.Fuzz(func(t *testing.T, p1, c1, p2, c2 int, est int64, maxTokens int) {
		if est < 0 || maxTokens < 0 {
			return
		}
		cfg := Config{Budget: Budget{MaxTokens: maxTokens, InputTokens: 1}}
		ru := &run{cfg: &cfg, res: newResult("fuzz")}
		var prevIn, prevOut int64
		for _, u := range []Usage{{p1, c1}, {p2, c2}, {p1, c2}} {
			ru.b.estimate = est
			ru.spend(u)
			s := ru.b
			if s.in < prevIn || s.out < prevOut || s.in < 0 || s.out < 0 {
				t.Fatalf("usage %+v: counted in %d out %d after %d %d", u, s.in, s.out, prevIn, prevOut)
			}
			wantIn := est
			if _, ok := usageCount(u.PromptTokens); ok && u.PromptTokens > 0 {
				wantIn = int64(u.PromptTokens)
			}
			if s.in != satAdd(prevIn, wantIn) {
				t.Fatalf("usage %+v: in %d, want %d", u, s.in, satAdd(prevIn, wantIn))
			}
			if _, ok := usageCount(u.CompletionTokens); !ok && s.out != satAdd(prevOut, int64(maxTokens)) {
				t.Fatalf("usage %+v: out %d, want the reserve %d counted", u, s.out, maxTokens)
			}
			if int64(ru.res.Metadata.PromptTokens) != s.in || int64(ru.res.Metadata.CompletionTokens) != s.out {
				t.Fatalf("metadata %d/%d, counted %d/%d", ru.res.Metadata.PromptTokens, ru.res.Metadata.CompletionTokens, s.in, s.out)
			}
			if rep := ru.report("", 0); rep.InputTokens != s.in || rep.OutputTokens != s.out || rep.CostUSD < 0 || math.IsNaN(rep.CostUSD) {
				t.Fatalf("report %+v, counted %d/%d", rep, s.in, s.out)
			}
			prevIn, prevOut = s.in, s.out
		}
	})
}
