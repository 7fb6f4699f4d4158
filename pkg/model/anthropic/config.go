package anthropic

import (
	"errors"
	"net/http"
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

	// Temperature is sent when set (the API takes 0 to 1). Default: unset
	// (the server's default).
	Temperature *float64

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
// field but never quotes its value (it may be a key or a URL with
// credentials). It is a config.Error.
type ValidationError = modelhttp.ConfigError

// endpoint is where the defaults of BaseURL and APIKey come from.
var endpoint = modelhttp.Endpoint{EnvBaseURL: EnvBaseURL, EnvAPIKey: EnvAPIKey, DefaultBaseURL: DefaultBaseURL}

// provider is c's API, key, client and retry policy, with their defaults.
func (c Config) provider() modelhttp.Provider {
	return modelhttp.Provider{
		Policy: modelhttp.Policy{Provider: "anthropic", Model: c.Model, Logger: c.Logger,
			RequestTimeout: c.RequestTimeout, MaxRetries: c.MaxRetries, RetryBaseDelay: c.RetryBaseDelay,
			MaxRetryDelay: c.MaxRetryDelay, MaxResponseBytes: c.MaxResponseBytes},
		BaseURL: c.BaseURL, APIKey: c.APIKey, HTTPClient: c.HTTPClient,
	}.WithDefaults(endpoint)
}

// withDefaults returns c with every default applied, the policy's
// included.
func (c Config) withDefaults() Config {
	p := c.provider()
	c.BaseURL, c.APIKey = p.BaseURL, p.APIKey
	if c.MaxTokens == 0 {
		c.MaxTokens = DefaultMaxTokens
	}
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
	p := c.provider()
	if err := p.Validate(); err != nil {
		return err
	}
	if c.MaxTokens < 0 {
		return p.ConfigError("MaxTokens", errors.New("must be > 0"))
	}
	if err := modelhttp.ValidateTemperature(c.Temperature); err != nil {
		return p.ConfigError("Temperature", err)
	}
	return nil
}
