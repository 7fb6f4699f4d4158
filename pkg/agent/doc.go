// Package agent defines named agents: a validated document that gives an
// agent its instructions, model, tools, approvals, loop limits and budgets
// ([Definition], [Parse]), and what a coordinator makes of one for a run:
// the loop's configuration ([Definition.LoopConfig]), the catalog scoped to
// the agent's tools ([Scope], [ScopedCatalog]), its transcript
// ([Definition.Messages]) and the journal entry that pins the revision a
// run started on ([JournalEntry], [FromJournal]). Storing definitions in
// the fleet is internal/natsbus's job (AgentStore).
package agent
