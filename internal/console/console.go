package console

import (
	"bytes"
	"embed"
	"html/template"
	"io/fs"
	"net/http"
	"strings"
)

//go:embed assets templates
var files embed.FS

// ContentSecurityPolicy is the policy every page and asset is sent with:
// the console's own origin only, no inline script or style, no framing,
// and forms that post nowhere else.
const ContentSecurityPolicy = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; " +
	"connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

// Handler serves the console's pages and assets, and every request under
// /v1/ with the API.
type Handler struct {
	api    http.Handler
	pages  map[string][]byte
	assets http.Handler
}

var _ http.Handler = (*Handler)(nil)

// New returns the console on api, the fleet's HTTP API (an
// *httpapi.Server).
func New(api http.Handler) (*Handler, error) {
	layout, err := template.ParseFS(files, "templates/layout.html")
	if err != nil {
		return nil, err
	}
	h := &Handler{api: api, pages: map[string][]byte{}}
	for _, p := range pages {
		t, err := template.Must(layout.Clone()).ParseFS(files, "templates/"+p.name+".html")
		if err != nil {
			return nil, err
		}
		var b bytes.Buffer
		if err := t.ExecuteTemplate(&b, "layout", p); err != nil {
			return nil, err
		}
		h.pages[p.name] = b.Bytes()
	}
	sub, err := fs.Sub(files, "assets")
	if err != nil {
		return nil, err
	}
	h.assets = http.StripPrefix("/assets/", http.FileServerFS(sub))
	return h, nil
}

// ServeHTTP serves one request: the API's under /v1/, else a page or an
// asset.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if strings.HasPrefix(r.URL.Path, "/v1/") {
		h.api.ServeHTTP(w, r)
		return
	}
	hd := w.Header()
	hd.Set("Content-Security-Policy", ContentSecurityPolicy)
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("X-Frame-Options", "DENY")
	hd.Set("Referrer-Policy", "same-origin")
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		hd.Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	if strings.HasPrefix(r.URL.Path, "/assets/") && !strings.HasSuffix(r.URL.Path, "/") {
		hd.Set("Cache-Control", "no-cache")
		h.assets.ServeHTTP(w, r)
		return
	}
	name, ok := pageOf(r.URL.Path)
	if !ok {
		http.NotFound(w, r)
		return
	}
	hd.Set("Cache-Control", "no-store")
	hd.Set("Content-Type", "text/html; charset=utf-8")
	_, _ = w.Write(h.pages[name])
}
