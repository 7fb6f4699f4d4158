package loop

import (
	"math"
)

// TerminationBudgetExhausted: the run's next model request or dispatch
// would have gone past one of Config.Budget's bounds; Result.Budget says
// which and what was spent. Every call of the run is answered.
const TerminationBudgetExhausted TerminationReason = "budget_exhausted"

// The budgets a run can exhaust (BudgetReport.Exhausted).
const (
	BudgetInputTokens  = "input_tokens"
	BudgetOutputTokens = "output_tokens"
	BudgetCost         = "cost_usd"
	BudgetToolCalls    = "tool_calls"
)

// Budget bounds what one run may spend. A zero bound is unlimited, and the
// zero Budget checks nothing. Bounds are checked before each model request
// and before each round's dispatch, so a run never starts work it cannot
// pay for: a model request is made only when its input (estimated) and
// its largest answer (MaxTokens) still fit, and a round dispatches only the
// calls that fit in ToolCalls (the rest are answered rejected).
type Budget struct {
	// InputTokens bounds the prompt tokens of the run's model requests.
	InputTokens int64 `json:"input_tokens,omitempty"`
	// OutputTokens bounds the completion tokens of the run's answers.
	OutputTokens int64 `json:"output_tokens,omitempty"`
	// CostUSD bounds the run's model cost, priced by InputPrice and
	// OutputPrice.
	CostUSD float64 `json:"cost_usd,omitempty"`
	// ToolCalls bounds the tool calls the run attempts (Metadata.ToolCallsMade).
	ToolCalls int `json:"tool_calls,omitempty"`
	// InputPrice and OutputPrice are the model's price, in USD per million
	// tokens.
	InputPrice  float64 `json:"input_price,omitempty"`
	OutputPrice float64 `json:"output_price,omitempty"`
	// SummarizerInputPrice and SummarizerOutputPrice are the price of
	// Config.Summarizer, whose tokens count against the token bounds too.
	SummarizerInputPrice  float64 `json:"summarizer_input_price,omitempty"`
	SummarizerOutputPrice float64 `json:"summarizer_output_price,omitempty"`
	// MaxTokens is the most an answer can cost in completion tokens (the
	// model's max_tokens): a request is made only if that much still fits.
	// 0 reserves nothing: the request is then made while anything is left,
	// and its answer may overshoot by one answer.
	MaxTokens int `json:"max_tokens,omitempty"`
}

// limited reports whether any bound is set.
func (b Budget) limited() bool {
	return b.InputTokens > 0 || b.OutputTokens > 0 || b.CostUSD > 0 || b.ToolCalls > 0
}

func (b Budget) validate() error {
	for _, r := range []struct {
		field string
		v     float64
	}{
		{"Budget.InputTokens", float64(b.InputTokens)},
		{"Budget.OutputTokens", float64(b.OutputTokens)},
		{"Budget.CostUSD", b.CostUSD},
		{"Budget.ToolCalls", float64(b.ToolCalls)},
		{"Budget.InputPrice", b.InputPrice},
		{"Budget.OutputPrice", b.OutputPrice},
		{"Budget.SummarizerInputPrice", b.SummarizerInputPrice},
		{"Budget.SummarizerOutputPrice", b.SummarizerOutputPrice},
		{"Budget.MaxTokens", float64(b.MaxTokens)},
	} {
		if math.IsNaN(r.v) || math.IsInf(r.v, 0) || r.v < 0 {
			return &ConfigError{Field: r.field, Value: r.v, Rule: "must be a finite number >= 0"}
		}
	}
	return nil
}

// BudgetReport is what a run with a budget spent, and which bound ended it.
type BudgetReport struct {
	// Exhausted names the bound that ended the run (input_tokens,
	// output_tokens, cost_usd, tool_calls); empty when none did.
	Exhausted string `json:"exhausted,omitempty"`
	// Limit is that bound's value.
	Limit float64 `json:"limit,omitempty"`
	// Spent: tokens (as reported, or estimated where the model reported
	// none), cost in USD and tool calls.
	InputTokens  int64   `json:"input_tokens"`
	OutputTokens int64   `json:"output_tokens"`
	CostUSD      float64 `json:"cost_usd"`
	ToolCalls    int     `json:"tool_calls"`
}

