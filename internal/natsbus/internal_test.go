package natsbus

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func TestRetryableConnectError(t *testing.T) {
	tests := []struct {
		err  error
		want bool
	}{
		{nats.ErrNoServers, true},
		{nats.ErrTimeout, true},
		{nats.ErrAuthorization, false},
		{errors.New("nats: Authorization Violation"), false},
		{errors.New("tls: handshake failure"), false},
	}
	for _, tc := range tests {
		if got := retryableConnectError(tc.err); got != tc.want {
			t.Errorf("retryableConnectError(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

func TestRedactURL(t *testing.T) {
	got := redactURL("nats://alice:s3cret@a:4222, nats://b:4222,tls://tok-9@c:4443")
	if strings.Contains(got, "s3cret") || strings.Contains(got, "tok-9") || strings.Contains(got, "alice") {
		t.Fatalf("redactURL leaked credentials: %s", got)
	}
	if !strings.Contains(got, "nats://b:4222") {
		t.Fatalf("redactURL lost a plain URL: %s", got)
	}
}

// FuzzRedactURL checks that no password or token in a URL list survives
// redaction.
func FuzzRedactURL(f *testing.F) {
	for _, s := range []string{
		"nats://u:p@host:4222", "nats://tok@h", "a,b,c", "nats://h:1,nats://x:y@z:2",
		"%zz://u:p@h", "nats://u:p@[::1]:4222", ":@", "nats://@h",
	} {
		f.Add(s, "SECRETVALUE")
	}
	f.Fuzz(func(t *testing.T, list, secret string) {
		if len(secret) < 6 || strings.ContainsAny(secret, ",@:/?#[]%") || strings.Contains(list, secret) {
			return
		}
		in := strings.Replace(list, "@", ":"+secret+"@", 1)
		if !strings.Contains(in, secret) {
			in = "nats://user:" + secret + "@" + list
		}
		if out := redactURL(in); strings.Contains(out, secret) {
			t.Fatalf("redactURL(%q) = %q keeps the secret", in, out)
		}
	})
}

// TestTransientAnswers: a "not now" answer of a cluster in a leader change
// is retried; other answers are final.
func TestTransientAnswers(t *testing.T) {
	for _, tt := range []struct {
		code jetstream.ErrorCode
		want bool
	}{
		{10008, true}, {10009, true}, {10158, true}, {10163, true},
		{10071, false}, // wrong last sequence: fenced, not retried
		{10003, false}, // bad request
	} {
		err := fmt.Errorf("publishing: %w", &jetstream.APIError{ErrorCode: tt.code})
		if got := Transient(err); got != tt.want {
			t.Errorf("transient(err_code %d) = %v, want %v", tt.code, got, tt.want)
		}
	}
	if !Transient(errors.New("timeout")) {
		t.Error("an unanswered request is not transient")
	}
}
