package agent

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/toolfleet/toolfleet/pkg/config"
	"github.com/toolfleet/toolfleet/pkg/model/scripted"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// Bounds on a definition. A document past one is refused whole.
const (
	// MaxDocumentBytes bounds a definition's JSON. A larger document that
	// still decodes is refused naming the field that makes it too large
	// (most are bounded one by one); past MaxInputBytes it is not read.
	MaxDocumentBytes = 256 << 10
	// MaxInputBytes is the most Parse reads.
	MaxInputBytes = 16 << 20
	// MaxScriptBytes bounds Model.Script.
	MaxScriptBytes = 128 << 10
	// MaxInstructionsBytes bounds Instructions.
	MaxInstructionsBytes = 64 << 10
	// MaxDescriptionBytes bounds Description.
	MaxDescriptionBytes = 1024
	// MaxPatterns bounds Tools and RequireApproval, each.
	MaxPatterns = 256
	// MaxClients bounds Clients.
	MaxClients = 1024
	// MaxPrices bounds Budget.Prices.
	MaxPrices = 64
	// MaxPrice bounds a price, in USD per million tokens.
	MaxPrice = 10_000
	// MaxCostUSD bounds Budget.CostUSD.
	MaxCostUSD = 1_000_000
	// MaxTokensPerAnswer bounds Model.MaxTokens.
	MaxTokensPerAnswer = 1_000_000
	// MaxBudgetTokens bounds a token budget.
	MaxBudgetTokens = 1 << 40
	// MaxRounds bounds Limits.MaxRounds.
	MaxRounds = 10_000
	// MaxToolCallsPerRound bounds Limits.MaxToolCallsPerRound.
	MaxToolCallsPerRound = 1024
	// MaxObservationChars bounds Limits.MaxObservationChars.
	MaxObservationChars = 1 << 20
	// MaxHistoryMessages bounds Limits.MaxHistoryMessages.
	MaxHistoryMessages = 100_000
	// MaxToolCalls bounds Budget.ToolCalls.
	MaxToolCalls = 1_000_000
	// MaxDuration bounds a duration of Limits.
	MaxDuration = 7 * 24 * time.Hour
)

// Providers are the model providers a definition may name.
var Providers = []string{"openai", "openai-responses", "anthropic", "scripted"}

var (
	namePattern = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,63}$`)
	// modelPattern is a provider's model name: no spaces, no control
	// characters, nothing a log line or a URL path could be split on.
	modelPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:/@+-]{0,127}$`)
	envPattern   = regexp.MustCompile(`^[A-Z][A-Z0-9_]{0,63}_API_KEY$`)
)

// Parse decodes and validates one definition. Unknown fields, a second
// JSON value, wrong types and every rule of [Definition.Validate] are
// refused; the error is a [config.Error] whose field is the JSON path
// ("model.temperature", "tools[3]").
func Parse(data []byte) (Definition, error) {
	var d Definition
	if len(data) > MaxInputBytes {
		return d, config.Errorf("", "the document is %d bytes, more than %d", len(data), MaxDocumentBytes)
	}
	if !utf8.Valid(data) {
		return d, config.Errorf("", "the document is not UTF-8")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&d); err != nil {
		return Definition{}, decodeError(err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return Definition{}, config.Errorf("", "more than one JSON value")
	}
	if err := d.Validate(); err != nil {
		return Definition{}, err
	}
	if len(data) > MaxDocumentBytes {
		return Definition{}, config.Errorf("", "the document is %d bytes, more than %d", len(data), MaxDocumentBytes)
	}
	return d, nil
}

// decodeError names the field of a decoding error when it can.
func decodeError(err error) error {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return config.Errorf(clip(te.Field), "must be %s, got %s", kind(te), te.Value)
	}
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return config.Errorf("", "not JSON (at byte %d)", se.Offset)
	}
	if msg, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		return config.Errorf(clip(strings.Trim(msg, `"`)), "unknown field")
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return config.Errorf("", "not JSON (empty or cut short)")
	}
	return config.Errorf("", "not a definition")
}