// budgetState is a run's spending so far.
type budgetState struct {
	// in and out are the tokens of the model and the summarizer; sumCost
	// is the summarizer's cost.
	in, out int64
	sumIn   int64
	sumOut  int64
	// lastBytes and lastPrompt calibrate the estimate of the next
	// request's input: the prompt tokens the last request cost for the
	// bytes it sent.
	lastBytes, lastPrompt int64
	// estimate is the input estimate of the request being made.
	estimate, reqBytes int64
	// cut is set when a round's calls were cut to the tool-call budget.
	cut bool
}

// cost is the run's cost if the model's tokens were in and out (the
// summarizer's are priced at its own price).
func (ru *run) cost(in, out int64) float64 {
	b, s := ru.cfg.Budget, &ru.b
	model := float64(in-s.sumIn)*b.InputPrice + float64(out-s.sumOut)*b.OutputPrice
	return (model + float64(s.sumIn)*b.SummarizerInputPrice + float64(s.sumOut)*b.SummarizerOutputPrice) / 1e6
}

// summaryOverBudget reports whether a summarizer request of in estimated
// input tokens (and an answer of Budget.MaxTokens), with the model request
// it is made for, would pass a bound; the window is then sent without a
// summary.
func (ru *run) summaryOverBudget(in int64) bool {
	// The model request this window is for was checked alone: the summary
	// must leave room for it too.
	b, s := &ru.cfg.Budget, &ru.b
	out := int64(b.MaxTokens)
	cost := ru.cost(s.in+s.estimate, s.out+out) + (float64(in)*b.SummarizerInputPrice+float64(out)*b.SummarizerOutputPrice)/1e6
	return (b.InputTokens > 0 && s.in+s.estimate+in > b.InputTokens) ||
		(b.OutputTokens > 0 && s.out+2*out > b.OutputTokens) ||
		(b.CostUSD > 0 && cost > b.CostUSD)
}

// spendSummary records a summarizer answer's usage (estimated where it
// reported none).
func (ru *run) spendSummary(u Usage, est int64) {
	in, inOK := usageCount(u.PromptTokens)
	out, outOK := usageCount(u.CompletionTokens)
	if !outOK {
		out = int64(ru.cfg.Budget.MaxTokens)
	}
	if !inOK || in == 0 {
		in, out = est, max(out, int64(ru.cfg.Budget.MaxTokens))
	}
	s := &ru.b
	s.in, s.out, s.sumIn, s.sumOut = satAdd(s.in, in), satAdd(s.out, out), satAdd(s.sumIn, in), satAdd(s.sumOut, out)
	ru.res.Metadata.SummarizerTokens = int(satAdd(int64(ru.res.Metadata.SummarizerTokens), satAdd(in, out)))
}

// requestBytes is what a model request sends: the transcript and the tool
// definitions.
func (ru *run) requestBytes(defs []ToolDef) int64 {
	n := int64(ru.transcriptBytes())
	for i := range defs {
		n += int64(len(defs[i].Name) + len(defs[i].Description) + len(defs[i].Parameters))
	}
	return n
}

