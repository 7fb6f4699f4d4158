package harness_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"sync"
	"testing"

	"github.com/rs/zerolog"

	"github.com/toolfleet/toolfleet/pkg/harness"
)

// logBuffer collects log lines written from several goroutines.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// newHarness returns a harness whose logs (every level) go to the returned
// buffer and to t.Log on failure.
func newHarness(t testing.TB, cfg harness.Config, tools ...harness.Tool) (*harness.Harness, *logBuffer) {
	t.Helper()
	logs := &logBuffer{}
	cfg.Logger = zerolog.New(logs).Level(zerolog.TraceLevel)
	h, err := harness.New(cfg, tools...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("harness logs:\n%s", logs.String())
		}
	})
	return h, logs
}

// assertNotContains fails if any of the texts contains secret.
func assertNotContains(t testing.TB, secret string, texts map[string]string) {
	t.Helper()
	for name, text := range texts {
		if strings.Contains(text, secret) {
			t.Errorf("%s contains the secret %q: %q", name, secret, text)
		}
	}
}

// resultText renders every field of a result, to look for secrets.
func resultText(r harness.Result) string {
	b, _ := json.Marshal(r)
	return string(b)
}
