package main

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestRun(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "nats: disconnected tf-canary-body", http.StatusServiceUnavailable)
	})
	mux.HandleFunc("/moved", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/healthz", http.StatusFound) })
	mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-time.After(5 * time.Second):
		}
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	closed := httptest.NewServer(mux)
	closed.Close()

	for _, tc := range []struct {
		name     string
		args     []string
		want     int
		wantErr  string
		dontWant string
	}{
		{"healthy", []string{srv.URL + "/healthz"}, exitHealthy, "", ""},
		{"not ready", []string{srv.URL + "/readyz"}, exitUnhealthy, "503", "tf-canary-body"},
		{"redirect is not health", []string{srv.URL + "/moved"}, exitUnhealthy, "302", ""},
		{"timeout", []string{"--timeout", "50ms", srv.URL + "/slow"}, exitUnhealthy, "deadline", ""},
		{"unreachable", []string{closed.URL + "/healthz"}, exitUnhealthy, "refused", ""},
		{"password not printed", []string{"http://u:tf-canary-pass@" + strings.TrimPrefix(closed.URL, "http://") + "/healthz"}, exitUnhealthy, "refused", "tf-canary-pass"},
		{"no URL", nil, exitUsage, "one URL", ""},
		{"two URLs", []string{srv.URL, srv.URL}, exitUsage, "one URL", ""},
		{"not http", []string{"file:///etc/passwd"}, exitUsage, "http://", ""},
		{"relative", []string{"/healthz"}, exitUsage, "http://", ""},
		{"bad timeout", []string{"--timeout", "0s", srv.URL}, exitUsage, "--timeout", ""},
		{"unknown flag", []string{"--nope", srv.URL}, exitUsage, "nope", ""},
		{"help", []string{"--help"}, exitHealthy, "usage: healthcheck", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stderr bytes.Buffer
			got := run(context.Background(), tc.args, &stderr)
			if got != tc.want {
				t.Errorf("exit=%d, want %d (stderr %q)", got, tc.want, stderr.String())
			}
			if tc.wantErr != "" && !strings.Contains(stderr.String(), tc.wantErr) {
				t.Errorf("stderr %q, want it to mention %q", stderr.String(), tc.wantErr)
			}
			if tc.dontWant != "" && strings.Contains(stderr.String(), tc.dontWant) {
				t.Errorf("stderr %q leaks %q", stderr.String(), tc.dontWant)
			}
			if tc.want == exitHealthy && tc.args != nil && tc.args[0] != "--help" && stderr.Len() > 0 {
				t.Errorf("healthy probe printed %q", stderr.String())
			}
		})
	}
}

func FuzzCheckURL(f *testing.F) {
	for _, s := range []string{"http://127.0.0.1:9090/healthz", "https://h/readyz", "file:///x", "", "http://", "http://u:p@h/", "::", "http://[::1]:9090/"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		u, err := checkURL(raw)
		if err != nil {
			return
		}
		if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			t.Fatalf("accepted %q: scheme %q host %q", raw, u.Scheme, u.Host)
		}
	})
}
