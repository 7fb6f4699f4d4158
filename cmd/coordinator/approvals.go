package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolfleet/toolfleet/internal/approval"
	"github.com/toolfleet/toolfleet/internal/natsbus/stores"
	"github.com/toolfleet/toolfleet/internal/termsafe"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// approvals is "coordinator approvals": list pending requests, approve or
// deny one, over NATS ($NATS_URL).
var approvals = opGroup{
	name: "approvals",
	commands: `  list                          show pending approval requests
  approve RUN KEY [--reason R]  approve one request
  deny RUN KEY --reason R       deny one request

Run "approvals <command> -h" for a command's flags.
`,
	subs: map[string]func(context.Context, *op, []string) int{
		"list":    approvalsList,
		"ls":      approvalsList,
		"approve": func(ctx context.Context, o *op, args []string) int { return approvalsDecide(ctx, o, args, true) },
		"deny":    func(ctx context.Context, o *op, args []string) int { return approvalsDecide(ctx, o, args, false) },
	},
}

// ledgerConn is what the approvals subcommands use of their connection.
type ledgerConn struct {
	nc     *nats.Conn // whose last error says why a publish was refused
	ledger *stores.ApprovalLedger
}

// openLedger is the open of [withNATS] of the approvals subcommands: the
// approvals stream's ledger.
func openLedger(_ context.Context, o *op, c natsConn) (ledgerConn, error) {
	return ledgerConn{c.nc, stores.NewApprovalLedger(c.js, o.subjects)}, nil
}

// listedRequest is one pending request in "approvals list --output json".
type listedRequest struct {
	RunID           protocol.RunID    `json:"run_id"`
	CallKey         protocol.CallKey  `json:"call_key"`
	CallID          protocol.CallID   `json:"call_id,omitempty"`
	Round           int               `json:"round"`
	Tool            protocol.ToolName `json:"tool"`
	Arguments       json.RawMessage   `json:"arguments"`
	Digest          string            `json:"digest"`
	Deadline        time.Time         `json:"deadline"`
	DecisionSubject string            `json:"decision_subject"`
	Sequence        uint64            `json:"stream_sequence"`
}

func approvalsList(ctx context.Context, o *op, args []string) int {
	fs := o.flags("list [--output text|json] [--since DURATION] [--approver NAME] [--prefix P]")
	output := fs.String("output", "text", "text or json")
	since := fs.Duration("since", 0, "read only requests stored within this long (0: the whole stream)")
	approver := fs.String("approver", whoAmI(), "approver name shown in the suggested commands")
	pos, code, done := o.parse(args, anyNumber)
	if done {
		return code
	}
	switch {
	case len(pos) != 0:
		return o.usageError("unexpected argument %q", termsafe.Line(pos[0], 32))
	case *output != "text" && *output != "json":
		return o.usageError("--output must be text or json")
	case *since < 0:
		return o.usageError("--since must be >= 0")
	case len(*approver) > 128:
		return o.usageError("--approver is longer than 128 bytes")
	}
	subjects := o.subjects
	return withNATS(ctx, o, openLedger, func(ctx context.Context, c ledgerConn) error {
		var from time.Time
		if *since > 0 {
			from = o.now().Add(-*since)
		}
		now := o.now()
		l, err := approval.List(ctx, c.ledger, subjects, from, now)
		if err != nil {
			return err
		}
		for _, s := range l.Skipped {
			fmt.Fprintf(o.stderr, "%s: skipped %s\n", o.name, s)
		}
		if l.Truncated {
			fmt.Fprintf(o.stderr, "%s: stopped after %d messages; use --since to read less\n", o.name, approval.MaxScan)
		}

		if *output == "json" {
			out := struct {
				Pending []listedRequest `json:"pending"`
			}{Pending: []listedRequest{}}
			for _, p := range l.Open {
				out.Pending = append(out.Pending, listedRequest{
					RunID: p.RunID, CallKey: p.CallKey, CallID: p.CallID, Round: p.Round,
					Tool: p.Tool, Arguments: p.Arguments, Digest: p.Digest, Deadline: p.Deadline,
					DecisionSubject: p.DecisionSubject, Sequence: p.Sequence,
				})
			}
			if err := json.NewEncoder(o.stdout).Encode(out); err != nil {
				return err
			}
			return nil
		}

		if len(l.Open) == 0 {
			fmt.Fprintln(o.stdout, "no pending approval requests")
			return nil
		}
		fmt.Fprintf(o.stdout, "%d pending approval request(s)\n", len(l.Open))
		for _, p := range l.Open {
			subj, _ := subjects.ApprovalDecision(p.RunID, p.CallKey)
			fmt.Fprintln(o.stdout)
			printRequest(o.stdout, p, now)
			fmt.Fprintf(o.stdout, "approve:   %s\n", pubCommand(subj, p.Digest, true, *approver))
			fmt.Fprintf(o.stdout, "deny:      %s\n", pubCommand(subj, p.Digest, false, *approver))
		}
		return nil
	})
}

