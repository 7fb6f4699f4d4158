package main

import (
	"flag"
	"fmt"
	"strings"

	"github.com/rs/zerolog"

	"github.com/toolfleet/toolfleet/internal/procsec"
	"github.com/toolfleet/toolfleet/pkg/config"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/model/anthropic"
	"github.com/toolfleet/toolfleet/pkg/model/demo"
	"github.com/toolfleet/toolfleet/pkg/model/openai"
	"github.com/toolfleet/toolfleet/pkg/model/responses"
	"github.com/toolfleet/toolfleet/pkg/model/scripted"
)

// modelFlags choose the model provider.
type modelFlags struct {
	model, modelBaseURL string
	previousResponseID  bool
}

func (f *modelFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.model, "model", "", "scripted:FILE | openai:MODEL | openai-responses:MODEL | anthropic:MODEL (default: the bundled demo model, which answers arithmetic with the calculator)")
	fs.StringVar(&f.modelBaseURL, "model-base-url", "", "the provider's API base URL (default: env OPENAI_BASE_URL for openai and openai-responses, ANTHROPIC_BASE_URL for anthropic; keys from OPENAI_API_KEY, ANTHROPIC_API_KEY)")
	fs.BoolVar(&f.previousResponseID, "previous-response-id", false, "openai-responses: chain turns with previous_response_id (stored responses) instead of sending the full input each turn")
}

func (f *modelFlags) newModel(log zerolog.Logger) (loop.Model, error) {
	kind, arg, _ := strings.Cut(f.model, ":")
	if f.previousResponseID && kind != "openai-responses" {
		return nil, &usageError{"--previous-response-id needs --model openai-responses:MODEL"}
	}
	var m loop.Model
	var err error
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
		switch kind {
		case "openai":
			m, err = openai.New(openai.Config{Model: arg, BaseURL: f.modelBaseURL, APIKey: procsec.Getenv(openai.EnvAPIKey), Logger: log})
		case "openai-responses":
			m, err = responses.New(responses.Config{Model: arg, BaseURL: f.modelBaseURL, APIKey: procsec.Getenv(responses.EnvAPIKey), PreviousResponseID: f.previousResponseID, Logger: log})
		default:
			m, err = anthropic.New(anthropic.Config{Model: arg, BaseURL: f.modelBaseURL, APIKey: procsec.Getenv(anthropic.EnvAPIKey), Logger: log})
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
