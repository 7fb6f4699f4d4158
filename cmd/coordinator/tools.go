package main

import (
	"context"
	"flag"
	"fmt"
	"time"

	"github.com/toolfleet/toolfleet/internal/natsbus/admission"
	"github.com/toolfleet/toolfleet/internal/termsafe"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// tools is "coordinator tools": pause or resume a tool on every worker,
// limit its rate, see its state and the audit log of such changes, over
// NATS ($NATS_URL; the operator's credentials under
// deploy/nats-server.conf). Each change is recorded in the approvals
// stream (the audit log) before it takes effect: admission.ToolTraffic.
var tools = opGroup{
	name: "tools",
	commands: `  pause TOOL [--until T] [--reason R]   stop handing out TOOL's calls on every worker
  resume TOOL [--reason R]              hand them out again
  limit TOOL --rate R [--burst B]       at most R calls of TOOL start per second, fleet-wide
  status TOOL...                        show whether each TOOL is paused, and its limit
  history [TOOL]                        show the recorded pauses, resumes and limits

T is a time (RFC 3339, or "2006-01-02 15:04:05" in UTC) or a duration from
now ("30m"); without it the pause lasts until "resume".
Run "tools <command> -h" for a command's flags.
`,
	subs: map[string]func(context.Context, *op, []string) int{
		"pause":   toolsPause,
		"resume":  toolsResume,
		"limit":   toolsLimit,
		"status":  toolsStatus,
		"history": toolsHistory,
	},
}

// audit are the flags of a recorded change.
type audit struct {
	reason string
	by     string
}

func (a *audit) register(fs *flag.FlagSet) {
	fs.StringVar(&a.reason, "reason", "", "why (recorded in the audit log, at most 500 bytes)")
	fs.StringVar(&a.by, "by", whoAmI(), "who (recorded in the audit log; default $USER)")
}

// check refuses a --reason or --by too long to record (done, with exit
// status 2), and warns when the record will name nobody: no --by, and
// neither $USER nor $LOGNAME is set.
func (a *audit) check(o *op) (code int, done bool) {
	switch {
	case len(a.reason) > protocol.MaxReasonLen:
		return o.usageError("--reason is longer than 500 bytes"), true
	case len(a.by) > 128:
		return o.usageError("--by is longer than 128 bytes"), true
	}
	if a.by == "" {
		fmt.Fprintln(o.stderr, "warning: the record names nobody: give --by NAME ($USER and $LOGNAME are not set)")
	}
	return exitOK, false
}

// note is the record of a change of tool at at, by whom and why the flags
// say.
func (a *audit) note(tool protocol.ToolName, at time.Time) protocol.TrafficNote {
	return protocol.TrafficNote{Tool: tool, By: a.by, Reason: a.reason, At: at}
}

// toolArgs parses a tools subcommand's flags and its positional tool
// names, from min to max of them (0: no bound). When done is set the
// subcommand returns code.
func toolArgs(o *op, args []string, min, max int) (_ []protocol.ToolName, code int, done bool) {
	pos, code, done := o.parse(args, anyNumber)
	if done {
		return nil, code, true
	}
	if len(pos) < min || (max > 0 && len(pos) > max) {
		return nil, o.usageError("wrong number of tools"), true
	}
	out := make([]protocol.ToolName, 0, len(pos))
	for _, p := range pos {
		tool, err := protocol.ParseToolName(p)
		if err != nil {
			return nil, o.usageError("bad tool name %q", clipLine(p)), true
		}
		out = append(out, tool)
	}
	return out, exitOK, false
}

// auditedTool parses the flags and the one tool of a recorded change
// ([toolArgs]), then its audit flags ([audit.check]). When done is set the
// subcommand returns code.
func auditedTool(o *op, args []string, aud *audit) (_ protocol.ToolName, code int, done bool) {
	tools, code, done := toolArgs(o, args, 1, 1)
	if done {
		return "", code, true
	}
	if code, done := aud.check(o); done {
		return "", code, true
	}
	return tools[0], exitOK, false
}

// openTraffic is the open of [withNATS] of the tools subcommands: the
// fleet's traffic control.
func openTraffic(_ context.Context, o *op, c natsConn) (*admission.ToolTraffic, error) {
	return admission.NewToolTraffic(c.js, o.subjects), nil
}

// parseUntil reads a pause's end: an RFC 3339 time, a "2006-01-02
// 15:04:05" UTC time (the nats CLI's form) or a duration from now.
func parseUntil(s string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	if t, err := time.ParseInLocation(time.DateTime, s, time.UTC); err == nil {
		return t, nil
	}
	if d, err := time.ParseDuration(s); err == nil && d > 0 {
		return now.Add(d), nil
	}
	return time.Time{}, fmt.Errorf("--until %q is neither a time (RFC 3339) nor a positive duration", clipLine(s))
}

func toolsPause(ctx context.Context, o *op, args []string) int {
	fs := o.flags("pause TOOL [--until T] [--reason R] [--by NAME]")
	var aud audit
	aud.register(fs)
	until := fs.String("until", "", "end of the pause: a time or a duration from now (default: until resumed)")
	tool, code, done := auditedTool(o, args, &aud)
	if done {
		return code
	}
	now := o.now().UTC()
	end := now.Add(protocol.PauseForever)
	if *until != "" {
		var err error
		if end, err = parseUntil(*until, now); err != nil {
			return o.usageError("%v", err)
		}
		if !end.After(now) {
			return o.usageError("--until is in the past")
		}
	}
	return withNATS(ctx, o, openTraffic, func(ctx context.Context, tt *admission.ToolTraffic) error {
		end = end.UTC()
		note := aud.note(tool, now)
		note.Until = &end
		p, err := tt.Pause(ctx, note)
		if err != nil {
			return err
		}
		fmt.Fprintf(o.stdout, "paused %s %s\n", tool, pauseText(p.Until, now))
		return nil
	})
}

func toolsResume(ctx context.Context, o *op, args []string) int {
	fs := o.flags("resume TOOL [--reason R] [--by NAME]")
	var aud audit
	aud.register(fs)
	tool, code, done := auditedTool(o, args, &aud)
	if done {
		return code
	}
	return withNATS(ctx, o, openTraffic, func(ctx context.Context, tt *admission.ToolTraffic) error {
		if err := tt.Resume(ctx, aud.note(tool, o.now().UTC())); err != nil {
			return err
		}
		fmt.Fprintf(o.stdout, "resumed %s\n", tool)
		return nil
	})
}

func toolsLimit(ctx context.Context, o *op, args []string) int {
	fs := o.flags("limit TOOL --rate R [--burst B] [--reason R] [--by NAME]")
	var aud audit
	aud.register(fs)
	rate := fs.Float64("rate", -1, "calls per second, fleet-wide; 0 lifts every limit, the manifest's too (required)")
	burst := fs.Int("burst", 1, "calls that may start at once after a quiet period")
	tools, code, done := toolArgs(o, args, 1, 1)
	if done {
		return code
	}
	if *rate < 0 {
		return o.usageError("--rate is required")
	}
	lim := protocol.RateLimit{Rate: *rate, Burst: *burst}
	if err := lim.Validate(); err != nil {
		return o.usageError("%v", err)
	}
	// The limit's flags are checked before the audit's, so the tool is not
	// taken by auditedTool.
	if code, done := aud.check(o); done {
		return code
	}
	return withNATS(ctx, o, openTraffic, func(ctx context.Context, tt *admission.ToolTraffic) error {
		note := aud.note(tools[0], o.now().UTC())
		note.Rate, note.Burst = *rate, *burst
		if err := tt.SetLimit(ctx, note); err != nil {
			return err
		}
		if *rate == 0 {
			fmt.Fprintf(o.stdout, "%s: no rate limit (every worker within a few seconds)\n", tools[0])
		} else {
			fmt.Fprintf(o.stdout, "%s: at most %g calls/s, burst %d, fleet-wide (every worker within a few seconds)\n", tools[0], *rate, max(*burst, 1))
		}
		return nil
	})
}

func toolsStatus(ctx context.Context, o *op, args []string) int {
	o.flags("status TOOL...")
	tools, code, done := toolArgs(o, args, 1, 0)
	if done {
		return code
	}
	return withNATS(ctx, o, openTraffic, func(ctx context.Context, tt *admission.ToolTraffic) error {
		now := o.now()
		var failed error // each tool's error is shown beside it
		for _, tool := range tools {
			p, err := tt.PauseState(ctx, tool)
			switch {
			case err != nil:
				fmt.Fprintf(o.stdout, "%s: %v\n", tool, err)
				failed = errShown
			case p.Paused:
				fmt.Fprintf(o.stdout, "%s: paused %s\n", tool, pauseText(p.Until, now))
			default:
				fmt.Fprintf(o.stdout, "%s: running\n", tool)
			}
			switch lim, set, err := tt.Limit(ctx, tool); {
			case err != nil:
				fmt.Fprintf(o.stdout, "%s: rate limit: %v\n", tool, err)
				failed = errShown
			case !set:
				fmt.Fprintf(o.stdout, "%s: rate limit: the manifest's, if it declares one\n", tool)
			case !lim.Limited():
				fmt.Fprintf(o.stdout, "%s: rate limit: none (set by the operator)\n", tool)
			default:
				fmt.Fprintf(o.stdout, "%s: rate limit: %g calls/s, burst %d (set by the operator)\n", tool, lim.Rate, max(lim.Burst, 1))
			}
		}
		return failed
	})
}

func toolsHistory(ctx context.Context, o *op, args []string) int {
	fs := o.flags("history [TOOL]")
	limit := fs.Int("limit", 1000, "print the newest this many records")
	tools, code, done := toolArgs(o, args, 0, 1)
	if done {
		return code
	}
	var tool protocol.ToolName
	if len(tools) == 1 {
		tool = tools[0]
	}
	return withNATS(ctx, o, openTraffic, func(ctx context.Context, tt *admission.ToolTraffic) error {
		n := max(*limit, 1)
		recs, err := tt.History(ctx, tool, n)
		if err != nil {
			return err
		}
		if len(recs) > n {
			recs = recs[len(recs)-n:]
		}
		now := o.now()
		for _, r := range recs {
			n := r.Note
			line := fmt.Sprintf("%s  %-6s %s", n.At.UTC().Format(time.RFC3339), n.Action, n.Tool)
			switch n.Action {
			case protocol.TrafficPause:
				if n.Until == nil || n.Until.Sub(now) > protocol.PauseForever/2 {
					line += " until resumed"
				} else {
					line += " until " + n.Until.UTC().Format(time.RFC3339)
				}
			case protocol.TrafficLimit:
				line += fmt.Sprintf(" rate %g/s burst %d", n.Rate, n.Burst)
			}
			if n.By != "" {
				line += "  by " + clipLine(n.By)
			}
			if n.Reason != "" {
				line += "  reason " + clipLine(n.Reason)
			}
			fmt.Fprintln(o.stdout, line)
		}
		return nil
	})
}

// pauseText says when a pause ends.
func pauseText(until, now time.Time) string {
	if until.IsZero() || until.Sub(now) > protocol.PauseForever/2 {
		return "until resumed"
	}
	return "until " + until.UTC().Format(time.RFC3339) + " (in " + until.Sub(now).Round(time.Second).String() + ")"
}

// clipLine makes operator- or wire-given text safe for a terminal line.
func clipLine(s string) string { return termsafe.Line(s, 200) }
