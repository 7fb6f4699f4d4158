package mcpserve

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// FuzzCheckOrigin: a request with an Origin header passes only when it
// names an allowed origin or one of the server's own, on 127.0.0.1:8808
// (compared without case or a trailing slash).
func FuzzCheckOrigin(f *testing.F) {
	own := map[string]bool{"https://ok.example": true}
	for _, h := range []string{"127.0.0.1", "localhost", "[::1]"} {
		own["http://"+h+":8808"], own["https://"+h+":8808"] = true, true
	}
	for _, s := range []string{"http://localhost:8808", "http://localhost:8809", "https://evil.example", "https://ok.example", "HTTPS://OK.EXAMPLE/", "null", "", " https://ok.example "} {
		f.Add(s)
	}
	h := checkOrigin([]string{"https://ok.example"}, "127.0.0.1:8808", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusOK)
	}))
	f.Fuzz(func(t *testing.T, origin string) {
		req := httptest.NewRequest(http.MethodPost, "/mcp", nil)
		req.Header["Origin"] = []string{origin}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		allowed := own[strings.TrimSuffix(strings.ToLower(strings.TrimSpace(origin)), "/")]
		if (rec.Code == http.StatusOK) != allowed {
			t.Fatalf("Origin %q: status %d", origin, rec.Code)
		}
	})
}
