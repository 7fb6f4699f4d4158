package main

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// TestCancelNeedsItsAuthor: "runs cancel" without --by, where $USER is not
// set, is a usage error and connects to nothing: a cancel request names
// who asks, and coordinators ignore one that does not.
func TestCancelNeedsItsAuthor(t *testing.T) {
	t.Setenv("USER", "")
	var out, errOut strings.Builder
	conn := func(context.Context) (*nats.Conn, error) {
		t.Error("connected")
		return nil, errors.New("no server")
	}
	if code := runsGroup(nil).run(t.Context(), []string{"cancel", "run1"}, &out, &errOut, conn); code != 2 || !strings.Contains(errOut.String(), "--by is required") {
		t.Fatalf("exit %d, %q: want 2 and --by required", code, errOut.String())
	}
}

// TestIDIsTheSubmissionsRunID: "runs id" prints the run id a client's
// submission is stored under, the one "coordinator submit --id" prints,
// without connecting to anything; a client or submission id that is not
// a token is a usage error.
func TestIDIsTheSubmissionsRunID(t *testing.T) {
	conn := func(context.Context) (*nats.Conn, error) {
		t.Error("connected")
		return nil, errors.New("no server")
	}
	t.Setenv("NATS_USER", "client")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"id", "q-0002"}, string(protocol.SubmissionRunID("client", "q-0002"))},
		{[]string{"id", "q-0002", "--client", "acme"}, string(protocol.SubmissionRunID("acme", "q-0002"))},
	} {
		var out, errOut strings.Builder
		if code := runsGroup(nil).run(t.Context(), tc.args, &out, &errOut, conn); code != 0 || strings.TrimSpace(out.String()) != tc.want {
			t.Errorf("%v: exit %d, %q (stderr %q), want 0 and %s", tc.args, code, out.String(), errOut.String(), tc.want)
		}
	}
	var out, errOut strings.Builder
	if code := runsGroup(nil).run(t.Context(), []string{"id", "a.b"}, &out, &errOut, conn); code != 2 || out.Len() != 0 {
		t.Errorf("a submission id that is no token: exit %d, %q, want 2 and nothing printed", code, out.String())
	}
}

// TestControlUsage: replay, fork, resume and bulk changes refuse bad
// flags before connecting: a fork needs --at, a replay's --model must
// make a model, an --instructions or --messages file must be readable, a
// cancel or resume names a run or a filter, a state is one of the
// statuses, a request names who asks.
func TestControlUsage(t *testing.T) {
	conn := func(context.Context) (*nats.Conn, error) {
		t.Error("connected")
		return nil, errors.New("no server")
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"fork", "run1"}, "--at ROUND is required"},
		{[]string{"fork", "run1", "--at", "0"}, "--at ROUND is required"},
		{[]string{"fork", "run1", "--at", "2", "--messages", "/nonexistent/m.json"}, "--messages"},
		{[]string{"replay", "run1", "--model", "scripted:/nonexistent/x.json"}, "--model:"},
		{[]string{"replay", "run1", "--model", "frob:x"}, "--model must be"},
		{[]string{"replay", "run1", "--instructions", "/nonexistent/i.txt"}, "--instructions"},
		{[]string{"replay"}, "takes 1 argument"},
		{[]string{"resume"}, "name a run, or select runs"},
		{[]string{"cancel", "--yes"}, "name a run, or select runs"},
		{[]string{"list", "--state", "stuck"}, "--state must be"},
		{[]string{"resume", "--state", "parked", "--by", ""}, "--by is required"},
	} {
		var out, errOut strings.Builder
		if code := runsGroup(nil).run(t.Context(), tc.args, &out, &errOut, conn); code != 2 || !strings.Contains(errOut.String(), tc.want) {
			t.Errorf("%v: exit %d, %q, want 2 and %q", tc.args, code, errOut.String(), tc.want)
		}
	}
}

// TestInputUsage: "runs input" needs exactly one of --enqueue and
// --interrupt, a non-blank --text and a client that is a token, and
// refuses anything else before connecting.
func TestInputUsage(t *testing.T) {
	conn := func(context.Context) (*nats.Conn, error) {
		t.Error("connected")
		return nil, errors.New("no server")
	}
	for _, args := range [][]string{
		{"input", "run1", "--text", "hi"},
		{"input", "run1", "--enqueue", "--interrupt", "--text", "hi"},
		{"input", "run1", "--enqueue"},
		{"input", "run1", "--enqueue", "--text", "  "},
		{"input", "run1", "--enqueue", "--text", "hi", "--client", "a.b"},
		{"input", "--enqueue", "--text", "hi"},
	} {
		var out, errOut strings.Builder
		if code := runsGroup(nil).run(t.Context(), args, &out, &errOut, conn); code != 2 {
			t.Errorf("%v: exit %d (%q), want 2", args, code, errOut.String())
		}
	}
}
