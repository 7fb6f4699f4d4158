package mcpserve

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// FuzzCheckOrigin: a request with an Origin header passes only when it
// names an allowed origin (compared without case or a trailing slash).
func FuzzCheckOrigin(f *testing.F) {
	for _, s := range []string{"https://evil.example", "https://ok.example", "HTTPS://OK.EXAMPLE/", "null", "", " https://ok.example "} {
		f.Add(s)
	}
	h := checkOrigin([]string{"https://ok.example"}, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusOK)
	}))
	f.Fuzz(func(t *testing.T, origin string) {
		req := httptest.NewRequest(http.MethodPost, "/mcp", nil)
		req.Header["Origin"] = []string{origin}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		allowed := strings.TrimSuffix(strings.ToLower(strings.TrimSpace(origin)), "/") == "https://ok.example"
		if (rec.Code == http.StatusOK) != allowed {
			t.Fatalf("Origin %q: status %d", origin, rec.Code)
		}
	})
}
