package modelhttp

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

	"github.com/rs/zerolog"

	"github.com/toolfleet/toolfleet/pkg/logkey"
)

// Defaults of [Policy], the same as package openai's.
const (
	DefaultRequestTimeout   = 120 * time.Second
	DefaultMaxRetries       = 3
	DefaultRetryBaseDelay   = 500 * time.Millisecond
	DefaultMaxRetryDelay    = 30 * time.Second
	DefaultMaxResponseBytes = 8 << 20

	// MaxRetriesLimit bounds MaxRetries so that a typo cannot turn one model
	// call into an hour of attempts.
	MaxRetriesLimit = 20
)

// Policy is the retry and timeout policy of one provider. The zero value of
// every field means its default.
type Policy struct {
	// Provider names the provider in errors and logs, e.g. "anthropic".
	Provider string
	// Model is logged with every attempt.
	Model string
	// RequestTimeout bounds one attempt. Default: 120s.
	RequestTimeout time.Duration
	// MaxRetries is how many times a retryable failure is retried. Default:
	// 3; negative: none.
	MaxRetries int
	// RetryBaseDelay is the first backoff; each retry doubles it up to
	// MaxRetryDelay, jittered to between half and all of it. Default: 500ms.
	RetryBaseDelay time.Duration
	// MaxRetryDelay bounds every wait. Default: 30s.
	MaxRetryDelay time.Duration
	// MaxResponseBytes bounds a response body. Default: 8 MiB.
	MaxResponseBytes int64
	// Logger receives a debug line per failed attempt and a warning per retry
	// (ids, counts, statuses, durations — never content). Default: discard.
	Logger zerolog.Logger
}

// WithDefaults returns p with its zero fields set to their defaults.
func (p Policy) WithDefaults() Policy {
	if p.RequestTimeout == 0 {
		p.RequestTimeout = DefaultRequestTimeout
	}
	switch {
	case p.MaxRetries == 0:
		p.MaxRetries = DefaultMaxRetries
	case p.MaxRetries < 0:
		p.MaxRetries = 0
	}
	if p.RetryBaseDelay == 0 {
		p.RetryBaseDelay = DefaultRetryBaseDelay
	}
	if p.MaxRetryDelay == 0 {
		p.MaxRetryDelay = DefaultMaxRetryDelay
	}
	if p.MaxResponseBytes == 0 {
		p.MaxResponseBytes = DefaultMaxResponseBytes
	}
	return p
}

// Validate reports the first field of p (after defaults) that breaks its
// rule, as a field name and the rule.
func (p Policy) Validate() (field string, err error) {
	switch {
	case p.RequestTimeout < 0:
		return "RequestTimeout", errors.New("must be > 0")
	case p.MaxRetries > MaxRetriesLimit:
		return "MaxRetries", fmt.Errorf("must be <= %d", MaxRetriesLimit)
	case p.RetryBaseDelay < 0:
		return "RetryBaseDelay", errors.New("must be > 0")
	case p.MaxRetryDelay < 0:
		return "MaxRetryDelay", errors.New("must be > 0")
	case p.RetryBaseDelay > p.MaxRetryDelay:
		return "RetryBaseDelay", errors.New("must be <= MaxRetryDelay")
	case p.MaxResponseBytes < 0:
		return "MaxResponseBytes", errors.New("must be > 0")
	}
	return "", nil
}

// ValidateConfig checks what every provider's configuration holds: the
// model (p.Model, required), the base URL (see [ValidateBaseURL]) and the
// policy (see [Policy.Validate]). It reports the first field that breaks its
// rule, without quoting its value.
func (p Policy) ValidateConfig(baseURL string) (field string, err error) {
	if p.Model == "" {
		return "Model", errors.New("required")
	}
	if err := ValidateBaseURL(baseURL); err != nil {
		return "BaseURL", err
	}
	return p.Validate()
}

// ValidateTemperature checks a sampling temperature: unset, or a finite
// number >= 0.
func ValidateTemperature(t *float64) error {
	if t != nil && (math.IsNaN(*t) || math.IsInf(*t, 0) || *t < 0) {
		return errors.New("must be a finite number >= 0")
	}
	return nil
}

// ValidateBaseURL checks that s is an http or https URL with a host, without
// quoting it.
func ValidateBaseURL(s string) error {
	u, err := url.Parse(s)
	switch {
	case err != nil:
		return errors.New("not a URL")
	case u.Scheme != "http" && u.Scheme != "https":
		return errors.New("scheme must be http or https")
	case u.Host == "":
		return errors.New("host required")
	}
	return nil
}

