package openai

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"

	sdk "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/toolfleet/toolfleet/pkg/loop"
)

// Model is a [loop.Model] over an OpenAI-compatible chat-completions API. It
// is safe for concurrent use.
type Model struct {
	cfg Config
	svc sdk.ChatCompletionService
}

var _ loop.Model = (*Model)(nil)

// New validates cfg, after defaults, and returns a Model. It sends nothing.
func New(cfg Config) (*Model, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	hc := cfg.HTTPClient
	if hc == nil {
		var rt http.RoundTripper = http.DefaultTransport
		if t, ok := rt.(*http.Transport); ok {
			rt = t.Clone()
		}
		hc = &http.Client{Transport: rt}
	}
	limit := cfg.MaxResponseBytes
	// The service is built without the SDK's environment defaults: this
	// package reads OPENAI_BASE_URL and OPENAI_API_KEY itself and nothing
	// else (no organization, project or custom headers from the
	// environment). Retries and timeouts are this package's own.
	opts := []option.RequestOption{
		option.WithBaseURL(cfg.BaseURL),
		option.WithHTTPClient(hc),
		option.WithMaxRetries(0),
		option.WithMiddleware(func(r *http.Request, next option.MiddlewareNext) (*http.Response, error) {
			res, err := next(r)
			if err != nil || res == nil || res.Body == nil {
				return res, err
			}
			if res.ContentLength > limit {
				_ = res.Body.Close()
				return nil, ErrResponseTooLarge
			}
			res.Body = &limitedBody{rc: res.Body, remaining: limit}
			return res, nil
		}),
	}
	if cfg.APIKey != "" {
		opts = append(opts, option.WithAPIKey(cfg.APIKey))
	}
	return &Model{cfg: cfg, svc: sdk.NewChatCompletionService(opts...)}, nil
}

// Complete sends one chat-completion request and maps the first choice onto
// a [loop.Response]. Attempts that fail with 429, a 5xx status, a transport
// error or a timeout are retried up to Config.MaxRetries times with jittered
// exponential backoff, honouring Retry-After; other failures return at once.
// The error never contains the key, the request or the response body.
func (m *Model) Complete(ctx context.Context, req loop.Request) (*loop.Response, error) {
	params, err := m.buildParams(req)
	if err != nil {
		return nil, err
	}
	log := m.cfg.Logger
	for attempt := 1; ; attempt++ {
		resp, err := m.attempt(ctx, params, attempt, len(req.Messages), len(req.Tools))
		if err == nil {
			return resp, nil
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("openai: chat completion: %w", ctx.Err())
		}
		delay, retry := m.retryDelay(err, attempt)
		if !retry {
			return nil, fmt.Errorf("openai: chat completion failed after %d attempt(s): %w", attempt, err)
		}
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) <= delay {
			return nil, fmt.Errorf("openai: chat completion failed after %d attempt(s), no time left to retry: %w", attempt, err)
		}
		log.Warn().Str(logModel, m.cfg.Model).Int(logAttempt, attempt).
			Str(logErrorKind, errorKind(err)).Dur(logDelay, delay).
			Msg("model call failed, retrying")
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("openai: chat completion: %w", ctx.Err())
		case <-t.C:
		}
	}
}

// attempt makes one request under its own timeout and classifies its error.
func (m *Model) attempt(ctx context.Context, params sdk.ChatCompletionNewParams, attempt, nMessages, nTools int) (*loop.Response, error) {
	actx, cancel := context.WithTimeout(ctx, m.cfg.RequestTimeout)
	defer cancel()
	start := time.Now()
	cc, err := m.svc.New(actx, params)
	dur := time.Since(start)
	log := m.cfg.Logger
	if err != nil {
		err = m.classify(ctx, actx, err)
		log.Debug().Str(logModel, m.cfg.Model).Int(logAttempt, attempt).
			Int(logMessages, nMessages).Int(logTools, nTools).
			Str(logErrorKind, errorKind(err)).Dur(logDuration, dur).
			Msg("model call failed")
		return nil, err
	}
	resp, err := toResponse(cc)
	if err != nil {
		return nil, err
	}
	log.Debug().Str(logModel, m.cfg.Model).Int(logAttempt, attempt).
		Int(logMessages, nMessages).Int(logTools, nTools).
		Int(logStatus, http.StatusOK).Dur(logDuration, dur).
		Int(logToolCalls, len(resp.Message.ToolCalls)).Str(logFinishReason, safeIdentifier(resp.FinishReason)).
		Int(logPromptTokens, resp.Usage.PromptTokens).Int(logCompletionTokens, resp.Usage.CompletionTokens).
		Msg("model call")
	return resp, nil
}

