package natsbus_test

import (
	"net/url"
	"strings"
	"testing"

	"github.com/toolfleet/toolfleet/internal/natsbus"
)

// FuzzConnURL: whatever the URL, Validate returns; a URL it accepts is one
// nats.go can dial (a nats, tls, ws or wss scheme and a host), so Connect
// never retries forever on a typo.
func FuzzConnURL(f *testing.F) {
	for _, s := range []string{"nats://127.0.0.1:4222", "ftp://x", "127.0.0.1:4222", "nats://a,tls://b:1", "nats://", "wss://u:p@h", "%zz", ","} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		err := natsbus.ConnConfig{URL: raw, Getenv: func(string) string { return "" }}.Validate()
		if err != nil || raw == "" {
			return
		}
		for _, part := range strings.Split(raw, ",") {
			part = strings.TrimSpace(part)
			if !strings.Contains(part, "://") {
				part = "nats://" + part
			}
			u, perr := url.Parse(part)
			if perr != nil || u.Hostname() == "" {
				t.Fatalf("accepted %q: part %q has no host", raw, part)
			}
			switch strings.ToLower(u.Scheme) {
			case "nats", "tls", "ws", "wss":
			default:
				t.Fatalf("accepted %q: scheme %q", raw, u.Scheme)
			}
		}
	})
}
