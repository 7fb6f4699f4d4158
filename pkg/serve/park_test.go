package serve

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/toolfleet/toolfleet/pkg/model/modelhttp"
)

// TestParkReason: a model that answered an HTTP error, timed out or could
// not be reached (after its retries) parks the run, with a reason that
// names the status and never the server's message; an answer the loop
// cannot use, a request the provider cannot express and any other failure
// fail it.
func TestParkReason(t *testing.T) {
	wrap := func(err error) error { return fmt.Errorf("openai: message failed after 4 attempt(s): %w", err) }
	api := &modelhttp.APIError{Provider: "openai", StatusCode: 503, Type: "server_error", Message: "secret sk-live-123 in the prompt"}
	for _, c := range []struct {
		name string
		err  error
		want string // a part of the reason; "" for none
	}{
		{"http status", wrap(api), "openai: HTTP 503 Service Unavailable (type server_error)"},
		{"timeout", wrap(modelhttp.ErrTimeout), "request timeout"},
		{"transport", wrap(&modelhttp.TransportError{Err: errors.New("dial tcp: connection refused")}), "could not be reached"},
		{"bad response", wrap(modelhttp.ErrBadResponse), ""},
		{"too large", wrap(modelhttp.ErrResponseTooLarge), ""},
		{"invalid request", wrap(modelhttp.ErrInvalidRequest), ""},
		{"another failure", errors.New("script exhausted"), ""},
	} {
		got := parkReason(c.err)
		switch {
		case c.want == "" && got != "":
			t.Errorf("%s: parks (%q), want it to fail", c.name, got)
		case c.want != "" && !strings.Contains(got, c.want):
			t.Errorf("%s: reason %q, want it to hold %q", c.name, got, c.want)
		case strings.Contains(got, "sk-live") || strings.Contains(got, "refused"):
			t.Errorf("%s: reason %q quotes what the server or the transport said", c.name, got)
		}
	}
}