// budgetBeforeModel is checked before a model request: nil when the
// request and its largest answer fit, else the report of the bound it
// would pass. A journaled response is not asked again, and not checked.
func (ru *run) budgetBeforeModel(round int, defs []ToolDef) *BudgetReport {
	b := &ru.cfg.Budget
	if !b.limited() || ru.j.replay().response(round) != nil {
		return nil
	}
	s := &ru.b
	s.reqBytes = ru.requestBytes(defs)
	// A first request is estimated at a token per 3 bytes (more than most
	// text costs); later ones at the last request's reported tokens plus
	// a token per 3 bytes added since.
	s.estimate = (s.reqBytes + 2) / 3
	if s.lastPrompt > 0 {
		s.estimate = s.lastPrompt + max(s.reqBytes-s.lastBytes+2, 0)/3
	}
	reserve := int64(b.MaxTokens)
	switch {
	case b.InputTokens > 0 && s.in+s.estimate > b.InputTokens:
		return ru.report(BudgetInputTokens, float64(b.InputTokens))
	case b.OutputTokens > 0 && (s.out+reserve > b.OutputTokens || s.out >= b.OutputTokens):
		return ru.report(BudgetOutputTokens, float64(b.OutputTokens))
	case b.CostUSD > 0 && ru.cost(s.in+s.estimate, s.out+reserve) > b.CostUSD:
		return ru.report(BudgetCost, b.CostUSD)
	}
	return nil
}

// afterResponse counts a model response (live or replayed): its usage
// against the budget, and a truncated answer.
func (ru *run) afterResponse(resp *Response) {
	if resp.FinishReason == "length" {
		ru.res.Metadata.TruncatedResponses++
		ru.log.Warn().Str(logKeyEvent, evTruncatedResponse).Send()
	}
	ru.spend(resp.Usage)
}

// evTruncatedResponse is logged for a model answer cut at its output
// limit (finish_reason "length").
const evTruncatedResponse = "truncated_response"

// spend records a model response's usage, against the budget and in the
// result's metadata. A count the model did not report, or reported as no
// count can be (negative, not a number, over [maxUsageTokens]), is
// counted as estimated (input) or as the reserve (output), so a model
// that reports nothing, or nonsense, cannot spend past its budget. Sums
// saturate instead of overflowing.
func (ru *run) spend(u Usage) {
	s := &ru.b
	in, inOK := usageCount(u.PromptTokens)
	out, outOK := usageCount(u.CompletionTokens)
	if !inOK || in == 0 {
		in = s.estimate
	} else {
		s.lastPrompt, s.lastBytes = in, s.reqBytes
	}
	if !outOK || (out == 0 && u.PromptTokens == 0) {
		out = int64(ru.cfg.Budget.MaxTokens)
	}
	s.in = satAdd(s.in, in)
	s.out = satAdd(s.out, out)
	s.estimate = 0
	md := &ru.res.Metadata
	md.PromptTokens = int(satAdd(int64(md.PromptTokens), in))
	md.CompletionTokens = int(satAdd(int64(md.CompletionTokens), out))
}

// maxUsageTokens bounds a token count a model may report for one request:
// more than any model's context holds. A count over it is not believed.
const maxUsageTokens = 1 << 31

// usageCount is a reported token count, and whether it is one: not
// negative and at most maxUsageTokens. Providers report a count that is
// not a number as -1 (Usage).
func usageCount(v int) (int64, bool) {
	if v < 0 || v > maxUsageTokens {
		return 0, false
	}
	return int64(v), true
}

// satAdd is a+b for non-negative a and b, saturating at the largest
// int64 (and int on 32-bit platforms) instead of overflowing.
func satAdd(a, b int64) int64 {
	const top = int64(^uint(0) >> 1)
	if b > top-a {
		return top
	}
	return a + b
}

// report is the run's spending, with the bound that ended it (if any).
func (ru *run) report(exhausted string, limit float64) *BudgetReport {
	s := &ru.b
	return &BudgetReport{Exhausted: exhausted, Limit: limit, InputTokens: s.in, OutputTokens: s.out,
		CostUSD: ru.cost(s.in, s.out), ToolCalls: ru.res.Metadata.ToolCallsMade}
}

// finishBudget ends a run on an exhausted budget.
func (ru *run) finishBudget(rep *BudgetReport) (*Result, error) {
	ru.res.Budget = rep
	ru.log.Warn().Str(logKeyEvent, evBudgetExhausted).Str(logKeyDropReason, rep.Exhausted).Send()
	return ru.finish(TerminationBudgetExhausted, "", nil)
}

// evBudgetExhausted is logged when a budget ends a run.
const evBudgetExhausted = "budget_exhausted"
