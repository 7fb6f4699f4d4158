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

// FuzzPageOf: a path names one of the pages or none; a run's page takes
// one path segment, and the fixed pages only their own path.
func FuzzPageOf(f *testing.F) {
	for _, s := range []string{"/", "/runs", "/runs/", "/runs/x", "/runs/x/y", "/login", "/assets/x.js", "//", "/v1/runs"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, path string) {
		name, ok := pageOf(path)
		if !ok {
			return
		}
		found := false
		for _, p := range pages {
			found = found || p.name == name
		}
		if !found {
			t.Fatalf("pageOf(%q) = %q, no such page", path, name)
		}
		if name == "run" {
			id := strings.TrimPrefix(path, "/runs/")
			if id == "" || strings.Contains(id, "/") || !strings.HasPrefix(path, "/runs/") {
				t.Fatalf("pageOf(%q) = run", path)
			}
		} else if path != "/"+name && !(name == "fleet" && path == "/") {
			t.Fatalf("pageOf(%q) = %q", path, name)
		}
	})
}
