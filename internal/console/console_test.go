package console

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestHandler: each page is served with the strict policy and names its
// own script only; /v1/ goes to the API; an unknown path is a 404 and a
// POST to a page a 405.
func TestHandler(t *testing.T) {
	api := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "api:"+r.URL.Path) })
	h, err := New(api)
	if err != nil {
		t.Fatal(err)
	}
	get := func(method, path string) *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(method, path, nil))
		return w
	}
	for path, page := range map[string]string{"/": "fleet", "/runs": "runs", "/runs/abc": "run", "/approvals": "approvals",
		"/tools": "tools", "/login": "login"} {
		w := get("GET", path)
		if w.Code != http.StatusOK {
			t.Fatalf("GET %s: %d", path, w.Code)
		}
		if got := w.Header().Get("Content-Security-Policy"); got != ContentSecurityPolicy || !strings.Contains(got, "default-src 'self'") {
			t.Fatalf("GET %s: Content-Security-Policy=%q", path, got)
		}
		body := w.Body.String()
		if !strings.Contains(body, `data-page="`+page+`"`) || !strings.Contains(body, `src="/assets/`+page+`.js"`) {
			t.Fatalf("GET %s is not the %s page:\n%s", path, page, body)
		}
		if strings.Contains(body, "<script>") || strings.Contains(body, "style=") || strings.Contains(body, "http://") {
			t.Fatalf("GET %s has inline script or style, or a foreign URL", path)
		}
	}
	for _, p := range pages {
		if w := get("GET", p.Script()); w.Code != http.StatusOK || w.Header().Get("Content-Security-Policy") == "" {
			t.Fatalf("GET %s: %d", p.Script(), w.Code)
		}
	}
	if w := get("GET", "/v1/runs"); w.Body.String() != "api:/v1/runs" {
		t.Fatalf("GET /v1/runs went to %q, want the API", w.Body.String())
	}
	for _, path := range []string{"/nope", "/runs/a/b", "/assets/", "/assets/nope.js"} {
		if w := get("GET", path); w.Code != http.StatusNotFound {
			t.Fatalf("GET %s: %d, want 404", path, w.Code)
		}
	}
	if w := get("POST", "/runs"); w.Code != http.StatusMethodNotAllowed {
		t.Fatalf("POST /runs: %d, want 405", w.Code)
	}
}
