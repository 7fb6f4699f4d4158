package natsbus_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/toolfleet/toolfleet/internal/embedded"
	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/internal/natsbus/bustest"
	"github.com/toolfleet/toolfleet/internal/natstest"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestConnectReadsTheEnvironment(t *testing.T) {
	srv := natstest.StartWithConfig(t, `authorization { token: "tok-123" }`)
	log := natstest.NewLogBuffer(t)
	nc, err := natsbus.Connect(bustest.Ctx(t), natsbus.ConnConfig{
		Logger: log.Logger(),
		Getenv: env(map[string]string{natsbus.EnvURL: srv.ClientURL(), natsbus.EnvToken: "tok-123"}),
	})
	if err != nil {
		t.Fatalf("Connect: %v", err)
	}
	defer nc.Close()
	if nc.ConnectedUrl() != srv.ClientURL() {
		t.Fatalf("connected to %s, want %s", nc.ConnectedUrl(), srv.ClientURL())
	}
	if nc.Opts.MaxReconnect != -1 {
		t.Fatalf("MaxReconnect = %d, want -1 (forever)", nc.Opts.MaxReconnect)
	}
	if log.Contains("tok-123") {
		t.Fatal("the token reached the logs")
	}
}

func TestConnectFailsFastOnBadCredentials(t *testing.T) {
	srv := natstest.StartWithConfig(t, `authorization { user: "u", password: "right" }`)
	c, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	start := time.Now()
	_, err := natsbus.Connect(c, natsbus.ConnConfig{URL: srv.ClientURL(), User: "u", Password: "wrong", Getenv: env(nil)})
	if err == nil {
		t.Fatal("Connect with a wrong password succeeded")
	}
	if time.Since(start) > 5*time.Second {
		t.Fatalf("Connect kept retrying an authorization error for %v", time.Since(start))
	}
}

func TestConnectRetriesUntilTheServerIsUp(t *testing.T) {
	// Reserve a port, then start the server on it a little later.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	url := fmt.Sprintf("nats://127.0.0.1:%d", port)

	c, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	if _, err := natsbus.Connect(c, natsbus.ConnConfig{URL: url, Getenv: env(nil)}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Connect to nothing = %v, want the context's deadline", err)
	}

	done := make(chan error, 1)
	go func() {
		nc, err := natsbus.Connect(bustest.Ctx(t), natsbus.ConnConfig{URL: url, Logger: zerolog.Nop(), Getenv: env(nil)})
		if err == nil {
			nc.Close()
		}
		done <- err
	}()
	srv, err := embedded.Start(embedded.Config{Port: port, StoreDir: t.TempDir(), Listen: true})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Connect after the server came up: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Connect did not connect once the server was up")
	}
}

func TestConnectRefusesConflictingAuth(t *testing.T) {
	creds := filepath.Join(t.TempDir(), "x.creds")
	os.WriteFile(creds, []byte("x"), 0o600)
	tests := []struct {
		name  string
		cfg   natsbus.ConnConfig
		field string
	}{
		{"token and user", natsbus.ConnConfig{Token: "t", User: "u"}, "auth"},
		{"creds and token", natsbus.ConnConfig{CredsFile: creds, Token: "t"}, "auth"},
		{"password without user", natsbus.ConnConfig{Password: "p"}, "User"},
		{"missing creds file", natsbus.ConnConfig{CredsFile: "/nonexistent/x.creds"}, "CredsFile"},
		{"env mixes", natsbus.ConnConfig{Getenv: env(map[string]string{natsbus.EnvToken: "t", natsbus.EnvUser: "u"})}, "auth"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.cfg.Getenv == nil {
				tc.cfg.Getenv = env(nil)
			}
			_, err := natsbus.Connect(bustest.Ctx(t), tc.cfg)
			var ce *natsbus.ConfigError
			if !errors.As(err, &ce) || ce.Field != tc.field {
				t.Fatalf("Connect = %v, want a ConfigError for %s", err, tc.field)
			}
		})
	}
}

// A user named by flag with its password in the environment (--user NAME,
// NATS_PASSWORD=...) logs in: the form deploy/nats-server.conf recommends.
func TestConnectTakesAFlagUsersPasswordFromTheEnvironment(t *testing.T) {
	srv := natstest.StartWithConfig(t, `authorization { user: "operator", password: "pw-canary-731" }`)
	nc, err := natsbus.Connect(bustest.Ctx(t), natsbus.ConnConfig{
		URL:    srv.ClientURL(),
		User:   "operator",
		Getenv: env(map[string]string{natsbus.EnvPassword: "pw-canary-731"}),
	})
	if err != nil {
		t.Fatalf("Connect with --user and NATS_PASSWORD: %v", err)
	}
	nc.Close()
	// A token from the environment is still not mixed with a flag's user.
	err = natsbus.ConnConfig{User: "operator", Getenv: env(map[string]string{natsbus.EnvToken: "t"})}.Validate()
	if err != nil {
		t.Fatalf("Validate with a flag's user and NATS_TOKEN set: %v (the token must be ignored)", err)
	}
}
