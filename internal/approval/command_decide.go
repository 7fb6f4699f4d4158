package approval

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// decide implements "approve RUN KEY" and "deny RUN KEY --reason R".
func (c *command) decide(ctx context.Context, args []string, approve bool) int {
	name, usage := "approve", "approve RUN KEY [--reason R] [--approver NAME] [--wait D] [--prefix P]"
	if !approve {
		name, usage = "deny", "deny RUN KEY --reason R [--approver NAME] [--wait D] [--prefix P]"
	}
	fs := newFlagSet(name, c.stderr, usage)
	var co common
	co.register(fs)
	reason := fs.String("reason", "", "why (reaches the model; required to deny)")
	approver := fs.String("approver", defaultApprover(), "who decides (default $USER)")
	wait := fs.Duration("wait", 3*time.Second, "how long to wait for the coordinator to record the outcome (0: do not wait)")
	pos, err := parse(fs, args)
	if err != nil {
		return usageStatus(err)
	}
	switch {
	case len(pos) != 2:
		return c.usageError(fs, "want RUN and KEY, got %d argument(s)", len(pos))
	}
	run, runErr := protocol.ParseRunID(pos[0])
	key, keyErr := protocol.ParseCallKey(pos[1])
	switch {
	case runErr != nil:
		return c.usageError(fs, "RUN must match %s", protocol.TokenPattern)
	case keyErr != nil:
		return c.usageError(fs, "KEY must match %s", protocol.TokenPattern)
	case !approve && *reason == "":
		return c.usageError(fs, "--reason is required to deny")
	case len(*reason) > protocol.MaxReasonLen:
		return c.usageError(fs, "--reason is longer than %d bytes", protocol.MaxReasonLen)
	case len(*approver) > 128:
		return c.usageError(fs, "--approver is longer than 128 bytes")
	case co.timeout <= 0:
		return c.usageError(fs, "--timeout must be > 0")
	case *wait < 0:
		return c.usageError(fs, "--wait must be >= 0")
	}
	subjects, err := protocol.NewSubjects(co.prefix)
	if err != nil {
		return c.usageError(fs, "--prefix: %v", err)
	}
	reqSubj, _ := subjects.ApprovalRequest(run, key)
	decSubj, _ := subjects.ApprovalDecision(run, key)
	outSubj, _ := subjects.ApprovalOutcome(run, key)

	ctx, cancel := context.WithTimeout(ctx, co.timeout+*wait)
	defer cancel()
	nc, approvals, err := c.open(ctx, subjects)
	if err != nil {
		return c.fail(name, err)
	}
	defer nc.Close()

	l, err := scanLedger(ctx, approvals, subjects, []string{reqSubj, decSubj, outSubj}, time.Time{})
	if err != nil {
		return c.fail(name, err)
	}
	for _, s := range l.skipped {
		fmt.Fprintf(c.stderr, "approvals %s: skipped %s\n", name, s)
	}
	id := ledgerID(run, key)
	p := l.requests[id]
	if p == nil {
		return c.fail(name, fmt.Errorf("no approval request for run %s key %s", run, key))
	}
	now := time.Now()
	verb := "Approving"
	if !approve {
		verb = "Denying"
	}
	fmt.Fprintf(c.stdout, "%s:\n", verb)
	printRequest(c.stdout, *p, now)
	if how, done := l.settled(id); done {
		return c.fail(name, fmt.Errorf("request already settled: %s", how))
	}
	if !now.Before(p.req.Deadline) {
		return c.fail(name, fmt.Errorf("request expired at %s; the call did not run", p.req.Deadline.UTC().Format(time.RFC3339)))
	}

	d := protocol.ApprovalDecision{V: protocol.Version, Digest: p.req.Digest, Approved: &approve, Reason: *reason, Approver: *approver}
	data, err := json.Marshal(d)
	if err != nil {
		return c.fail(name, err)
	}
	pubCtx, pubCancel := context.WithTimeout(ctx, co.timeout)
	defer pubCancel()
	// A JetStream publish: the ack says the decision is in the audit log,
	// and it reaches the waiting coordinator like any core message.
	seq, err := approvals.Publish(pubCtx, &nats.Msg{Subject: decSubj, Data: data}, "")
	if err != nil {
		if le := nc.LastError(); errors.Is(le, nats.ErrPermissionViolation) {
			err = fmt.Errorf("%w (this NATS user may not publish decisions)", le)
		}
		return c.fail(name, fmt.Errorf("publishing the decision: %w", err))
	}
	fmt.Fprintf(c.stdout, "decision published on %s (stream sequence %d)\n", decSubj, seq)

	if *wait == 0 {
		return exitOK
	}
	if _, err := approvals.Stream(ctx); err != nil {
		return c.fail(name, err)
	}
	note, ok := waitNote(ctx, approvals, outSubj, *wait)
	switch {
	case !ok:
		// The decision is in the audit log, but no coordinator said it
		// acted on it: the operator must not take the call as decided.
		return c.fail(name, fmt.Errorf("no coordinator recorded an outcome within %v: the decision is stored, but no coordinator may have acted on it (is the run still waiting?)", *wait))
	case note.Digest != p.req.Digest:
		return c.fail(name, errors.New("the coordinator recorded an outcome for other arguments"))
	default:
		fmt.Fprintf(c.stdout, "coordinator recorded: %s\n", note.Outcome)
		want := protocol.NoteDenied
		if approve {
			want = protocol.NoteApproved
		}
		if note.Outcome != want {
			return c.fail(name, fmt.Errorf("the coordinator settled the request as %s", note.Outcome))
		}
	}
	return exitOK
}

// waitNote polls for the outcome note on subj for up to wait.
func waitNote(ctx context.Context, approvals *natsbus.ApprovalLedger, subj string, wait time.Duration) (protocol.ApprovalNote, bool) {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		if data, err := approvals.LastOn(ctx, subj); err == nil {
			if n, err := protocol.DecodeApprovalNote(data); err == nil {
				return n, true
			}
		}
		select {
		case <-ctx.Done():
			return protocol.ApprovalNote{}, false
		case <-tick.C:
		}
	}
}
