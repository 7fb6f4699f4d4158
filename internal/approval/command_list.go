package approval

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/toolfleet/toolfleet/pkg/protocol"
)

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

func (c *command) list(ctx context.Context, args []string) int {
	fs := newFlagSet("list", c.stderr, "list [--output text|json] [--since DURATION] [--approver NAME] [--prefix P]")
	var co common
	co.register(fs)
	output := fs.String("output", "text", "text or json")
	since := fs.Duration("since", 0, "read only requests stored within this long (0: the whole stream)")
	approver := fs.String("approver", defaultApprover(), "approver name shown in the suggested commands")
	pos, err := parse(fs, args)
	if err != nil {
		return usageStatus(err)
	}
	switch {
	case len(pos) != 0:
		return c.usageError(fs, "unexpected argument %q", displayText(pos[0], 32))
	case *output != "text" && *output != "json":
		return c.usageError(fs, "--output must be text or json")
	case *since < 0:
		return c.usageError(fs, "--since must be >= 0")
	case co.timeout <= 0:
		return c.usageError(fs, "--timeout must be > 0")
	}
	subjects, err := protocol.NewSubjects(co.prefix)
	if err != nil {
		return c.usageError(fs, "--prefix: %v", err)
	}
	if len(*approver) > 128 {
		return c.usageError(fs, "--approver is longer than 128 bytes")
	}

	ctx, cancel := context.WithTimeout(ctx, co.timeout)
	defer cancel()
	nc, approvals, err := c.open(ctx, subjects)
	if err != nil {
		return c.fail("list", err)
	}
	defer nc.Close()
	var from time.Time
	if *since > 0 {
		from = time.Now().Add(-*since)
	}
	now := time.Now()
	l, err := scanPending(ctx, approvals, subjects, from, now)
	if err != nil {
		return c.fail("list", err)
	}
	for _, s := range l.skipped {
		fmt.Fprintf(c.stderr, "approvals list: skipped %s\n", s)
	}
	if l.truncated {
		fmt.Fprintf(c.stderr, "approvals list: stopped after %d messages; use --since to read less\n", maxScan)
	}

	var open []*pending
	for _, id := range l.order {
		p := l.requests[id]
		if _, done := l.settled(id); done || !now.Before(p.req.Deadline) {
			continue
		}
		open = append(open, p)
	}
	slices.SortStableFunc(open, func(a, b *pending) int { return a.req.Deadline.Compare(b.req.Deadline) })

	if *output == "json" {
		out := struct {
			Pending []listedRequest `json:"pending"`
		}{Pending: []listedRequest{}}
		for _, p := range open {
			out.Pending = append(out.Pending, listedRequest{
				RunID: p.req.RunID, CallKey: p.req.CallKey, CallID: p.req.CallID, Round: p.req.Round,
				Tool: p.req.Tool, Arguments: p.req.Arguments, Digest: p.req.Digest, Deadline: p.req.Deadline,
				DecisionSubject: p.req.DecisionSubject, Sequence: p.seq,
			})
		}
		if err := json.NewEncoder(c.stdout).Encode(out); err != nil {
			return c.fail("list", err)
		}
		return exitOK
	}

	if len(open) == 0 {
		fmt.Fprintln(c.stdout, "no pending approval requests")
		return exitOK
	}
	fmt.Fprintf(c.stdout, "%d pending approval request(s)\n", len(open))
	for _, p := range open {
		subj, _ := subjects.ApprovalDecision(p.req.RunID, p.req.CallKey)
		fmt.Fprintln(c.stdout)
		printRequest(c.stdout, *p, now)
		fmt.Fprintf(c.stdout, "approve:   %s\n", pubCommand(subj, p.req.Digest, true, *approver))
		fmt.Fprintf(c.stdout, "deny:      %s\n", pubCommand(subj, p.req.Digest, false, *approver))
	}
	return exitOK
}
