package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/rs/zerolog"

	"github.com/toolfleet/toolfleet/internal/procsec"
	"github.com/toolfleet/toolfleet/pkg/agent"
	"github.com/toolfleet/toolfleet/pkg/config"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/model/anthropic"
	"github.com/toolfleet/toolfleet/pkg/model/demo"
	"github.com/toolfleet/toolfleet/pkg/model/openai"
	"github.com/toolfleet/toolfleet/pkg/model/providers"
	"github.com/toolfleet/toolfleet/pkg/model/responses"
	"github.com/toolfleet/toolfleet/pkg/model/scripted"
)

// modelFlags choose the model provider.
type modelFlags struct {
	model, modelBaseURL string
	previousResponseID  bool
	// temperature is nil unless --temperature is given; maxTokens 0 is
	// the provider's default.
	temperature *float64
	maxTokens   int
}

func (f *modelFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.model, "model", "", "scripted:FILE | openai:MODEL | openai-responses:MODEL | anthropic:MODEL (default: the bundled demo model, which answers arithmetic with the calculator)")
	fs.StringVar(&f.modelBaseURL, "model-base-url", "", "the provider's API base URL (default: env OPENAI_BASE_URL for openai and openai-responses, ANTHROPIC_BASE_URL for anthropic; keys from OPENAI_API_KEY, ANTHROPIC_API_KEY)")
	fs.Func("temperature", "sampling temperature sent to the model (openai, openai-responses, anthropic; default: the provider's)", func(v string) error {
		t, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return errors.New("must be a number")
		}
		f.temperature = &t
		return nil
	})
	fs.IntVar(&f.maxTokens, "max-tokens", 0, "bound on each model answer, in tokens (openai: max_completion_tokens, openai-responses: max_output_tokens, anthropic: max_tokens, default 4096; default: the provider's)")
	fs.BoolVar(&f.previousResponseID, "previous-response-id", false, "openai-responses: chain turns with previous_response_id (stored responses) instead of sending the full input each turn")
}

func (f *modelFlags) newModel(log zerolog.Logger) (loop.Model, error) {
	kind, arg, _ := strings.Cut(f.model, ":")
	if f.previousResponseID && kind != "openai-responses" {
		return nil, &usageError{"--previous-response-id needs --model openai-responses:MODEL"}
	}
	var m loop.Model
	var err error
	if (f.temperature != nil || f.maxTokens != 0) && (kind == "" || kind == "scripted") {
		return nil, &usageError{"--temperature and --max-tokens need --model openai:MODEL, openai-responses:MODEL or anthropic:MODEL"}
	}
	if f.maxTokens < 0 {
		return nil, &usageError{"--max-tokens must be >= 1"}
	}
	switch kind {
	case "":
		return demo.New(), nil
	case "scripted":
		if arg == "" {
			return nil, &usageError{"--model scripted:FILE needs a file"}
		}
		m, err = scripted.Load(arg)
	case "openai", "openai-responses", "anthropic":
		if arg == "" {
			return nil, &usageError{fmt.Sprintf("--model %s:MODEL needs a model name", kind)}
		}
		keyEnv, baseEnv := openai.EnvAPIKey, openai.EnvBaseURL
		if kind == "anthropic" {
			keyEnv, baseEnv = anthropic.EnvAPIKey, anthropic.EnvBaseURL
		}
		// the provider's own API refuses every call without a key: say so
		// now, naming the variable, rather than after a failed run
		if procsec.Getenv(keyEnv) == "" && f.modelBaseURL == "" && os.Getenv(baseEnv) == "" {
			return nil, &usageError{fmt.Sprintf("--model %s:%s needs the provider's API key in env %s (or --model-base-url for a server that takes none)", kind, arg, keyEnv)}
		}
		switch kind {
		case "openai":
			m, err = openai.New(openai.Config{Model: arg, BaseURL: f.modelBaseURL, APIKey: procsec.Getenv(openai.EnvAPIKey), Temperature: f.temperature, MaxTokens: f.maxTokens, Logger: log})
		case "openai-responses":
			m, err = responses.New(responses.Config{Model: arg, BaseURL: f.modelBaseURL, APIKey: procsec.Getenv(responses.EnvAPIKey), PreviousResponseID: f.previousResponseID, Temperature: f.temperature, MaxOutputTokens: f.maxTokens, Logger: log})
		default:
			m, err = anthropic.New(anthropic.Config{Model: arg, BaseURL: f.modelBaseURL, APIKey: procsec.Getenv(anthropic.EnvAPIKey), Temperature: f.temperature, MaxTokens: f.maxTokens, Logger: log})
		}
	default:
		return nil, &usageError{fmt.Sprintf("--model must be scripted:FILE, openai:MODEL, openai-responses:MODEL or anthropic:MODEL, got %q", f.model)}
	}
	if err != nil {
		if config.Errors(err) != nil {
			return nil, nest("Model", err)
		}
		return nil, &usageError{fmt.Sprintf("--model: %v", err)}
	}
	return m, nil
}

// agentModel reads the definition of --agent FILE and returns its model:
// the hook of "coordinator run --agent". The definition is kept for the
// coordinator's configuration (fleetFlags.config).
func (f *fleetFlags) agentModel(path string) func(zerolog.Logger) (loop.Model, error) {
	return func(log zerolog.Logger) (loop.Model, error) {
		if f.model != "" || f.modelBaseURL != "" || f.temperature != nil || f.maxTokens != 0 {
			return nil, &usageError{"--agent FILE takes its model from the definition: no --model, --model-base-url, --temperature or --max-tokens"}
		}
		doc, err := os.ReadFile(path)
		if err != nil {
			return nil, &usageError{fmt.Sprintf("--agent: %v", err)}
		}
		d, err := agent.Parse(doc)
		if err == nil {
			err = d.CheckEnv(func(n string) (string, bool) { v := procsec.Getenv(n); return v, v != "" })
		}
		if err != nil {
			return nil, &usageError{fmt.Sprintf("--agent %s: %v", path, err)}
		}
		models := &providers.Models{Getenv: procsec.Getenv, Logger: log}
		m, err := models.Model(d.Model)
		if err != nil {
			return nil, &usageError{fmt.Sprintf("--agent %s: %v", path, err)}
		}
		if d.Summarizer != nil {
			if f.summarizer, err = models.Model(*d.Summarizer); err != nil {
				return nil, &usageError{fmt.Sprintf("--agent %s: summarizer: %v", path, err)}
			}
		}
		f.agent = &d
		return m, nil
	}
}
