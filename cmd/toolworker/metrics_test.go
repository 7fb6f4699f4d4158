package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
)

func TestMetricsAddrFlag(t *testing.T) {
	var help bytes.Buffer
	if code := run(t.Context(), []string{"--help"}, &help, noEnv); code != exitOK || !strings.Contains(help.String(), "-metrics-addr") {
		t.Fatalf("--help (exit %d) does not list --metrics-addr:\n%s", code, help.String())
	}
	var out bytes.Buffer
	c, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	args := []string{"--nats-url", "nats://127.0.0.1:1", "--metrics-addr", "127.0.0.1:notaport"}
	if code := run(c, args, &out, noEnv); code != exitConfig {
		t.Fatalf("exit = %d, want %d; output:\n%s", code, exitConfig, out.String())
	}
	if !strings.Contains(out.String(), "--metrics-addr") {
		t.Fatalf("output does not name --metrics-addr:\n%s", out.String())
	}
}
