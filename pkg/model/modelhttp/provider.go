package modelhttp

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"time"

	anthropicopt "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	openaiopt "github.com/openai/openai-go/v3/option"
)

// Provider is what every provider's Config says about reaching its API:
// the retry policy, where the API is, the key and the HTTP client. Each
// provider package builds one from its own Config.
type Provider struct {
	Policy
	// BaseURL is the API root.
	BaseURL string
	// APIKey is the provider's key; it never appears in errors or logs.
	APIKey string
	// HTTPClient sends the requests. Default: [HTTPClient]'s.
	HTTPClient *http.Client
}

// Endpoint names where a provider's defaults come from: the environment
// variables read for an empty BaseURL and APIKey, and the base URL used
// when both the field and the variable are empty.
type Endpoint struct {
	EnvBaseURL, EnvAPIKey, DefaultBaseURL string
}

// WithDefaults returns p with its policy's defaults and, for an empty
// BaseURL or APIKey, e's environment variable (then e.DefaultBaseURL).
func (p Provider) WithDefaults(e Endpoint) Provider {
	if p.BaseURL == "" {
		p.BaseURL = os.Getenv(e.EnvBaseURL)
	}
	if p.BaseURL == "" {
		p.BaseURL = e.DefaultBaseURL
	}
	if p.APIKey == "" {
		p.APIKey = os.Getenv(e.EnvAPIKey)
	}
	p.Policy = p.Policy.WithDefaults()
	return p
}

// Validate reports the first field that breaks its rule (Model, BaseURL,
// then the policy's) as a [*ConfigError] of the provider.
func (p Provider) Validate() error {
	if field, err := p.ValidateConfig(p.BaseURL); err != nil {
		return p.ConfigError(field, err)
	}
	return nil
}

// ConfigError returns the [*ConfigError] of the provider's field.
func (p Provider) ConfigError(field string, err error) *ConfigError {
	return &ConfigError{Provider: p.Provider, Field: field, Err: err}
}

// ConfigError is a provider's Config field that breaks its rule. It names
// the field but never quotes its value (it may be a key or a URL with
// credentials). It is a config.Error.
type ConfigError struct {
	// Provider names the provider ("openai").
	Provider string
	// Field is the Config field.
	Field string
	// Err is the rule it breaks.
	Err error
}

func (e *ConfigError) Error() string {
	return fmt.Sprintf("%s: config: %s: %v", e.Provider, e.Field, e.Err)
}

// Unwrap returns e.Err.
func (e *ConfigError) Unwrap() error { return e.Err }

// ConfigField returns e.Field.
func (e *ConfigError) ConfigField() string { return e.Field }

// ConfigProblem returns the text of e.Err.
func (e *ConfigError) ConfigProblem() string { return e.Err.Error() }

// OpenAIOptions returns the openai-go request options of p. The service is
// built without the SDK's environment defaults (the provider reads its own
// variables and nothing else: no organization, project or custom headers)
// and without its retries, which are the [Policy]'s; every response body
// is bounded by MaxResponseBytes.
func (p Provider) OpenAIOptions() []openaiopt.RequestOption {
	limit := p.MaxResponseBytes
	opts := []openaiopt.RequestOption{
		openaiopt.WithBaseURL(p.BaseURL),
		openaiopt.WithHTTPClient(HTTPClient(p.HTTPClient)),
		openaiopt.WithMaxRetries(0),
		openaiopt.WithMiddleware(func(r *http.Request, next openaiopt.MiddlewareNext) (*http.Response, error) {
			res, err := next(r)
			return LimitResponse(res, err, limit)
		}),
	}
	if p.APIKey != "" {
		opts = append(opts, openaiopt.WithAPIKey(p.APIKey))
	}
	return opts
}

// AnthropicOptions returns the anthropic-sdk-go request options of p: as
// [Provider.OpenAIOptions], and without the SDK's own timeouts and
// OpenTelemetry spans (the loop makes the model-call spans). The key is
// sent as x-api-key.
func (p Provider) AnthropicOptions() []anthropicopt.RequestOption {
	limit := p.MaxResponseBytes
	opts := []anthropicopt.RequestOption{
		anthropicopt.WithBaseURL(p.BaseURL),
		anthropicopt.WithHTTPClient(HTTPClient(p.HTTPClient)),
		anthropicopt.WithMaxRetries(0),
		anthropicopt.WithoutOpenTelemetry(),
		anthropicopt.WithOpenTelemetryPropagation(false),
		// The SDK derives a timeout from max_tokens and refuses large
		// values without streaming; each attempt has the policy's own.
		anthropicopt.WithRequestTimeout(p.RequestTimeout + time.Second),
		anthropicopt.WithMiddleware(func(r *http.Request, next anthropicopt.MiddlewareNext) (*http.Response, error) {
			res, err := next(r)
			return LimitResponse(res, err, limit)
		}),
	}
	if p.APIKey != "" {
		opts = append(opts, anthropicopt.WithHeader("x-api-key", p.APIKey))
	}
	return opts
}

// ClassifyOpenAI turns an error of the openai-go SDK into one of this
// package's errors, dropping everything that could carry the key or the
// request: the SDK's error value holds the request, and transport errors
// name the URL. An attempt that timed out (actx) is a timeout even when a
// status arrived with it.
func (p Policy) ClassifyOpenAI(ctx, actx context.Context, err error) error {
	var apiErr *openai.Error
	if ctx.Err() == nil && actx.Err() == nil && !errors.Is(err, ErrResponseTooLarge) && errors.As(err, &apiErr) {
		e := &APIError{
			Provider:   p.Provider,
			StatusCode: apiErr.StatusCode,
			Type:       SafeIdentifier(apiErr.Type),
			Code:       SafeIdentifier(apiErr.Code),
			Message:    apiErr.Message,
		}
		if apiErr.Response != nil {
			e.RetryAfter, e.RetryAfterSet = RetryAfter(apiErr.Response.Header)
		}
		return e
	}
	return p.Classify(ctx, actx, err)
}
