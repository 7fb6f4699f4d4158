package responses

import (
	"errors"
	"net/http"
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
// field but never quotes its value (it may be a key or a URL with
// credentials). It is a config.Error.
type ValidationError = modelhttp.ConfigError

// endpoint is where the defaults of BaseURL and APIKey come from.
var endpoint = modelhttp.Endpoint{EnvBaseURL: EnvBaseURL, EnvAPIKey: EnvAPIKey, DefaultBaseURL: DefaultBaseURL}

// provider is c's API, key, client and retry policy, with their defaults.
func (c Config) provider() modelhttp.Provider {
	return modelhttp.Provider{
		Policy: modelhttp.Policy{Provider: "openai-responses", Model: c.Model, Logger: c.Logger,
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
	if c.MaxOutputTokens < 0 {
		return p.ConfigError("MaxOutputTokens", errors.New("must be >= 0"))
	}
	if err := modelhttp.ValidateTemperature(c.Temperature); err != nil {
		return p.ConfigError("Temperature", err)
	}
	return nil
}
