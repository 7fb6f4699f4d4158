package anthropic

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"time"

	"github.com/rs/zerolog"

	"github.com/toolfleet/toolfleet/pkg/model/modelhttp"
)

// Defaults applied by [New] to zero-valued [Config] fields.
const (
	DefaultBaseURL   = "https://api.anthropic.com/"
	DefaultMaxTokens = 4096

	// EnvBaseURL names the environment variable read when Config.BaseURL is
	// empty.
	EnvBaseURL = "ANTHROPIC_BASE_URL"
	// EnvAPIKey names the environment variable read when Config.APIKey is
	// empty.
	EnvAPIKey = "ANTHROPIC_API_KEY"
)

// Config configures a [Model]. The zero value of every field but Model means
// its default.
type Config struct {
	// Model is the model name sent with every request, e.g.
	// "claude-sonnet-4-5". Required.
	Model string

	// BaseURL is the API root that "v1/messages" is appended to. Default: the
	// ANTHROPIC_BASE_URL environment variable, else the Anthropic API.
	BaseURL string

	// APIKey is sent as the x-api-key header. Default: the ANTHROPIC_API_KEY
	// environment variable. It never appears in errors or logs.
	APIKey string

	// MaxTokens is max_tokens, which the API requires. Default: 4096.
	MaxTokens int

	// DisableParallelToolUse sends tool_choice {"type":"auto",
	// "disable_parallel_tool_use":true}: at most one tool call per turn.
	// Default: false (parallel tool use, as the API defaults to).
	DisableParallelToolUse bool

	// RequestTimeout, MaxRetries, RetryBaseDelay, MaxRetryDelay and
	// MaxResponseBytes are the retry policy, with the defaults and rules of
	// package openai (see [modelhttp.Policy]).
	RequestTimeout   time.Duration
	MaxRetries       int
	RetryBaseDelay   time.Duration
	MaxRetryDelay    time.Duration
	MaxResponseBytes int64

	// HTTPClient sends the requests. Default: a client of its own.
	HTTPClient *http.Client

	// Logger receives one debug line per attempt, a warning per retry and a
	// warning per tool left out of the request — ids, counts, statuses,
	// durations and tool names, never content or the key. Default: discard.
	Logger zerolog.Logger
}

// ValidationError is a [Config] field that breaks its rule. It names the
// field but never quotes its value.
type ValidationError struct {
	Field string
	Err   error
}

func (e *ValidationError) Error() string {
	return fmt.Sprintf("anthropic: config: %s: %v", e.Field, e.Err)
}

func (e *ValidationError) Unwrap() error { return e.Err }

// ConfigField returns e.Field: ValidationError is a [config.Error].
func (e *ValidationError) ConfigField() string { return e.Field }

// ConfigProblem returns the text of e.Err.
func (e *ValidationError) ConfigProblem() string { return e.Err.Error() }

func (c Config) policy() modelhttp.Policy {
	return modelhttp.Policy{
		Provider: "anthropic", Model: c.Model,
		RequestTimeout: c.RequestTimeout, MaxRetries: c.MaxRetries,
		RetryBaseDelay: c.RetryBaseDelay, MaxRetryDelay: c.MaxRetryDelay,
		MaxResponseBytes: c.MaxResponseBytes, Logger: c.Logger,
	}.WithDefaults()
}

func (c Config) withDefaults() Config {
	if c.BaseURL == "" {
		c.BaseURL = os.Getenv(EnvBaseURL)
	}
	if c.BaseURL == "" {
		c.BaseURL = DefaultBaseURL
	}
	if c.APIKey == "" {
		c.APIKey = os.Getenv(EnvAPIKey)
	}
	if c.MaxTokens == 0 {
		c.MaxTokens = DefaultMaxTokens
	}
	p := c.policy()
	c.RequestTimeout, c.MaxRetries, c.RetryBaseDelay = p.RequestTimeout, p.MaxRetries, p.RetryBaseDelay
	c.MaxRetryDelay, c.MaxResponseBytes = p.MaxRetryDelay, p.MaxResponseBytes
	if c.MaxRetries == 0 {
		c.MaxRetries = -1 // keep "none" through a second withDefaults
	}
	return c
}

// Validate reports the first field of c, after defaults, that breaks its rule.
func (c Config) Validate() error { return c.withDefaults().validate() }

func (c Config) validate() error {
	if field, err := c.policy().ValidateConfig(c.BaseURL); err != nil {
		return &ValidationError{Field: field, Err: err}
	}
	if c.MaxTokens < 0 {
		return &ValidationError{Field: "MaxTokens", Err: errors.New("must be > 0")}
	}
	return nil
}
