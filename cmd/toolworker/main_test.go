package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/toolfleet/toolfleet/internal/natstest"
)

func noEnv(string) string { return "" }

func TestHelpListsEveryFlag(t *testing.T) {
	var out bytes.Buffer
	if code := run(t.Context(), []string{"--help"}, &out, noEnv); code != exitOK {
		t.Fatalf("--help exit = %d, want 0", code)
	}
	for _, f := range []string{"nats-url", "creds", "user", "password", "tools", "builtin", "concurrency", "name", "prefix", "log-stderr", "log-level", "ack-wait"} {
		if !strings.Contains(out.String(), "-"+f) {
			t.Errorf("--help does not list --%s:\n%s", f, out.String())
		}
	}
}

func TestBadUsageExitsTwoNamingTheFlag(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"unknown flag", []string{"--bogus"}, "bogus"},
		{"stray argument", []string{"serve"}, "unexpected argument"},
		{"bad concurrency", []string{"--concurrency", "0"}, "--concurrency"},
		{"bad ack wait", []string{"--ack-wait", "1ms"}, "--ack-wait"},
		{"bad log level", []string{"--log-level", "loud"}, "--log-level"},
		{"unknown builtin", []string{"--builtin", "rm"}, "--builtin"},
		{"missing manifest", []string{"--tools", "/nonexistent/tools.json"}, "--tools"},
		{"bad prefix", []string{"--prefix", "a.b"}, "--prefix"},
		{"two auth methods", []string{"--user", "u", "--creds", "/nonexistent.creds"}, "--creds"},
		{"password without user", []string{"--password", "p"}, "--user"},
		{"zero concurrency", []string{"--concurrency", "0"}, "--concurrency"},
		{"huge concurrency", []string{"--concurrency", "100000"}, "--concurrency"},
		{"bad name", []string{"--name", "has space"}, "--name"},
		{"zero stream check interval", []string{"--stream-check-interval", "0s"}, "--stream-check-interval"},
		{"bad metrics address", []string{"--metrics-addr", "nowhere:port"}, "--metrics-addr"},
		{"bad manifest", []string{"--tools", "main_test.go"}, "--tools"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			c, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			args := append([]string{"--nats-url", "nats://127.0.0.1:1"}, tc.args...)
			if code := run(c, args, &out, noEnv); code != exitConfig {
				t.Fatalf("exit = %d, want %d; output:\n%s", code, exitConfig, out.String())
			}
			if !strings.Contains(out.String(), tc.want) {
				t.Fatalf("output does not name %q:\n%s", tc.want, out.String())
			}
		})
	}
}

func TestServesUntilSignalled(t *testing.T) {
	srv := natstest.Start(t)
	c, stop := context.WithCancel(t.Context())
	done := make(chan int, 1)
	out := natstest.NewLogBuffer(t)
	go func() {
		done <- run(c, []string{"--name", "cli-1", "--log-level", "debug"}, out,
			func(k string) string {
				if k == "NATS_URL" {
					return srv.ClientURL()
				}
				return ""
			})
	}()
	natstest.WaitFor(t, 10*time.Second, func() error {
		if !strings.Contains(out.String(), "worker started") {
			return errors.New("worker not started yet")
		}
		return nil
	})
	stop() // what SIGTERM does
	select {
	case code := <-done:
		if code != exitOK {
			t.Fatalf("exit = %d, want 0 after a graceful shutdown; output:\n%s", code, out.String())
		}
	case <-time.After(15 * time.Second):
		t.Fatal("toolworker did not stop after its context ended")
	}
	if !strings.Contains(out.String(), `"worker":"cli-1"`) {
		t.Fatalf("logs lack the worker name:\n%s", out.String())
	}
}
