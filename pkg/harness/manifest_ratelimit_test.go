package harness_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/toolfleet/toolfleet/pkg/harness"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// A manifest's "rate_limit" reaches the harness; a bad one is refused
// naming the field.
func TestManifestRateLimit(t *testing.T) {
	tools, err := harness.ParseManifest([]byte(`{"tools":[{"name":"api","command":["/bin/true"],"rate_limit":{"rate":20,"burst":5}},{"name":"free","command":["/bin/true"]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	h, err := harness.New(harness.Config{}, tools...)
	if err != nil {
		t.Fatal(err)
	}
	if got := h.RateLimit("api"); got != (protocol.RateLimit{Rate: 20, Burst: 5}) {
		t.Errorf("api: %+v", got)
	}
	if got := h.RateLimit("free"); got.Limited() {
		t.Errorf("free: %+v, want no limit", got)
	}
	for _, bad := range []string{`{"rate":-1}`, `{"rate":20,"burst":-1}`, `{"rate":1e7}`} {
		_, err := harness.ParseManifest([]byte(`{"tools":[{"name":"api","command":["/bin/true"],"rate_limit":` + bad + `}]}`))
		var te *harness.ToolError
		if !errors.As(err, &te) || !strings.HasPrefix(te.Field, "rate_limit") {
			t.Errorf("rate_limit %s: %v, want an error naming rate_limit", bad, err)
		}
	}
	if _, err := harness.ParseManifest([]byte(`{"tools":[{"name":"api","command":["/bin/true"],"rate_limit":{"rate":20,"per":"minute"}}]}`)); err == nil {
		t.Error("a rate_limit with an unknown field was accepted")
	}
}
