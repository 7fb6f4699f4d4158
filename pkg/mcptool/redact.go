package mcptool

import (
	"encoding/json"
	"sort"
	"strings"
)

// Redacted replaces a secret in any output.
const Redacted = "[redacted]"

// redactor replaces secrets, and their JSON-escaped forms, by [Redacted].
type redactor struct {
	r *strings.Replacer // nil: no secrets
}

func newRedactor(values []string) *redactor {
	seen := map[string]bool{}
	var olds []string
	for _, v := range values {
		if len(v) < minRedactLen || seen[v] {
			continue
		}
		seen[v] = true
		olds = append(olds, v)
		if b, err := json.Marshal(v); err == nil {
			if esc := string(b[1 : len(b)-1]); esc != v && !seen[esc] {
				seen[esc] = true
				olds = append(olds, esc)
			}
		}
	}
	if len(olds) == 0 {
		return &redactor{}
	}
	// Longest first, so a secret that contains another is replaced whole.
	sort.Slice(olds, func(i, j int) bool { return len(olds[i]) > len(olds[j]) })
	pairs := make([]string, 0, 2*len(olds))
	for _, o := range olds {
		pairs = append(pairs, o, Redacted)
	}
	return &redactor{r: strings.NewReplacer(pairs...)}
}

func (r *redactor) redact(s string) string {
	if r.r == nil {
		return s
	}
	return r.r.Replace(s)
}

// secretsOf returns the values of a server's environment and headers.
func secretsOf(c ServerConfig) []string {
	var out []string
	for _, kv := range c.Env {
		k, v, _ := strings.Cut(kv, "=")
		if k == "PATH" {
			continue
		}
		out = append(out, v)
	}
	for _, v := range c.Headers {
		out = append(out, v)
		if _, tok, ok := strings.Cut(v, " "); ok { // "Bearer <token>"
			out = append(out, tok)
		}
	}
	return out
}
