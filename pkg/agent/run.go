package agent

import (
	"encoding/json"
	"time"

	"github.com/toolfleet/toolfleet/pkg/loop"
)

// EntryAgent is the kind of the journal entry that names the agent and
// the revision a run started on (the loop ignores it; [FromJournal] reads
// it back when the run is resumed).
const EntryAgent = "agent"

// Ref names one revision of an agent: the KV revision of its definition in
// the fleet, 0 for a definition that is not stored (coordinator run
// --agent FILE).
type Ref struct {
	Name     string `json:"name"`
	Revision uint64 `json:"revision"`
}

// JournalEntry is the entry a coordinator appends to a run's journal
// before the run starts, so that a resumed run continues on the same
// revision. It holds the name and revision, never the definition's key
// or any secret.
func JournalEntry(r Ref) loop.JournalEntry {
	data, _ := json.Marshal(r)
	return loop.JournalEntry{Kind: EntryAgent, Data: data}
}

// FromJournal returns the agent a journaled run started with: the first
// valid EntryAgent entry. ok is false for a run journaled without one.
func FromJournal(entries []loop.JournalEntry) (Ref, bool) {
	for _, e := range entries {
		if e.Kind != EntryAgent {
			continue
		}
		var r Ref
		if json.Unmarshal(e.Data, &r) == nil && namePattern.MatchString(r.Name) {
			return r, true
		}
	}
	return Ref{}, false
}

// LoopConfig returns base with the agent's limits (each one the agent
// sets replaces base's), its approvals added to base's, its budget, and a
// dry run when either is one.
// The caller applies its own ceilings afterwards, if any, and sets
// Summarizer to the model of d.Summarizer when there is one.
func (d *Definition) LoopConfig(base loop.Config) loop.Config {
	c := base
	l := d.Limits
	if l.MaxRounds > 0 {
		c.MaxRounds = l.MaxRounds
	}
	if l.MaxToolCallsPerRound > 0 {
		c.MaxToolCallsPerRound = l.MaxToolCallsPerRound
		if c.MaxToolCallsKept != 0 && c.MaxToolCallsKept <= c.MaxToolCallsPerRound {
			c.MaxToolCallsKept = c.MaxToolCallsPerRound + 1
		}
	}
	if l.ToolTimeout > 0 {
		c.ToolTimeout = time.Duration(l.ToolTimeout)
	}
	if l.MaxObservationChars > 0 {
		c.MaxObservationChars = l.MaxObservationChars
	}
	if l.MaxRunDuration > 0 {
		c.MaxRunDuration = time.Duration(l.MaxRunDuration)
	}
	if l.MaxHistoryMessages > 0 {
		c.MaxHistoryMessages = l.MaxHistoryMessages
	}
	if len(d.RequireApproval) > 0 {
		c.RequireApproval = append(append([]string(nil), base.RequireApproval...), d.RequireApproval...)
	}
	c.DryRun = base.DryRun || d.DryRun
	b := d.Budget
	price := b.Prices[d.Model.Name]
	c.Budget = loop.Budget{
		InputTokens: b.InputTokens, OutputTokens: b.OutputTokens, CostUSD: b.CostUSD, ToolCalls: b.ToolCalls,
		InputPrice: price.Input, OutputPrice: price.Output, MaxTokens: d.Model.MaxTokens,
	}
	if d.Summarizer != nil {
		sp := b.Prices[d.Summarizer.Name]
		c.Budget.SummarizerInputPrice, c.Budget.SummarizerOutputPrice = sp.Input, sp.Output
	}
	return c
}

// Messages returns the run's transcript: the agent's instructions as its
// first system message, then msgs (copied; a system message the client
// sent stays, after the agent's).
func (d *Definition) Messages(msgs []loop.Message) []loop.Message {
	out := make([]loop.Message, 0, len(msgs)+1)
	if d.Instructions != "" {
		out = append(out, loop.Message{Role: "system", Content: d.Instructions})
	}
	return append(out, msgs...)
}

// Catalog returns c scoped to the agent's tools.
func (d *Definition) Catalog(c loop.Catalog) loop.Catalog {
	return ScopedCatalog{Catalog: c, Scope: NewScope(d.Tools)}
}
