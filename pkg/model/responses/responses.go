package responses

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/openai/openai-go/v3/packages/param"
	sdk "github.com/openai/openai-go/v3/responses"
	"github.com/openai/openai-go/v3/shared"

	"github.com/toolfleet/toolfleet/pkg/logkey"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/model/modelhttp"
)

// maxChains bounds the remembered response ids; when full it starts over
// (the next turn of each run then sends its full input once).
const maxChains = 4096

// Model is a [loop.Model] over the OpenAI Responses API. It is safe for
// concurrent use.
type Model struct {
	cfg    Config
	policy modelhttp.Policy
	svc    sdk.ResponseService

	mu     sync.Mutex
	chains map[[32]byte]string // digest of a transcript ending in an assistant message → the response that wrote it
}

var _ loop.Model = (*Model)(nil)

// New validates cfg, after defaults, and returns a Model. It sends nothing.
func New(cfg Config) (*Model, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	p := cfg.provider()
	return &Model{cfg: cfg, policy: p.Policy, svc: sdk.NewResponseService(p.OpenAIOptions()...), chains: map[[32]byte]string{}}, nil
}

// Complete sends one Responses request and maps its output onto a
// [loop.Response]. Retries follow [modelhttp.Policy]. The error never
// contains the key, the request or the response body.
func (m *Model) Complete(ctx context.Context, req loop.Request) (*loop.Response, error) {
	full, err := m.params(req, "", nil)
	if err != nil {
		return nil, err
	}
	params := full
	chained := false
	if prev, rest, ok := m.chain(req.Messages); ok {
		if params, err = m.params(req, prev, rest); err != nil {
			return nil, err
		}
		chained = true
	}
	r, resp, err := m.send(ctx, params, len(req.Messages))
	var apiErr *modelhttp.APIError
	if chained && errors.As(err, &apiErr) && (apiErr.StatusCode == http.StatusBadRequest || apiErr.StatusCode == http.StatusNotFound) && ctx.Err() == nil {
		// The server may have dropped the stored response: the full input
		// says the same.
		m.cfg.Logger.Warn().Str("model", m.cfg.Model).Msg("previous_response_id refused; sending the full input")
		r, resp, err = m.send(ctx, full, len(req.Messages))
	}
	if err != nil {
		return nil, err
	}
	if m.cfg.PreviousResponseID && r.ID != "" {
		m.remember(append(append([]loop.Message(nil), req.Messages...), resp.Message), r.ID)
	}
	return resp, nil
}

func (m *Model) send(ctx context.Context, params sdk.ResponseNewParams, nMessages int) (*sdk.Response, *loop.Response, error) {
	type both struct {
		r    *sdk.Response
		resp *loop.Response
	}
	b, err := modelhttp.Do(ctx, m.policy, "response", func(ctx context.Context, n int) (both, error) {
		r, resp, err := m.attempt(ctx, params, n, nMessages)
		return both{r, resp}, err
	})
	return b.r, b.resp, err
}

// params builds the request: the full input, or with prev the items after
// the last assistant message.
func (m *Model) params(req loop.Request, prev string, rest []loop.Message) (sdk.ResponseNewParams, error) {
	p := sdk.ResponseNewParams{Model: shared.ResponsesModel(m.cfg.Model)}
	msgs := req.Messages
	if prev != "" {
		p.PreviousResponseID = param.NewOpt(prev)
		msgs = rest
	}
	p.Store = param.NewOpt(m.cfg.PreviousResponseID)
	if m.cfg.MaxOutputTokens > 0 {
		p.MaxOutputTokens = param.NewOpt(int64(m.cfg.MaxOutputTokens))
	}
	if m.cfg.Temperature != nil {
		p.Temperature = param.NewOpt(*m.cfg.Temperature)
	}
	items, err := ToInput(msgs)
	if err != nil {
		return p, err
	}
	p.Input = sdk.ResponseNewParamsInputUnion{OfInputItemList: items}
	for i, t := range req.Tools {
		u, err := toolParam(t)
		if err != nil {
			return p, fmt.Errorf("%w: tools[%d]: %v", modelhttp.ErrInvalidRequest, i, err)
		}
		p.Tools = append(p.Tools, u)
	}
	return p, nil
}

// chain finds the response that wrote the transcript's last assistant
// message, and the messages after it, when every call of that message is
// answered among them — so chaining never leaves a call_id unanswered.
func (m *Model) chain(msgs []loop.Message) (string, []loop.Message, bool) {
	if !m.cfg.PreviousResponseID {
		return "", nil, false
	}
	last := -1
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role == "assistant" {
			last = i
			break
		}
	}
	if last < 0 {
		return "", nil, false
	}
	m.mu.Lock()
	id, ok := m.chains[digest(msgs[:last+1])]
	m.mu.Unlock()
	if !ok {
		return "", nil, false
	}
	rest := msgs[last+1:]
	answered := map[string]bool{}
	for _, r := range rest {
		if r.Role == "tool" {
			answered[r.ToolCallID] = true
		}
	}
	for _, tc := range msgs[last].ToolCalls {
		if !answered[tc.ID] {
			return "", nil, false
		}
	}
	return id, rest, true
}

func (m *Model) remember(msgs []loop.Message, id string) {
	d := digest(msgs)
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.chains) >= maxChains {
		clear(m.chains)
	}
	m.chains[d] = id
}

// digest identifies a transcript by what the model saw of it.
func digest(msgs []loop.Message) [32]byte {
	b, _ := json.Marshal(msgs)
	return sha256.Sum256(b)
}

func (m *Model) attempt(ctx context.Context, params sdk.ResponseNewParams, n, nMessages int) (*sdk.Response, *loop.Response, error) {
	actx, cancel := context.WithTimeout(ctx, m.policy.RequestTimeout)
	defer cancel()
	start := time.Now()
	r, err := m.svc.New(actx, params)
	dur := time.Since(start)
	log := m.cfg.Logger
	if err != nil {
		err = m.classify(ctx, actx, err)
		log.Debug().Str("model", m.cfg.Model).Int(logkey.Attempt, n).Int("messages", nMessages).
			Str("error_kind", modelhttp.ErrorKind(err)).Int64(logkey.DurationMS, dur.Milliseconds()).Msg("model call failed")
		return nil, nil, err
	}
	resp, err := toResponse(r)
	if err != nil {
		return nil, nil, err
	}
	log.Debug().Str("model", m.cfg.Model).Int(logkey.Attempt, n).Int("messages", nMessages).
		Int("status", http.StatusOK).Int64(logkey.DurationMS, dur.Milliseconds()).Int("tool_calls", len(resp.Message.ToolCalls)).
		Bool("chained", params.PreviousResponseID.Valid()).
		Int("prompt_tokens", resp.Usage.PromptTokens).Int("completion_tokens", resp.Usage.CompletionTokens).
		Msg("model call")
	return r, resp, nil
}

func (m *Model) classify(ctx, actx context.Context, err error) error {
	return m.policy.ClassifyOpenAI(ctx, actx, err)
}

// Describe names the provider and model for spans.
func (m *Model) Describe() (provider, model string) { return "openai", m.cfg.Model }