func kind(te *json.UnmarshalTypeError) string {
	if te.Type == nil {
		return "another type"
	}
	switch te.Type.Kind().String() {
	case "int", "int64":
		if te.Type.Name() == "Duration" {
			return "a duration string"
		}
		return "an integer"
	case "float64":
		return "a number"
	case "string":
		return "a string"
	case "slice":
		return "an array"
	case "struct", "map":
		return "an object"
	case "bool":
		return "a boolean"
	}
	return "another type"
}

// clip bounds text from the document before it goes into an error.
func clip(s string) string {
	const n = 64
	s = strings.ToValidUTF8(s, "?")
	if len(s) > n {
		s = s[:n] + "..."
	}
	q := strconv.Quote(s)
	return q[1 : len(q)-1]
}

// Validate checks every rule of a definition; the error is a
// [config.Error] naming the JSON field.
func (d *Definition) Validate() error {
	switch {
	case d.Name == "":
		return config.Errorf("name", "required")
	case !namePattern.MatchString(d.Name):
		return config.Errorf("name", "must match %s, got %q", namePattern, clip(d.Name))
	case len(d.Description) > MaxDescriptionBytes:
		return config.Errorf("description", "must be at most %d bytes, got %d", MaxDescriptionBytes, len(d.Description))
	case len(d.Instructions) > MaxInstructionsBytes:
		return config.Errorf("instructions", "must be at most %d bytes, got %d", MaxInstructionsBytes, len(d.Instructions))
	}
	if _, err := protocol.ParseClass(d.Class); err != nil {
		return config.Errorf("class", `must be "interactive" or "batch", got %q`, clip(d.Class))
	}
	if err := d.Model.validate("model"); err != nil {
		return err
	}
	if d.Summarizer != nil {
		if err := d.Summarizer.validate("summarizer"); err != nil {
			return err
		}
		if d.Limits.MaxHistoryMessages == 0 {
			return config.Errorf("summarizer", "needs limits.max_history_messages")
		}
	}
	if err := validatePatterns("tools", d.Tools, true); err != nil {
		return err
	}
	if err := validatePatterns("require_approval", d.RequireApproval, false); err != nil {
		return err
	}
	if err := validateClients(d.Clients); err != nil {
		return err
	}
	if err := d.Limits.validate(); err != nil {
		return err
	}
	return d.Budget.validate(d.Model, d.Summarizer)
}

// validateClients checks the clients that may run an agent: client names,
// each a subject token, none twice.
func validateClients(list []string) error {
	if len(list) > MaxClients {
		return config.Errorf("clients", "must hold at most %d entries, got %d", MaxClients, len(list))
	}
	seen := make(map[string]bool, len(list))
	for i, c := range list {
		f := fmt.Sprintf("clients[%d]", i)
		if !protocol.ValidToken(c) {
			return config.Errorf(f, "must be a client name (%s), got %q", protocol.TokenPattern, clip(c))
		}
		if seen[c] {
			return config.Errorf(f, "repeats %q", c)
		}
		seen[c] = true
	}
	return nil
}

func (m *Model) validate(f string) error {
	known := false
	for _, p := range Providers {
		known = known || m.Provider == p
	}
	if !known {
		return config.Errorf(f+".provider", "must be one of %s, got %q", strings.Join(Providers, ", "), clip(m.Provider))
	}
	if m.Provider == "scripted" {
		if len(m.Script) == 0 {
			return config.Errorf(f+".script", "required by the scripted provider")
		}
		if len(m.Script) > MaxScriptBytes {
			return config.Errorf(f+".script", "must be at most %d bytes, got %d", MaxScriptBytes, len(m.Script))
		}
		if _, err := scripted.Parse(m.Script); err != nil {
			return config.Errorf(f+".script", "not a valid script")
		}
		if m.Name != "" && !modelPattern.MatchString(m.Name) {
			return config.Errorf(f+".name", "must match %s", modelPattern)
		}
	} else {
		switch {
		case len(m.Script) > 0:
			return config.Errorf(f+".script", "only for the scripted provider")
		case m.Name == "":
			return config.Errorf(f+".name", "required")
		case !modelPattern.MatchString(m.Name):
			return config.Errorf(f+".name", "must match %s, got %q", modelPattern, clip(m.Name))
		}
	}
	if m.BaseURL != "" {
		if err := validateBaseURL(m.BaseURL); err != nil {
			return config.Errorf(f+".base_url", "%v", err)
		}
	}
	if m.APIKeyEnv != "" {
		switch {
		case !envPattern.MatchString(m.APIKeyEnv):
			return config.Errorf(f+".api_key_env", "must match %s, got %q", envPattern, clip(m.APIKeyEnv))
		case strings.HasPrefix(m.APIKeyEnv, "NATS_") || strings.HasPrefix(m.APIKeyEnv, "TOOLFLEET_"):
			return config.Errorf(f+".api_key_env", "must not name one of the fleet's own credentials, got %q", m.APIKeyEnv)
		}
	}
	if t := m.Temperature; t != nil && (math.IsNaN(*t) || *t < 0 || *t > 2) {
		return config.Errorf(f+".temperature", "must be a number in [0, 2]")
	}
	if m.MaxTokens < 0 || m.MaxTokens > MaxTokensPerAnswer {
		return config.Errorf(f+".max_tokens", "must be in [0, %d], got %d", MaxTokensPerAnswer, m.MaxTokens)
	}
	return nil
}