// approvalsDecide implements "approve RUN KEY" and "deny RUN KEY --reason R".
func approvalsDecide(ctx context.Context, o *op, args []string, approve bool) int {
	usage := "approve RUN KEY [--reason R] [--approver NAME] [--wait D] [--prefix P]"
	if !approve {
		usage = "deny RUN KEY --reason R [--approver NAME] [--wait D] [--prefix P]"
	}
	fs := o.flags(usage)
	reason := fs.String("reason", "", "why (reaches the model; required to deny)")
	approver := fs.String("approver", whoAmI(), "who decides (default $USER)")
	// --wait lengthens the bound of the NATS work beyond --timeout
	// (op.wait), unlike every other subcommand's: the outcome is waited
	// for after the decision is published.
	fs.DurationVar(&o.wait, "wait", 3*time.Second, "how long to wait for the coordinator to record the outcome (0: do not wait)")
	pos, code, done := o.parse(args, anyNumber)
	if done {
		return code
	}
	if len(pos) != 2 {
		return o.usageError("want RUN and KEY, got %d argument(s)", len(pos))
	}
	run, runErr := protocol.ParseRunID(pos[0])
	key, keyErr := protocol.ParseCallKey(pos[1])
	switch {
	case runErr != nil:
		return o.usageError("RUN must match %s", protocol.TokenPattern)
	case keyErr != nil:
		return o.usageError("KEY must match %s", protocol.TokenPattern)
	case !approve && *reason == "":
		return o.usageError("--reason is required to deny")
	case len(*reason) > protocol.MaxReasonLen:
		return o.usageError("--reason is longer than %d bytes", protocol.MaxReasonLen)
	case len(*approver) > 128:
		return o.usageError("--approver is longer than 128 bytes")
	case o.wait < 0:
		return o.usageError("--wait must be >= 0")
	}
	subjects := o.subjects
	decSubj, _ := subjects.ApprovalDecision(run, key)
	outSubj, _ := subjects.ApprovalOutcome(run, key)

	return withNATS(ctx, o, openLedger, func(ctx context.Context, c ledgerConn) error {
		call, err := approval.Lookup(ctx, c.ledger, subjects, run, key)
		if err != nil {
			return err
		}
		for _, s := range call.Skipped {
			fmt.Fprintf(o.stderr, "%s: skipped %s\n", o.name, s)
		}
		p := call.Request
		if p == nil {
			return fmt.Errorf("no approval request for run %s key %s", run, key)
		}
		now := o.now()
		verb := "Approving"
		if !approve {
			verb = "Denying"
		}
		fmt.Fprintf(o.stdout, "%s:\n", verb)
		printRequest(o.stdout, *p, now)
		if call.Settled != "" {
			return fmt.Errorf("request already settled: %s", call.Settled)
		}
		if !now.Before(p.Deadline) {
			return fmt.Errorf("request expired at %s; the call did not run", p.Deadline.UTC().Format(time.RFC3339))
		}

		d := protocol.ApprovalDecision{V: protocol.Version, Digest: p.Digest, Approved: &approve, Reason: *reason, Approver: *approver}
		data, err := json.Marshal(d)
		if err != nil {
			return err
		}
		pubCtx, pubCancel := context.WithTimeout(ctx, o.timeout)
		defer pubCancel()
		// A JetStream publish: the ack says the decision is in the audit log,
		// and it reaches the waiting coordinator like any core message.
		seq, err := c.ledger.Publish(pubCtx, &nats.Msg{Subject: decSubj, Data: data}, "")
		if err != nil {
			if le := c.nc.LastError(); errors.Is(le, nats.ErrPermissionViolation) {
				err = fmt.Errorf("%w (this NATS user may not publish decisions)", le)
			}
			return fmt.Errorf("publishing the decision: %w", err)
		}
		fmt.Fprintf(o.stdout, "decision published on %s (stream sequence %d)\n", decSubj, seq)

		if o.wait == 0 {
			return nil
		}
		if _, err := c.ledger.Stream(ctx); err != nil {
			return err
		}
		note, ok := approval.WaitOutcome(ctx, c.ledger, outSubj, o.wait)
		switch {
		case !ok:
			// The decision is in the audit log, but no coordinator said it
			// acted on it: the operator must not take the call as decided.
			return fmt.Errorf("no coordinator recorded an outcome within %v: the decision is stored, but no coordinator may have acted on it (is the run still waiting?)", o.wait)
		case note.Digest != p.Digest:
			return errors.New("the coordinator recorded an outcome for other arguments")
		default:
			fmt.Fprintf(o.stdout, "coordinator recorded: %s\n", note.Outcome)
			want := protocol.NoteDenied
			if approve {
				want = protocol.NoteApproved
			}
			if note.Outcome != want {
				return fmt.Errorf("the coordinator settled the request as %s", note.Outcome)
			}
		}
		return nil
	})
}

