package modelhttp

import (
	"context"
	"errors"
	"math"
	"net/http"
	"testing"
	"time"
)

func FuzzRetryAfter(f *testing.F) {
	for _, s := range [][2]string{{"", "0"}, {"", "1.5"}, {"", "Wed, 21 Oct 2015 07:28:00 GMT"}, {"", "-3"}, {"", "NaN"},
		{"", "1e400"}, {"250", ""}, {"-1", "2"}, {"1e13", ""}, {"abc", "xyz"}, {"", "Inf"}} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, ms, s string) {
		h := http.Header{}
		if ms != "" {
			h.Set("Retry-After-Ms", ms)
		}
		if s != "" {
			h.Set("Retry-After", s)
		}
		d, ok := RetryAfter(h)
		if d < 0 || (!ok && d != 0) || (ms == "" && s == "" && ok) {
			t.Fatalf("RetryAfter(%q, %q) = %v, %v", ms, s, d, ok)
		}
	})
}

func TestRetryDelay(t *testing.T) {
	p := Policy{MaxRetries: 2, RetryBaseDelay: 10 * time.Millisecond, MaxRetryDelay: time.Second}.WithDefaults()
	for _, c := range []struct {
		err   error
		n     int
		retry bool
	}{
		{&APIError{StatusCode: 529}, 1, true},
		{&APIError{StatusCode: 429, RetryAfter: 2 * time.Second, RetryAfterSet: true}, 1, false},
		{&APIError{StatusCode: 400}, 1, false},
		{&APIError{StatusCode: 500}, 3, false},
		{&TransportError{Err: errors.New("reset")}, 1, true},
		{ErrTimeout, 2, true},
		{ErrBadResponse, 1, false},
	} {
		if _, retry := p.RetryDelay(c.err, c.n); retry != c.retry {
			t.Errorf("RetryDelay(%v, %d) retry=%v, want %v", c.err, c.n, retry, c.retry)
		}
	}
	if (&APIError{Provider: "anthropic", StatusCode: 529, Type: "overloaded_error", Message: "secret"}).Error() != "anthropic: HTTP 529 Overloaded (type overloaded_error)" {
		t.Fatal("APIError text")
	}
}

func TestDoStopsWithTheContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	n := 0
	_, err := Do(ctx, Policy{Provider: "p", RetryBaseDelay: time.Hour, MaxRetryDelay: time.Hour}.WithDefaults(), "op",
		func(context.Context, int) (int, error) {
			n++
			cancel()
			return 0, &APIError{StatusCode: 503}
		})
	if !errors.Is(err, context.Canceled) || n != 1 {
		t.Fatalf("err %v after %d attempts", err, n)
	}
}

func TestBackoffBounds(t *testing.T) {
	for n := 1; n <= 30; n++ {
		want := min(10*time.Millisecond<<min(n-1, 20), 100*time.Millisecond)
		for range 50 { // the jitter
			if d := Backoff(10*time.Millisecond, 100*time.Millisecond, n); d < want/2 || d > want {
				t.Fatalf("Backoff(%d) = %v", n, d)
			}
		}
	}
}

func TestValidateConfig(t *testing.T) {
	nan, neg, ok := math.NaN(), -1.0, 0.7
	for _, c := range []struct {
		p       Policy
		baseURL string
		field   string
	}{
		{Policy{Model: "m"}, "https://api.example.com/v1", ""},
		{Policy{}, "https://api.example.com/v1", "Model"},
		{Policy{Model: "m"}, "ftp://x", "BaseURL"},
		{Policy{Model: "m"}, "http://", "BaseURL"},
		{Policy{Model: "m", MaxRetries: 1000}, "http://x", "MaxRetries"},
		{Policy{Model: "m", RetryBaseDelay: time.Minute, MaxRetryDelay: time.Second}, "http://x", "RetryBaseDelay"},
	} {
		if field, _ := c.p.WithDefaults().ValidateConfig(c.baseURL); field != c.field {
			t.Errorf("ValidateConfig(%+v, %q) field %q, want %q", c.p, c.baseURL, field, c.field)
		}
	}
	for _, tv := range []*float64{&nan, &neg} {
		if ValidateTemperature(tv) == nil {
			t.Errorf("temperature %v accepted", *tv)
		}
	}
	if ValidateTemperature(nil) != nil || ValidateTemperature(&ok) != nil {
		t.Error("a valid temperature refused")
	}
}
