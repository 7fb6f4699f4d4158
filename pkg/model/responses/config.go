package responses

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
	DefaultBaseURL = "https://api.openai.com/v1/"

	// EnvBaseURL names the environment variable read when Config.BaseURL is
	// empty.
	EnvBaseURL = "OPENAI_BASE_URL"
	// EnvAPIKey names the environment variable read when Config.APIKey is
	// empty.
	EnvAPIKey = "OPENAI_API_KEY"
)

// Config configures a [Model]. The zero value of every field but Model means
// its default.
type Config struct {
	// Model is the model name, e.g. "gpt-4.1-mini". Required.
	Model string

	// BaseURL is the API root that "responses" is appended to. Default: the
	// OPENAI_BASE_URL environment variable, else the OpenAI API.
	BaseURL string

	// APIKey is sent as a bearer token. Default: the OPENAI_API_KEY
	// environment variable; it may stay empty for local servers. It never
	// appears in errors or logs.
	APIKey string

	// PreviousResponseID makes the model chain turns with
	// previous_response_id (and store: true): a turn sends only what follows
	// the last assistant message — the function_call_output of every call of
	// that response, then any new message. It is used only when the
	// transcript's last assistant message is exactly what the previous
	// response returned and every one of its calls is answered; otherwise,
	// and when the server no longer knows the id, the full input is sent.
	// Default: false — stateless (store: false, the full input every turn).
	PreviousResponseID bool

	// MaxOutputTokens, when positive, is sent as max_output_tokens.
	MaxOutputTokens int

	// Temperature is sent when set.
	Temperature *float64

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

	// Logger receives a debug line per attempt and a warning per retry,
	// never content or the key. Default: discard.
	Logger zerolog.Logger
}

// ValidationError is a [Config] field that breaks its rule. It names the
// field but never quotes its value.
type ValidationError struct {
	Field string
	Err   error
}

func (e *ValidationError) Error() string {
	return fmt.Sprintf("openai-responses: config: %s: %v", e.Field, e.Err)
}

func (e *ValidationError) Unwrap() error { return e.Err }

// ConfigField returns e.Field: ValidationError is a [config.Error].
func (e *ValidationError) ConfigField() string { return e.Field }

// ConfigProblem returns the text of e.Err.
func (e *ValidationError) ConfigProblem() string { return e.Err.Error() }

func (c Config) policy() modelhttp.Policy {
	return modelhttp.Policy{
		Provider: "openai-responses", Model: c.Model,
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
	return c
}

// Validate reports the first field of c, after defaults, that breaks its rule.
func (c Config) Validate() error { return c.withDefaults().validate() }

func (c Config) validate() error {
	if field, err := c.policy().ValidateConfig(c.BaseURL); err != nil {
		return &ValidationError{Field: field, Err: err}
	}
	if c.MaxOutputTokens < 0 {
		return &ValidationError{Field: "MaxOutputTokens", Err: errors.New("must be >= 0")}
	}
	if err := modelhttp.ValidateTemperature(c.Temperature); err != nil {
		return &ValidationError{Field: "Temperature", Err: err}
	}
	return nil
}