// printRequest shows what an operator is deciding about.
func printRequest(w io.Writer, p approval.Shown, now time.Time) {
	fmt.Fprintf(w, "run:       %s\n", p.RunID)
	fmt.Fprintf(w, "key:       %s\n", p.CallKey)
	fmt.Fprintf(w, "tool:      %s\n", p.Tool)
	if p.CallID != "" {
		fmt.Fprintf(w, "call id:   %s\n", termsafe.Line(string(p.CallID), 64))
	}
	fmt.Fprintf(w, "round:     %d\n", p.Round)
	fmt.Fprintf(w, "arguments: %s\n", p.Args)
	fmt.Fprintf(w, "digest:    %s\n", p.Digest)
	fmt.Fprintf(w, "deadline:  %s (%s)\n", p.Deadline.UTC().Format(time.RFC3339), deadlineText(p.Deadline, now))
}

// deadlineText says when a request expires, or expired.
func deadlineText(deadline, now time.Time) string {
	d := deadline.Sub(now)
	if d <= 0 {
		return "expired " + (-d).Truncate(time.Second).String() + " ago"
	}
	return "in " + d.Truncate(time.Second).String()
}

// pubCommand is the nats CLI command that publishes a decision for the
// request whose digest is digest.
func pubCommand(subj, digest string, approve bool, approver string) string {
	body := `{"digest":"` + digest + `","approved":true`
	if !approve {
		body = `{"digest":"` + digest + `","approved":false,"reason":"REASON"`
	}
	if approver != "" {
		body += `,"approver":` + jsonString(approver)
	}
	body += "}"
	return "nats pub " + subj + " " + shellQuote(body)
}

// jsonString quotes s as a JSON string, leaving non-ASCII as it is.
func jsonString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r < 0x20:
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// shellQuote quotes s for a POSIX shell.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
