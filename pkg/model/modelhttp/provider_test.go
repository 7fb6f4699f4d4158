package modelhttp_test

import (
	"errors"
	"testing"

	"github.com/toolfleet/toolfleet/pkg/config"
	"github.com/toolfleet/toolfleet/pkg/model/modelhttp"
)

func TestProviderDefaultsAndValidation(t *testing.T) {
	e := modelhttp.Endpoint{EnvBaseURL: "TEST_MODEL_BASE_URL", EnvAPIKey: "TEST_MODEL_API_KEY", DefaultBaseURL: "https://api.example.com/v1/"}
	t.Setenv("TEST_MODEL_BASE_URL", "")
	t.Setenv("TEST_MODEL_API_KEY", "from-env")
	p := modelhttp.Provider{Policy: modelhttp.Policy{Provider: "test", Model: "m"}}.WithDefaults(e)
	if p.BaseURL != e.DefaultBaseURL || p.APIKey != "from-env" || p.MaxRetries != modelhttp.DefaultMaxRetries {
		t.Fatalf("defaults: base %q key %q retries %d", p.BaseURL, p.APIKey, p.MaxRetries)
	}
	if err := p.Validate(); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	t.Setenv("TEST_MODEL_BASE_URL", "ftp://user:CANARY-secret@example.com")
	p = modelhttp.Provider{Policy: modelhttp.Policy{Provider: "test", Model: "m"}, APIKey: "k"}.WithDefaults(e)
	err := p.Validate()
	var ce config.Error
	if !errors.As(err, &ce) || ce.ConfigField() != "BaseURL" {
		t.Fatalf("Validate = %v, want a config.Error for BaseURL", err)
	}
	if got := err.Error(); got != "test: config: BaseURL: scheme must be http or https" {
		t.Fatalf("error %q quotes more than the field and the rule", got)
	}
	if opts := p.OpenAIOptions(); len(opts) != 5 {
		t.Fatalf("OpenAIOptions: %d options, want base URL, client, no retries, the response bound and the key", len(opts))
	}
	if opts := p.AnthropicOptions(); len(opts) != 8 {
		t.Fatalf("AnthropicOptions: %d options, want 8", len(opts))
	}
}
