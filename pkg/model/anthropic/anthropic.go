package anthropic

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"time"

	sdk "github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"

	"github.com/toolfleet/toolfleet/pkg/logkey"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/model/modelhttp"
)

// Model is a [loop.Model] over the Anthropic Messages API. It is safe for
// concurrent use.
type Model struct {
	cfg    Config
	policy modelhttp.Policy
	svc    sdk.MessageService

	mu     sync.Mutex
	warned map[string]bool // tools already reported as left out
}

var _ loop.Model = (*Model)(nil)

// New validates cfg, after defaults, and returns a Model. It sends nothing.
func New(cfg Config) (*Model, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	p := cfg.provider()
	opts := p.AnthropicOptions()
	if cfg.Temperature != nil {
		// The SDK's params carry no temperature: it is set in the body.
		opts = append(opts, option.WithJSONSet("temperature", *cfg.Temperature))
	}
	return &Model{cfg: cfg, policy: p.Policy, svc: sdk.NewMessageService(opts...), warned: map[string]bool{}}, nil
}

// Complete sends one Messages request with the whole transcript and maps the
// answer onto a [loop.Response]. Retries follow [modelhttp.Policy]. The error
// never contains the key, the request or the response body.
func (m *Model) Complete(ctx context.Context, req loop.Request) (*loop.Response, error) {
	params, skipped, err := m.buildParams(req)
	if err != nil {
		return nil, err
	}
	m.warnSkipped(skipped)
	return modelhttp.Do(ctx, m.policy, "message", func(ctx context.Context, n int) (*loop.Response, error) {
		return m.attempt(ctx, params, n, len(req.Messages), len(params.Tools))
	})
}

func (m *Model) attempt(ctx context.Context, params sdk.MessageNewParams, n, nMessages, nTools int) (*loop.Response, error) {
	actx, cancel := context.WithTimeout(ctx, m.policy.RequestTimeout)
	defer cancel()
	start := time.Now()
	msg, err := m.svc.New(actx, params)
	dur := time.Since(start)
	log := m.cfg.Logger
	if err != nil {
		err = m.classify(ctx, actx, err)
		log.Debug().Str("model", m.cfg.Model).Int(logkey.Attempt, n).Int("messages", nMessages).Int("tools", nTools).
			Str("error_kind", modelhttp.ErrorKind(err)).Int64(logkey.DurationMS, dur.Milliseconds()).Msg("model call failed")
		return nil, err
	}
	resp, err := toResponse(msg)
	if err != nil {
		return nil, err
	}
	log.Debug().Str("model", m.cfg.Model).Int(logkey.Attempt, n).Int("messages", nMessages).Int("tools", nTools).
		Int("status", http.StatusOK).Int64(logkey.DurationMS, dur.Milliseconds()).Int("tool_calls", len(resp.Message.ToolCalls)).
		Str("finish_reason", modelhttp.SafeIdentifier(string(msg.StopReason))).
		Int("prompt_tokens", resp.Usage.PromptTokens).Int("completion_tokens", resp.Usage.CompletionTokens).
		Msg("model call")
	return resp, nil
}

// classify drops everything that could carry the key or the request: the
// SDK's error value holds the request, and its message the response body.
func (m *Model) classify(ctx, actx context.Context, err error) error {
	var apiErr *sdk.Error
	if ctx.Err() == nil && !errors.Is(err, modelhttp.ErrResponseTooLarge) && errors.As(err, &apiErr) {
		e := &modelhttp.APIError{
			Provider:   "anthropic",
			StatusCode: apiErr.StatusCode,
			Type:       modelhttp.SafeIdentifier(string(apiErr.Type())),
			Code:       modelhttp.SafeIdentifier(string(apiErr.ErrorCode())),
			Message:    apiErr.Message,
		}
		if apiErr.Response != nil {
			e.RetryAfter, e.RetryAfterSet = modelhttp.RetryAfter(apiErr.Response.Header)
		}
		return e
	}
	return m.policy.Classify(ctx, actx, err)
}

// warnSkipped logs, once per tool name, a tool left out of the request.
func (m *Model) warnSkipped(skipped []skippedTool) {
	if len(skipped) == 0 {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, s := range skipped {
		k := s.reason + "\x00" + s.name
		if m.warned[k] || len(m.warned) > 256 {
			continue
		}
		m.warned[k] = true
		m.cfg.Logger.Warn().Str("model", m.cfg.Model).Str(logkey.Tool, clip(s.name)).Str("reason", s.reason).
			Msg("tool left out: the Messages API would refuse its name or schema")
	}
}

func clip(s string) string {
	if len(s) > 64 {
		return s[:64]
	}
	return s
}

// Describe names the provider and model for spans.
func (m *Model) Describe() (provider, model string) { return "anthropic", m.cfg.Model }
