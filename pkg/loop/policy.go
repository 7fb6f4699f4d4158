package loop

import (
	"math"
	"slices"
	"time"

	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// RunPolicy is what protects a durable run: which calls need a human's
// approval and how long one is waited for, and the run's limits and
// budget. It is journaled in the run's start entry (EntryStart), and
// whoever resumes the run applies at least it: the union of its approvals
// with the resuming runner's, and the lower of each limit (see
// [RunPolicy.tighten]). A run keeps what it started with, whoever continues
// it.
type RunPolicy struct {
	RequireApproval      []string `json:"require_approval,omitempty"`
	ApprovalTimeoutMS    int64    `json:"approval_timeout_ms"`
	MaxRounds            int      `json:"max_rounds"`
	MaxToolCallsPerRound int      `json:"max_tool_calls_per_round"`
	MaxObservationChars  int      `json:"max_observation_chars"`
	ToolTimeoutMS        int64    `json:"tool_timeout_ms,omitempty"`
	MaxRunDurationMS     int64    `json:"max_run_duration_ms"`
	Budget               Budget   `json:"budget,omitzero"`
	// DryRun: the run simulates every call of a tool not declared
	// read-only (Config.DryRun). A coordinator older than the field refuses
	// the journal that holds it, so it never resumes a dry run as a real
	// one.
	DryRun bool `json:"dry_run,omitempty"`
}

// policyOf is the policy of a runner configured by c (with its defaults).
func policyOf(c *Config) *RunPolicy {
	return &RunPolicy{
		RequireApproval:      slices.Clone(c.RequireApproval),
		ApprovalTimeoutMS:    c.ApprovalTimeout.Milliseconds(),
		MaxRounds:            c.MaxRounds,
		MaxToolCallsPerRound: c.MaxToolCallsPerRound,
		MaxObservationChars:  c.MaxObservationChars,
		ToolTimeoutMS:        c.ToolTimeout.Milliseconds(),
		MaxRunDurationMS:     c.MaxRunDuration.Milliseconds(),
		Budget:               c.Budget,
		DryRun:               c.DryRun,
	}
}

// failClosedPolicy is applied to a run whose journal holds no policy (it
// was started by a coordinator that did not journal one): every call of
// it needs approval, whatever the resuming runner's configuration says.
var failClosedPolicy = RunPolicy{RequireApproval: []string{"*"}}

// tighten returns c lowered to p where p is stricter: p's approvals are
// added to c's, and each limit and budget bound is the lower of the two
// (0 meaning none, for the optional ones), each price the higher; a dry
// run stays one. The
// result passes [Config.Validate] when c does.
func (p *RunPolicy) tighten(c Config) Config {
	for _, name := range p.RequireApproval {
		if _, err := protocol.ParseToolName(name); name == "*" || err == nil {
			if !slices.Contains(c.RequireApproval, name) {
				c.RequireApproval = append(slices.Clone(c.RequireApproval), name)
			}
		}
	}
	lower := func(cur, j int) int {
		if j > 0 && j < cur {
			return j
		}
		return cur
	}
	c.MaxRounds = lower(c.MaxRounds, p.MaxRounds)
	c.MaxToolCallsPerRound = lower(c.MaxToolCallsPerRound, p.MaxToolCallsPerRound)
	c.MaxObservationChars = lower(c.MaxObservationChars, p.MaxObservationChars)
	if c.MaxToolCallsKept <= c.MaxToolCallsPerRound {
		c.MaxToolCallsKept = c.MaxToolCallsPerRound + 1
	}
	lowerDur := func(cur time.Duration, ms int64, optional bool) time.Duration {
		j := msDuration(ms)
		if j > 0 && (j < cur || (optional && cur == 0)) {
			return j
		}
		return cur
	}
	c.ApprovalTimeout = lowerDur(c.ApprovalTimeout, p.ApprovalTimeoutMS, false)
	c.MaxRunDuration = lowerDur(c.MaxRunDuration, p.MaxRunDurationMS, false)
	c.ToolTimeout = lowerDur(c.ToolTimeout, p.ToolTimeoutMS, true)
	c.Budget = p.Budget.tighten(c.Budget)
	c.DryRun = c.DryRun || p.DryRun
	return c
}

// tighten returns b with each of j's bounds applied where it is lower (or
// b has none), and each of j's prices and its MaxTokens reserve where it
// is higher. Invalid values of j (negative, not finite) are ignored.
func (j Budget) tighten(b Budget) Budget {
	lowerI := func(cur, v int64) int64 {
		if v > 0 && (cur == 0 || v < cur) {
			return v
		}
		return cur
	}
	lowerF := func(cur, v float64) float64 {
		if !math.IsNaN(v) && !math.IsInf(v, 0) && v > 0 && (cur == 0 || v < cur) {
			return v
		}
		return cur
	}
	higherF := func(cur, v float64) float64 {
		if !math.IsNaN(v) && !math.IsInf(v, 0) && v > cur {
			return v
		}
		return cur
	}
	b.InputTokens = lowerI(b.InputTokens, j.InputTokens)
	b.OutputTokens = lowerI(b.OutputTokens, j.OutputTokens)
	b.ToolCalls = int(lowerI(int64(b.ToolCalls), int64(j.ToolCalls)))
	b.CostUSD = lowerF(b.CostUSD, j.CostUSD)
	b.InputPrice = higherF(b.InputPrice, j.InputPrice)
	b.OutputPrice = higherF(b.OutputPrice, j.OutputPrice)
	b.SummarizerInputPrice = higherF(b.SummarizerInputPrice, j.SummarizerInputPrice)
	b.SummarizerOutputPrice = higherF(b.SummarizerOutputPrice, j.SummarizerOutputPrice)
	b.MaxTokens = max(b.MaxTokens, j.MaxTokens)
	return b
}

// msDuration converts milliseconds, saturating instead of overflowing.
func msDuration(ms int64) time.Duration {
	const maxMS = int64(time.Duration(1<<63-1) / time.Millisecond)
	if ms > maxMS {
		ms = maxMS
	}
	return time.Duration(ms) * time.Millisecond
}

// approvalSet is which tools' calls need approval under c.
type approvalSet struct {
	all   bool
	tools map[protocol.ToolName]bool
}

func newApprovalSet(names []string) approvalSet {
	s := approvalSet{tools: map[protocol.ToolName]bool{}}
	for _, name := range names {
		if name == "*" {
			s.all = true
			continue
		}
		if tool, err := protocol.ParseToolName(name); err == nil {
			s.tools[tool] = true
		}
	}
	return s
}

// needs reports whether a call of spec needs approval.
func (s approvalSet) needs(spec *protocol.ToolSpec) bool {
	return s.all || s.tools[spec.Name] || spec.RequiresApproval
}