func validateBaseURL(s string) error {
	if len(s) > 2048 {
		return errors.New("must be at most 2048 bytes")
	}
	for _, r := range s {
		if r < 0x21 || r == 0x7f {
			return errors.New("must not hold spaces or control characters")
		}
	}
	if !strings.HasPrefix(s, "http://") && !strings.HasPrefix(s, "https://") {
		return errors.New("scheme must be http or https")
	}
	if strings.Contains(strings.SplitN(strings.SplitN(s, "://", 2)[1], "/", 2)[0], "@") {
		return errors.New("must not carry credentials")
	}
	rest := strings.SplitN(s, "://", 2)[1]
	if rest == "" || rest[0] == '/' {
		return errors.New("host required")
	}
	return nil
}

// validatePatterns checks a list of tool names or patterns. Patterns
// ("prefix_*", "*") are allowed in tools; require_approval takes names and
// "*".
func validatePatterns(field string, list []string, prefixes bool) error {
	if len(list) > MaxPatterns {
		return config.Errorf(field, "must hold at most %d entries, got %d", MaxPatterns, len(list))
	}
	seen := make(map[string]bool, len(list))
	for i, p := range list {
		f := fmt.Sprintf("%s[%d]", field, i)
		name, star := strings.CutSuffix(p, "*")
		switch {
		case p == "*":
		case star && !prefixes:
			return config.Errorf(f, "must be a tool name or *, got %q", clip(p))
		case star && (strings.Contains(name, "*") || !protocol.ValidToken(name)):
			return config.Errorf(f, "must be a tool name, a prefix ending in * or *, got %q", clip(p))
		case !star && !protocol.ValidToken(p):
			return config.Errorf(f, "must be a tool name (%s), got %q", protocol.TokenPattern, clip(p))
		}
		if seen[p] {
			return config.Errorf(f, "repeats %q", clip(p))
		}
		seen[p] = true
	}
	return nil
}

func (l *Limits) validate() error {
	ints := []struct {
		field  string
		v, max int
	}{
		{"limits.max_rounds", l.MaxRounds, MaxRounds},
		{"limits.max_tool_calls_per_round", l.MaxToolCallsPerRound, MaxToolCallsPerRound},
		{"limits.max_observation_chars", l.MaxObservationChars, MaxObservationChars},
		{"limits.max_history_messages", l.MaxHistoryMessages, MaxHistoryMessages},
	}
	for _, r := range ints {
		if r.v < 0 || r.v > r.max {
			return config.Errorf(r.field, "must be in [1, %d] (or absent), got %d", r.max, r.v)
		}
	}
	durs := []struct {
		field string
		v     Duration
	}{
		{"limits.tool_timeout", l.ToolTimeout},
		{"limits.max_run_duration", l.MaxRunDuration},
	}
	for _, r := range durs {
		if r.v < 0 || time.Duration(r.v) > MaxDuration {
			return config.Errorf(r.field, "must be in (0, %s] (or absent), got %s", MaxDuration, time.Duration(r.v))
		}
	}
	return nil
}

