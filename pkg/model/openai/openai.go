package openai

import (
	"context"
	"net/http"
	"time"

	sdk "github.com/openai/openai-go/v3"

	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/model/modelhttp"
)

// Model is a [loop.Model] over an OpenAI-compatible chat-completions API. It
// is safe for concurrent use.
type Model struct {
	cfg    Config
	policy modelhttp.Policy
	svc    sdk.ChatCompletionService
}

var (
	_ loop.Model     = (*Model)(nil)
	_ loop.Describer = (*Model)(nil)
)

// New validates cfg, after defaults, and returns a Model. It sends nothing.
func New(cfg Config) (*Model, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	p := cfg.provider()
	return &Model{cfg: cfg, policy: p.Policy, svc: sdk.NewChatCompletionService(p.OpenAIOptions()...)}, nil
}

// Complete sends one chat-completion request and maps the first choice onto
// a [loop.Response]. Attempts that fail with 429, a 5xx status, a transport
// error or a timeout are retried up to Config.MaxRetries times with jittered
// exponential backoff, honouring Retry-After; other failures return at once
// (see [modelhttp.Policy]). The error never contains the key, the request or
// the response body.
func (m *Model) Complete(ctx context.Context, req loop.Request) (*loop.Response, error) {
	params, err := m.buildParams(req)
	if err != nil {
		return nil, err
	}
	return modelhttp.Do(ctx, m.policy, "chat completion", func(ctx context.Context, n int) (*loop.Response, error) {
		return m.attempt(ctx, params, n, len(req.Messages), len(req.Tools))
	})
}

// Describe names the provider and model for spans (gen_ai.provider.name,
// gen_ai.request.model).
func (m *Model) Describe() (provider, model string) { return "openai", m.cfg.Model }

// attempt makes one request under its own timeout and classifies its error.
func (m *Model) attempt(ctx context.Context, params sdk.ChatCompletionNewParams, attempt, nMessages, nTools int) (*loop.Response, error) {
	actx, cancel := context.WithTimeout(ctx, m.policy.RequestTimeout)
	defer cancel()
	start := time.Now()
	cc, err := m.svc.New(actx, params)
	dur := time.Since(start)
	log := m.cfg.Logger
	if err != nil {
		err = m.classify(ctx, actx, err)
		log.Debug().Str(logModel, m.cfg.Model).Int(logAttempt, attempt).
			Int(logMessages, nMessages).Int(logTools, nTools).
			Str(logErrorKind, modelhttp.ErrorKind(err)).Int64(logDuration, dur.Milliseconds()).
			Msg("model call failed")
		return nil, err
	}
	resp, err := toResponse(cc)
	if err != nil {
		return nil, err
	}
	log.Debug().Str(logModel, m.cfg.Model).Int(logAttempt, attempt).
		Int(logMessages, nMessages).Int(logTools, nTools).
		Int(logStatus, http.StatusOK).Int64(logDuration, dur.Milliseconds()).
		Int(logToolCalls, len(resp.Message.ToolCalls)).Str(logFinishReason, modelhttp.SafeIdentifier(resp.FinishReason)).
		Int(logPromptTokens, resp.Usage.PromptTokens).Int(logCompletionTokens, resp.Usage.CompletionTokens).
		Msg("model call")
	return resp, nil
}

// classify turns an SDK error into one of modelhttp's errors, dropping
// everything that could carry the key or the request: the SDK's error value
// holds the request, and transport errors name the URL. An attempt that
// timed out is a timeout even when a status arrived with it.
func (m *Model) classify(ctx, actx context.Context, err error) error {
	return m.policy.ClassifyOpenAI(ctx, actx, err)
}