// Do runs attempt until it succeeds, fails with an error that is not retried,
// runs out of retries or ctx ends. Each attempt gets a context bounded by
// RequestTimeout; classify turns the attempt's raw error into this package's
// errors (see [Policy.Classify]). op names the call in errors ("message").
func Do[T any](ctx context.Context, p Policy, op string, attempt func(ctx context.Context, n int) (T, error)) (T, error) {
	var zero T
	for n := 1; ; n++ {
		v, err := attempt(ctx, n)
		if err == nil {
			return v, nil
		}
		if ctx.Err() != nil {
			return zero, fmt.Errorf("%s: %s: %w", p.Provider, op, ctx.Err())
		}
		delay, retry := p.RetryDelay(err, n)
		if !retry {
			return zero, fmt.Errorf("%s: %s failed after %d attempt(s): %w", p.Provider, op, n, err)
		}
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) <= delay {
			return zero, fmt.Errorf("%s: %s failed after %d attempt(s), no time left to retry: %w", p.Provider, op, n, err)
		}
		p.Logger.Warn().Str("model", p.Model).Int(logkey.Attempt, n).
			Str("error_kind", ErrorKind(err)).Dur("retry_in", delay).
			Msg("model call failed, retrying")
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return zero, fmt.Errorf("%s: %s: %w", p.Provider, op, ctx.Err())
		case <-t.C:
		}
	}
}

// RetryDelay decides whether the n-th attempt's error is retried and after
// how long.
func (p Policy) RetryDelay(err error, n int) (time.Duration, bool) {
	if n > p.MaxRetries {
		return 0, false
	}
	var apiErr *APIError
	var terr *TransportError
	switch {
	case errors.As(err, &apiErr):
		if !apiErr.Retryable() {
			return 0, false
		}
		if apiErr.RetryAfterSet {
			if apiErr.RetryAfter > p.MaxRetryDelay {
				return 0, false
			}
			return apiErr.RetryAfter, true
		}
	case errors.As(err, &terr), errors.Is(err, ErrTimeout):
	default:
		return 0, false
	}
	return Backoff(p.RetryBaseDelay, p.MaxRetryDelay, n), true
}

// Classify maps an SDK error that is not an HTTP status onto this package's
// errors: the run's own cancellation, the size limit, the attempt timeout, a
// transport error (without the URL), else a bad response naming only the
// innermost error's type. ctx is the caller's context, actx the attempt's.
// It returns nil when err is none of these (an API status the caller maps).
func (p Policy) Classify(ctx, actx context.Context, err error) error {
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case errors.Is(err, ErrResponseTooLarge):
		return fmt.Errorf("%w (%d bytes)", ErrResponseTooLarge, p.MaxResponseBytes)
	case actx.Err() != nil:
		return fmt.Errorf("%w (%s)", ErrTimeout, p.RequestTimeout)
	}
	var uerr *url.Error
	if errors.As(err, &uerr) {
		return &TransportError{Err: uerr.Err}
	}
	var nerr net.Error
	if errors.As(err, &nerr) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) {
		return &TransportError{Err: err}
	}
	inner := err
	for u := errors.Unwrap(inner); u != nil; u = errors.Unwrap(inner) {
		inner = u
	}
	return fmt.Errorf("%w: decoding failed (%T)", ErrBadResponse, inner)
}

// Backoff is base·2^(n-1), capped at max, jittered to between half and all of
// itself.
func Backoff(base, max time.Duration, n int) time.Duration {
	d := base
	for i := 1; i < n && d < max; i++ {
		d *= 2
	}
	d = min(d, max)
	if half := d / 2; half > 0 {
		d = half + rand.N(half+1)
	}
	return d
}

// RetryAfter reads Retry-After-Ms or Retry-After (seconds or an HTTP date).
// ok is false when neither holds a usable value; an explicit zero or a past
// date is (0, true).
func RetryAfter(h http.Header) (d time.Duration, ok bool) {
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
		case s >= 1e9:
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

// LimitResponse bounds res's body to limit bytes: a larger declared length
// fails at once, a longer body fails its read with [ErrResponseTooLarge].
func LimitResponse(res *http.Response, err error, limit int64) (*http.Response, error) {
	if err != nil || res == nil || res.Body == nil {
		return res, err
	}
	if res.ContentLength > limit {
		_ = res.Body.Close()
		return nil, ErrResponseTooLarge
	}
	res.Body = &limitedBody{rc: res.Body, remaining: limit}
	return res, nil
}

// HTTPClient returns hc, or a client of its own whose transport is a clone of
// http.DefaultTransport.
func HTTPClient(hc *http.Client) *http.Client {
	if hc != nil {
		return hc
	}
	var rt http.RoundTripper = http.DefaultTransport
	if t, ok := rt.(*http.Transport); ok {
		rt = t.Clone()
	}
	return &http.Client{Transport: rt}
}

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