func (b *Budget) validate(m Model, sum *Model) error {
	switch {
	case b.InputTokens < 0 || b.InputTokens > MaxBudgetTokens:
		return config.Errorf("budget.input_tokens", "must be in [1, %d] (or absent), got %d", int64(MaxBudgetTokens), b.InputTokens)
	case b.OutputTokens < 0 || b.OutputTokens > MaxBudgetTokens:
		return config.Errorf("budget.output_tokens", "must be in [1, %d] (or absent), got %d", int64(MaxBudgetTokens), b.OutputTokens)
	case math.IsNaN(b.CostUSD) || b.CostUSD < 0 || b.CostUSD > MaxCostUSD:
		return config.Errorf("budget.cost_usd", "must be a number in (0, %d] (or absent)", MaxCostUSD)
	case b.ToolCalls < 0 || b.ToolCalls > MaxToolCalls:
		return config.Errorf("budget.tool_calls", "must be in [1, %d] (or absent), got %d", MaxToolCalls, b.ToolCalls)
	case len(b.Prices) > MaxPrices:
		return config.Errorf("budget.prices", "must hold at most %d models, got %d", MaxPrices, len(b.Prices))
	}
	for name, p := range b.Prices {
		f := "budget.prices." + clip(name)
		if !modelPattern.MatchString(name) {
			return config.Errorf(f, "must be keyed by a model name (%s)", modelPattern)
		}
		for _, v := range []struct {
			field string
			v     float64
		}{{".input", p.Input}, {".output", p.Output}} {
			if math.IsNaN(v.v) || v.v < 0 || v.v > MaxPrice {
				return config.Errorf(f+v.field, "must be a number in [0, %d] (USD per million tokens)", MaxPrice)
			}
		}
	}
	if b.CostUSD > 0 {
		if _, ok := b.Prices[m.Name]; !ok {
			return config.Errorf("budget.prices", "must price the agent's model %q: budget.cost_usd needs it", clip(m.Name))
		}
	}
	if sum != nil && b.CostUSD > 0 {
		if _, ok := b.Prices[sum.Name]; !ok {
			return config.Errorf("budget.prices", "must price the summarizer's model %q: budget.cost_usd needs it", clip(sum.Name))
		}
	}
	if (b.CostUSD > 0 || b.OutputTokens > 0) && m.MaxTokens == 0 {
		return config.Errorf("model.max_tokens", "required by budget.cost_usd and budget.output_tokens: an answer's cost must be bounded before it is asked for")
	}
	return nil
}

// CheckEnv checks what only the process that runs the agent can: that the
// variables holding the keys of its model and summarizer are set (lookup
// is os.LookupEnv, or the secrets store's), and that each key goes only to
// a host allowed for it ([Definition.CheckKeyHosts], with the hosts of
// [EnvKeyHosts] and the base URL variables that lookup reads). The error
// is a [config.Error] for model.api_key_env or model.base_url (or the
// summarizer's); it never holds a value. A nil lookup checks nothing (a
// definition put from a machine that does not run it: where it runs, the
// model client is refused all the same); an EnvKeyHosts that does not
// parse allows no host but the providers' own.
func (d *Definition) CheckEnv(lookup func(string) (string, bool)) error {
	if lookup == nil {
		return nil
	}
	getenv := func(n string) string { v, _ := lookup(n); return v }
	// A value that does not parse allows no host more.
	allow, _ := ParseKeyHosts(getenv(EnvKeyHosts))
	if err := d.CheckKeyHosts(allow, getenv); err != nil {
		return err
	}
	check := func(field string, m *Model) error {
		name := m.KeyEnv()
		if name == "" {
			return nil
		}
		if v, ok := lookup(name); !ok || v == "" {
			return config.Errorf(field+".api_key_env", "the environment variable %s is not set", name)
		}
		return nil
	}
	if err := check("model", &d.Model); err != nil {
		return err
	}
	if d.Summarizer != nil {
		return check("summarizer", d.Summarizer)
	}
	return nil
}

// KeyEnv is the environment variable that holds the model's key:
// APIKeyEnv, or the provider's usual one ("" for scripted).
func (m *Model) KeyEnv() string {
	if m.APIKeyEnv != "" {
		return m.APIKeyEnv
	}
	switch m.Provider {
	case "openai", "openai-responses":
		return "OPENAI_API_KEY"
	case "anthropic":
		return "ANTHROPIC_API_KEY"
	}
	return ""
}

// Marshal returns d's canonical JSON form, as stored.
func (d *Definition) Marshal() ([]byte, error) { return json.Marshal(d) }
