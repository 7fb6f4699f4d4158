package openai

import (
	"errors"
	"net/http"
	"time"

	"github.com/rs/zerolog"

	"github.com/toolfleet/toolfleet/pkg/model/modelhttp"
)

// Defaults applied by [New] to zero-valued [Config] fields.
const (
	DefaultBaseURL          = "https://api.openai.com/v1/"
	DefaultRequestTimeout   = modelhttp.DefaultRequestTimeout
	DefaultMaxRetries       = modelhttp.DefaultMaxRetries
	DefaultRetryBaseDelay   = modelhttp.DefaultRetryBaseDelay
	DefaultMaxRetryDelay    = modelhttp.DefaultMaxRetryDelay
	DefaultMaxResponseBytes = modelhttp.DefaultMaxResponseBytes

	// EnvBaseURL names the environment variable read when Config.BaseURL is empty.
	EnvBaseURL = "OPENAI_BASE_URL"
	// EnvAPIKey names the environment variable read when Config.APIKey is empty.
	EnvAPIKey = "OPENAI_API_KEY"
)

// Config configures a [Model]. The zero value of every field but Model means
// its default.
type Config struct {
	// Model is the model name sent with every request, e.g. "gpt-4.1-mini".
	// Required.
	Model string

	// BaseURL is the API root that "chat/completions" is appended to, e.g.
	// "http://localhost:8000/v1" for vLLM, "http://localhost:11434/v1" for
	// Ollama or "http://localhost:8080/v1" for llama.cpp. Default: the
	// OPENAI_BASE_URL environment variable, else the OpenAI API.
	BaseURL string

	// APIKey is sent as "Authorization: Bearer <key>". Default: the
	// OPENAI_API_KEY environment variable. It may stay empty for local
	// servers, in which case no Authorization header is sent. It never
	// appears in errors or logs.
	APIKey string

	// RequestTimeout bounds one attempt, from sending the request to reading
	// the whole response. Default: 120s. A run's context deadline, if
	// shorter, wins.
	RequestTimeout time.Duration

	// MaxRetries is how many times a failed attempt is retried: after HTTP
	// 429, any 5xx, a transport error or an attempt timeout; never after any
	// other status. Default: 3. A negative value disables retries.
	MaxRetries int

	// RetryBaseDelay is the backoff before the first retry; each further
	// retry doubles it, up to MaxRetryDelay, and every wait is jittered
	// (between half and all of the computed delay). A Retry-After or
	// Retry-After-Ms response header replaces the computed delay. Default:
	// 500ms.
	RetryBaseDelay time.Duration

	// MaxRetryDelay bounds every wait between attempts. A server that asks
	// (with Retry-After) for a longer wait gets no retry: the error is
	// returned at once. Default: 30s.
	MaxRetryDelay time.Duration

	// Temperature is sent when set. Default: unset (the server's default).
	Temperature *float64

	// MaxTokens, when positive, is sent as max_completion_tokens. Default:
	// unset (the server's default).
	MaxTokens int

	// MaxResponseBytes bounds the body read from one response, success or
	// error; a larger body fails the call with [ErrResponseTooLarge] and is
	// not retried. Default: 8 MiB.
	MaxResponseBytes int64

	// HTTPClient sends the requests. Default: a client of its own whose
	// transport is a clone of http.DefaultTransport.
	HTTPClient *http.Client

	// Logger receives one debug line per attempt and a warning per retry:
	// model, attempt, status, durations, counts and token usage — never
	// prompts, content, arguments or the key. Default: discard.
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
		Policy: modelhttp.Policy{Provider: "openai", Model: c.Model, Logger: c.Logger,
			RequestTimeout: c.RequestTimeout, MaxRetries: c.MaxRetries, RetryBaseDelay: c.RetryBaseDelay,
			MaxRetryDelay: c.MaxRetryDelay, MaxResponseBytes: c.MaxResponseBytes},
		BaseURL: c.BaseURL, APIKey: c.APIKey, HTTPClient: c.HTTPClient,
	}.WithDefaults(endpoint)
}

// withDefaults returns c with the environment consulted for BaseURL and
// APIKey (the retry fields' defaults are the policy's).
func (c Config) withDefaults() Config {
	p := c.provider()
	c.BaseURL, c.APIKey = p.BaseURL, p.APIKey
	return c
}

// Validate reports the first field of c, after defaults, that breaks its rule.
func (c Config) Validate() error { return c.withDefaults().validate() }

func (c Config) validate() error {
	p := c.provider()
	if err := p.Validate(); err != nil {
		return err
	}
	if err := modelhttp.ValidateTemperature(c.Temperature); err != nil {
		return p.ConfigError("Temperature", err)
	}
	if c.MaxTokens < 0 {
		return p.ConfigError("MaxTokens", errors.New("must be >= 0"))
	}
	return nil
}