// classify turns an SDK error into one of this package's errors, dropping
// everything that could carry the key or the request: the SDK's error value
// holds the request, and transport errors name the URL.
func (m *Model) classify(ctx, actx context.Context, err error) error {
	var apiErr *sdk.Error
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case errors.Is(err, ErrResponseTooLarge):
		return fmt.Errorf("%w (%d bytes)", ErrResponseTooLarge, m.cfg.MaxResponseBytes)
	case actx.Err() != nil:
		return fmt.Errorf("%w (%s)", ErrTimeout, m.cfg.RequestTimeout)
	case errors.As(err, &apiErr):
		e := &APIError{
			StatusCode: apiErr.StatusCode,
			Type:       safeIdentifier(apiErr.Type),
			Code:       safeIdentifier(apiErr.Code),
			Message:    apiErr.Message,
		}
		if apiErr.Response != nil {
			e.RetryAfter, e.retryAfterSet = retryAfter(apiErr.Response.Header)
		}
		return e
	}
	var uerr *url.Error
	if errors.As(err, &uerr) {
		return &TransportError{Err: uerr.Err}
	}
	var nerr net.Error
	if errors.As(err, &nerr) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) {
		return &TransportError{Err: err}
	}
	// What is left is the SDK failing to decode a 2xx body. Its message
	// may quote a fragment of the body: keep only the innermost type.
	inner := err
	for u := errors.Unwrap(inner); u != nil; u = errors.Unwrap(inner) {
		inner = u
	}
	return fmt.Errorf("%w (%T)", ErrBadResponse, inner)
}

// retryDelay reports whether err after the given attempt is retried, and
// after how long.
func (m *Model) retryDelay(err error, attempt int) (time.Duration, bool) {
	if attempt > m.cfg.MaxRetries {
		return 0, false
	}
	var apiErr *APIError
	var terr *TransportError
	switch {
	case errors.As(err, &apiErr):
		if !apiErr.Retryable() {
			return 0, false
		}
		if apiErr.retryAfterSet {
			if apiErr.RetryAfter > m.cfg.MaxRetryDelay {
				return 0, false
			}
			return apiErr.RetryAfter, true
		}
	case errors.As(err, &terr), errors.Is(err, ErrTimeout):
	default:
		return 0, false
	}
	return backoff(m.cfg.RetryBaseDelay, m.cfg.MaxRetryDelay, attempt), true
}

// backoff is base·2^(attempt-1), capped at max, jittered to between half and
// all of itself.
func backoff(base, max time.Duration, attempt int) time.Duration {
	d := base
	for i := 1; i < attempt && d < max; i++ {
		d *= 2
	}
	d = min(d, max)
	if half := d / 2; half > 0 {
		d = half + rand.N(half+1)
	}
	return d
}

// retryAfter reads Retry-After-Ms or Retry-After (seconds or an HTTP date).
// ok is false when neither header holds a usable value; an explicit zero or a
// date in the past is (0, true): retry now.
func retryAfter(h http.Header) (d time.Duration, ok bool) {
	if v := strings.TrimSpace(h.Get("Retry-After-Ms")); v != "" {
		if ms, err := strconv.ParseFloat(v, 64); err == nil && ms >= 0 {
			if ms >= 1e12 {
				return math.MaxInt64, true
			}
			return time.Duration(ms * float64(time.Millisecond)), true
		}
	}
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0, false
	}
	if s, err := strconv.ParseFloat(v, 64); err == nil || errors.Is(err, strconv.ErrRange) {
		switch {
		case s >= 1e9: // includes +Inf from an overflowing value
			return math.MaxInt64, true
		case s >= 0:
			return time.Duration(s * float64(time.Second)), true
		}
		return 0, false
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(time.Until(t), 0), true
	}
	return 0, false
}

// errorKind names an error's class for logs, never its text.
func errorKind(err error) string {
	var apiErr *APIError
	var terr *TransportError
	switch {
	case errors.As(err, &apiErr):
		return "http_" + strconv.Itoa(apiErr.StatusCode)
	case errors.Is(err, ErrTimeout):
		return "timeout"
	case errors.Is(err, ErrResponseTooLarge):
		return "response_too_large"
	case errors.As(err, &terr):
		return "transport"
	case errors.Is(err, ErrBadResponse):
		return "bad_response"
	default:
		return fmt.Sprintf("%T", err)
	}
}

// limitedBody fails a read that goes past the response size limit.
type limitedBody struct {
	rc        io.ReadCloser
	remaining int64
}

func (b *limitedBody) Read(p []byte) (int, error) {
	if b.remaining < 0 {
		return 0, ErrResponseTooLarge
	}
	if int64(len(p)) > b.remaining+1 {
		p = p[:b.remaining+1]
	}
	n, err := b.rc.Read(p)
	b.remaining -= int64(n)
	if b.remaining < 0 {
		return 0, ErrResponseTooLarge
	}
	return n, err
}

func (b *limitedBody) Close() error { return b.rc.Close() }
