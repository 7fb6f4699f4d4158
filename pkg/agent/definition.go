package agent

import (
	"encoding/json"
	"reflect"
	"slices"
	"strconv"
	"time"
)

// DefaultName is the agent a run submitted without one is given. When no
// agent of that name is stored, the run gets the coordinator's own model,
// no instructions and every tool, as before agents existed.
const DefaultName = "default"

// Definition is one agent: who it is, what it may use and what it may
// spend. Its JSON form is the document `coordinator agents put` stores.
// Every field but Name and Model is optional; a zero value means the
// coordinator's default (the loop's, or unlimited for a budget).
type Definition struct {
	// Name is the agent's name, a subject token and KV key:
	// ^[a-z0-9][a-z0-9_-]{0,63}$.
	Name string `json:"name"`
	// Description says what the agent is for (for people, never sent to the
	// model). At most 1024 bytes.
	Description string `json:"description,omitempty"`
	// Instructions are the run's first system message. At most
	// MaxInstructionsBytes.
	Instructions string `json:"instructions,omitempty"`
	// Model is the provider and model the agent's runs use.
	Model Model `json:"model"`
	// Summarizer, with limits.max_history_messages, summarizes what a
	// request's window leaves out (its cost counts against the budget).
	Summarizer *Model `json:"summarizer,omitempty"`
	// Tools are the tools offered to the model: exact tool names, prefix
	// patterns ("fs_*") or "*" for every tool. Empty offers none.
	Tools []string `json:"tools,omitempty"`
	// RequireApproval names tools whose calls need a human's approval, on
	// top of those whose spec says so; "*" gates every call.
	RequireApproval []string `json:"require_approval,omitempty"`
	// Limits bound the loop.
	Limits Limits `json:"limits,omitzero"`
	// Budget bounds a run's spending.
	Budget Budget `json:"budget,omitzero"`
	// DryRun makes every run of the agent a dry run: only tools declared
	// read-only run, every other call is gated as usual and answered
	// simulated (loop.Config.DryRun).
	DryRun bool `json:"dry_run,omitempty"`
	// Class is the priority class of the agent's runs: "interactive" (the
	// default) or "batch", whose calls start only when no interactive
	// call of the same tool waits. A submission may set another.
	Class string `json:"class,omitempty"`
	// Clients are the clients that may run the agent, by name (the
	// <client> token of their submissions, a subject token): at most
	// MaxClients, none twice. A serving coordinator refuses a run of any
	// other client. Absent or empty: every client.
	Clients []string `json:"clients,omitempty"`
}

// ServesClient reports whether client may run the agent: whether Clients
// is empty or names it.
func (d *Definition) ServesClient(client string) bool {
	return len(d.Clients) == 0 || slices.Contains(d.Clients, client)
}

// Model is the model an agent uses.
type Model struct {
	// Provider is openai, openai-responses, anthropic or scripted.
	Provider string `json:"provider"`
	// Name is the provider's model name (gpt-4.1-mini,
	// claude-sonnet-4-5). Not used by scripted.
	Name string `json:"name,omitempty"`
	// BaseURL is the API root; empty means the provider's default (or its
	// environment variable, as for --model).
	BaseURL string `json:"base_url,omitempty"`
	// APIKeyEnv names the environment variable, on the coordinator, that
	// holds the key: a name ending in _API_KEY, never one of the fleet's own
	// credentials (NATS_*, TOOLFLEET_*). Empty means the provider's usual
	// one (OPENAI_API_KEY, ANTHROPIC_API_KEY). The key itself is never in a
	// definition.
	APIKeyEnv string `json:"api_key_env,omitempty"`
	// Temperature is sent when set: a finite number in [0, 2].
	Temperature *float64 `json:"temperature,omitempty"`
	// MaxTokens bounds each answer (1 to 1,000,000); 0 means the
	// provider's default. Required by a token or cost budget on output,
	// which must know what an answer can cost before asking for it.
	MaxTokens int `json:"max_tokens,omitempty"`
	// Script is the scripted provider's script (the scripted package's
	// format), for trying an agent without a model.
	Script json.RawMessage `json:"script,omitempty"`
}

// Limits are the loop's bounds for the agent's runs; zero means the
// coordinator's (the loop's defaults, or its flags).
type Limits struct {
	MaxRounds            int      `json:"max_rounds,omitempty"`
	MaxToolCallsPerRound int      `json:"max_tool_calls_per_round,omitempty"`
	ToolTimeout          Duration `json:"tool_timeout,omitzero"`
	MaxObservationChars  int      `json:"max_observation_chars,omitempty"`
	MaxRunDuration       Duration `json:"max_run_duration,omitzero"`
	// MaxHistoryMessages bounds the messages of each model request (the
	// first ones and the newest whole blocks); 0 sends the whole transcript.
	MaxHistoryMessages int `json:"max_history_messages,omitempty"`
}

// Budget bounds what one run may spend. Zero means unlimited. A run that
// would go past one ends with termination "budget_exhausted" before the
// model request or the dispatch that would.
type Budget struct {
	// InputTokens bounds the prompt tokens of the run's model calls.
	InputTokens int64 `json:"input_tokens,omitempty"`
	// OutputTokens bounds the completion tokens of the run's model calls.
	OutputTokens int64 `json:"output_tokens,omitempty"`
	// CostUSD bounds the run's model cost, priced by Prices.
	CostUSD float64 `json:"cost_usd,omitempty"`
	// ToolCalls bounds the tool calls the run dispatches.
	ToolCalls int `json:"tool_calls,omitempty"`
	// Prices are USD per million tokens, by model name; CostUSD needs the
	// agent's model in it.
	Prices map[string]Price `json:"prices,omitempty"`
}

// Price is a model's price in USD per million tokens.
type Price struct {
	Input  float64 `json:"input"`
	Output float64 `json:"output"`
}

// Duration is a time.Duration whose JSON form is a Go duration string
// ("30s", "1h").
type Duration time.Duration

// MarshalJSON writes d as a duration string.
func (d Duration) MarshalJSON() ([]byte, error) {
	return []byte(strconv.Quote(time.Duration(d).String())), nil
}

// UnmarshalJSON reads a duration string.
func (d *Duration) UnmarshalJSON(b []byte) error {
	// An *json.UnmarshalTypeError is given the field's path by the
	// decoder, so the error names the field.
	bad := &json.UnmarshalTypeError{Value: "not a duration string", Type: reflect.TypeFor[Duration]()}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return bad
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return bad
	}
	*d = Duration(v)
	return nil
}
