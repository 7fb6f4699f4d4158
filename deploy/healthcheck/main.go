// Command healthcheck probes an HTTP health endpoint and exits 0 when it
// answers 200 OK, 1 otherwise. The container images ship it so that a
// container runtime's healthcheck (docker compose "healthcheck: test") can
// ask the binaries' /healthz or /readyz without a shell, curl or wget,
// which the distroless images do not have.
//
//	healthcheck [--timeout 2s] URL
//
// Exit statuses: 0 healthy, 1 unhealthy or unreachable, 2 bad usage. It
// prints one line to stderr when the probe fails; it never prints the
// response body (a health page is not meant to carry secrets, but a probe
// has no reason to copy one into a runtime's logs either).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"time"
)

// Exit statuses.
const (
	exitHealthy   = 0
	exitUnhealthy = 1
	exitUsage     = 2
)

// maxDrain bounds how much of a response body is read before closing it.
const maxDrain = 64 << 10

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.Stderr))
}

func run(ctx context.Context, args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("healthcheck", flag.ContinueOnError)
	fs.SetOutput(stderr)
	timeout := fs.Duration("timeout", 2*time.Second, "give up after this long (> 0)")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: healthcheck [--timeout 2s] URL\n\nexit status: 0 when URL answers 200 OK, 1 otherwise, 2 bad usage")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitHealthy
		}
		return exitUsage
	}
	if fs.NArg() != 1 {
		fmt.Fprintln(stderr, "healthcheck: want exactly one URL")
		return exitUsage
	}
	if *timeout <= 0 {
		fmt.Fprintf(stderr, "healthcheck: --timeout must be > 0, got %v\n", *timeout)
		return exitUsage
	}
	target, err := checkURL(fs.Arg(0))
	if err != nil {
		fmt.Fprintln(stderr, "healthcheck:", err)
		return exitUsage
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	if err := probe(ctx, target); err != nil {
		fmt.Fprintln(stderr, "healthcheck:", err)
		return exitUnhealthy
	}
	return exitHealthy
}

// checkURL accepts absolute http and https URLs with a host.
func checkURL(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("bad URL: %w", err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("URL must be http:// or https:// with a host, got %q", u.Redacted())
	}
	return u, nil
}

// probe GETs target once, without following redirects, and wants 200.
func probe(ctx context.Context, target *url.URL) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target.String(), nil)
	if err != nil {
		return err
	}
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Do(req)
	if err != nil {
		return err // a *url.Error naming the URL without its password
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxDrain))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", target.Redacted(), resp.Status)
	}
	return nil
}
