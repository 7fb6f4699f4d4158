package traffic

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/internal/termsafe"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// Exit statuses of [Command].
const (
	exitOK    = 0
	exitError = 1
	exitUsage = 2
)

const commandUsage = `usage: tools <command> [flags]

commands:
  pause TOOL [--until T] [--reason R]   stop handing out TOOL's calls on every worker
  resume TOOL [--reason R]              hand them out again
  limit TOOL --rate R [--burst B]       at most R calls of TOOL start per second, fleet-wide
  status TOOL...                        show whether each TOOL is paused, and its limit
  history [TOOL]                        show the recorded pauses, resumes and limits

T is a time (RFC 3339, or "2006-01-02 15:04:05" in UTC) or a duration from
now ("30m"); without it the pause lasts until "resume".
Run "tools <command> -h" for a command's flags.
`

// Command runs "tools pause|resume|status|history". args are the words
// after "tools". conn opens the NATS connection, which Command closes; it
// is called only once the arguments are valid. The result is the exit
// status: 0 done, 1 error (NATS, refused, unknown tool), 2 bad usage.
func Command(ctx context.Context, args []string, stdout, stderr io.Writer, conn func(context.Context) (*nats.Conn, error)) int {
	if len(args) > 0 && args[0] == "tools" {
		args = args[1:]
	}
	if len(args) == 0 {
		fmt.Fprint(stderr, commandUsage)
		return exitUsage
	}
	c := &command{stdout: stdout, stderr: stderr, conn: conn, now: time.Now}
	switch args[0] {
	case "pause":
		return c.pause(ctx, args[1:])
	case "resume":
		return c.resume(ctx, args[1:])
	case "limit":
		return c.limit(ctx, args[1:])
	case "status":
		return c.status(ctx, args[1:])
	case "history":
		return c.history(ctx, args[1:])
	case "help", "-h", "--help":
		fmt.Fprint(stdout, commandUsage)
		return exitOK
	default:
		fmt.Fprintf(stderr, "tools: unknown command %q\n%s", clip(args[0]), commandUsage)
		return exitUsage
	}
}

type command struct {
	stdout, stderr io.Writer
	conn           func(context.Context) (*nats.Conn, error)
	now            func() time.Time
}

// common are the flags every subcommand takes.
type common struct {
	prefix  string
	timeout time.Duration
}

func (c *common) register(fs *flag.FlagSet) {
	fs.StringVar(&c.prefix, "prefix", protocol.DefaultPrefix, "subject prefix of the fleet")
	fs.DurationVar(&c.timeout, "timeout", 10*time.Second, "bound on the whole command's NATS work")
}

// audit are the flags of a change.
type audit struct {
	reason string
	by     string
}

func (a *audit) register(fs *flag.FlagSet) {
	fs.StringVar(&a.reason, "reason", "", "why (recorded in the audit log, at most 500 bytes)")
	fs.StringVar(&a.by, "by", defaultOperator(), "who (recorded in the audit log; default $USER)")
}

func (a *audit) check() error {
	switch {
	case len(a.reason) > protocol.MaxReasonLen:
		return errors.New("--reason is longer than 500 bytes")
	case len(a.by) > 128:
		return errors.New("--by is longer than 128 bytes")
	}
	return nil
}

// warnAnonymous warns that the record will name nobody: no --by, and
// neither $USER nor $LOGNAME is set.
func (a *audit) warnAnonymous(w io.Writer) {
	if a.by == "" {
		fmt.Fprintln(w, "warning: the record names nobody: give --by NAME ($USER and $LOGNAME are not set)")
	}
}

func defaultOperator() string {
	if u := os.Getenv("USER"); u != "" {
		return u
	}
	return os.Getenv("LOGNAME")
}

func newFlagSet(name string, stderr io.Writer, usage string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: tools %s\n\nflags:\n", usage)
		fs.PrintDefaults()
	}
	return fs
}

// parse parses flags that may come before, between or after positional
// arguments, and returns the positional ones.
func parse(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if rest[0] == "--" {
			return append(pos, rest[1:]...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

func usageStatus(err error) int {
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	return exitUsage
}

func (c *command) usageError(fs *flag.FlagSet, format string, a ...any) int {
	fmt.Fprintf(c.stderr, "tools %s: %s\n", fs.Name(), fmt.Sprintf(format, a...))
	fs.Usage()
	return exitUsage
}

func (c *command) fail(name string, err error) int {
	fmt.Fprintf(c.stderr, "tools %s: %v\n", name, err)
	return exitError
}

// tools parses the positional tool names.
func (c *command) tools(fs *flag.FlagSet, pos []string, min, max int) ([]protocol.ToolName, int) {
	if len(pos) < min || (max > 0 && len(pos) > max) {
		return nil, c.usageError(fs, "wrong number of tools")
	}
	out := make([]protocol.ToolName, 0, len(pos))
	for _, p := range pos {
		tool, err := protocol.ParseToolName(p)
		if err != nil {
			return nil, c.usageError(fs, "bad tool name %q", clip(p))
		}
		out = append(out, tool)
	}
	return out, -1
}

// open connects and returns the connection and the fleet's traffic
// control.
func (c *command) open(ctx context.Context, prefix string) (*nats.Conn, *natsbus.ToolTraffic, error) {
	subjects, err := protocol.NewSubjects(prefix)
	if err != nil {
		return nil, nil, err
	}
	nc, err := c.conn(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("connecting to NATS: %w", err)
	}
	js, err := natsbus.NewJetStream(nc, "")
	if err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("JetStream: %w", err)
	}
	return nc, natsbus.NewToolTraffic(js, subjects), nil
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
	return time.Time{}, fmt.Errorf("--until %q is neither a time (RFC 3339) nor a positive duration", clip(s))
}

func (c *command) pause(ctx context.Context, args []string) int {
	fs := newFlagSet("pause", c.stderr, "pause TOOL [--until T] [--reason R] [--by NAME]")
	var (
		com   common
		aud   audit
		until string
	)
	com.register(fs)
	aud.register(fs)
	fs.StringVar(&until, "until", "", "end of the pause: a time or a duration from now (default: until resumed)")
	pos, err := parse(fs, args)
	if err != nil {
		return usageStatus(err)
	}
	tools, status := c.tools(fs, pos, 1, 1)
	if status >= 0 {
		return status
	}
	if err := aud.check(); err != nil {
		return c.usageError(fs, "%v", err)
	}
	aud.warnAnonymous(c.stderr)
	now := c.now().UTC()
	end := now.Add(protocol.PauseForever)
	if until != "" {
		if end, err = parseUntil(until, now); err != nil {
			return c.usageError(fs, "%v", err)
		}
		if !end.After(now) {
			return c.usageError(fs, "--until is in the past")
		}
	}
	ctx, cancel := context.WithTimeout(ctx, com.timeout)
	defer cancel()
	nc, tt, err := c.open(ctx, com.prefix)
	if err != nil {
		return c.fail("pause", err)
	}
	defer nc.Close()
	end = end.UTC()
	p, err := tt.Pause(ctx, protocol.TrafficNote{Tool: tools[0], Until: &end, By: aud.by, Reason: aud.reason, At: now})
	if err != nil {
		return c.fail("pause", err)
	}
	fmt.Fprintf(c.stdout, "paused %s %s\n", tools[0], untilText(p.Until, now))
	return exitOK
}

func (c *command) resume(ctx context.Context, args []string) int {
	fs := newFlagSet("resume", c.stderr, "resume TOOL [--reason R] [--by NAME]")
	var (
		com common
		aud audit
	)
	com.register(fs)
	aud.register(fs)
	pos, err := parse(fs, args)
	if err != nil {
		return usageStatus(err)
	}
	tools, status := c.tools(fs, pos, 1, 1)
	if status >= 0 {
		return status
	}
	if err := aud.check(); err != nil {
		return c.usageError(fs, "%v", err)
	}
	aud.warnAnonymous(c.stderr)
	ctx, cancel := context.WithTimeout(ctx, com.timeout)
	defer cancel()
	nc, tt, err := c.open(ctx, com.prefix)
	if err != nil {
		return c.fail("resume", err)
	}
	defer nc.Close()
	if err := tt.Resume(ctx, protocol.TrafficNote{Tool: tools[0], By: aud.by, Reason: aud.reason, At: c.now().UTC()}); err != nil {
		return c.fail("resume", err)
	}
	fmt.Fprintf(c.stdout, "resumed %s\n", tools[0])
	return exitOK
}

func (c *command) limit(ctx context.Context, args []string) int {
	fs := newFlagSet("limit", c.stderr, "limit TOOL --rate R [--burst B] [--reason R] [--by NAME]")
	var (
		com   common
		aud   audit
		rate  float64
		burst int
	)
	com.register(fs)
	aud.register(fs)
	fs.Float64Var(&rate, "rate", -1, "calls per second, fleet-wide; 0 lifts every limit, the manifest's too (required)")
	fs.IntVar(&burst, "burst", 1, "calls that may start at once after a quiet period")
	pos, err := parse(fs, args)
	if err != nil {
		return usageStatus(err)
	}
	tools, status := c.tools(fs, pos, 1, 1)
	if status >= 0 {
		return status
	}
	if rate < 0 {
		return c.usageError(fs, "--rate is required")
	}
	lim := protocol.RateLimit{Rate: rate, Burst: burst}
	if err := lim.Validate(); err != nil {
		return c.usageError(fs, "%v", err)
	}
	if err := aud.check(); err != nil {
		return c.usageError(fs, "%v", err)
	}
	aud.warnAnonymous(c.stderr)
	ctx, cancel := context.WithTimeout(ctx, com.timeout)
	defer cancel()
	nc, tt, err := c.open(ctx, com.prefix)
	if err != nil {
		return c.fail("limit", err)
	}
	defer nc.Close()
	note := protocol.TrafficNote{Tool: tools[0], Rate: rate, Burst: burst, By: aud.by, Reason: aud.reason, At: c.now().UTC()}
	if err := tt.SetLimit(ctx, note); err != nil {
		return c.fail("limit", err)
	}
	if rate == 0 {
		fmt.Fprintf(c.stdout, "%s: no rate limit (every worker within a few seconds)\n", tools[0])
	} else {
		fmt.Fprintf(c.stdout, "%s: at most %g calls/s, burst %d, fleet-wide (every worker within a few seconds)\n", tools[0], rate, max(burst, 1))
	}
	return exitOK
}

func (c *command) status(ctx context.Context, args []string) int {
	fs := newFlagSet("status", c.stderr, "status TOOL...")
	var com common
	com.register(fs)
	pos, err := parse(fs, args)
	if err != nil {
		return usageStatus(err)
	}
	tools, status := c.tools(fs, pos, 1, 0)
	if status >= 0 {
		return status
	}
	ctx, cancel := context.WithTimeout(ctx, com.timeout)
	defer cancel()
	nc, tt, err := c.open(ctx, com.prefix)
	if err != nil {
		return c.fail("status", err)
	}
	defer nc.Close()
	now := c.now()
	code := exitOK
	for _, tool := range tools {
		p, err := tt.PauseState(ctx, tool)
		switch {
		case err != nil:
			fmt.Fprintf(c.stdout, "%s: %v\n", tool, err)
			code = exitError
		case p.Paused:
			fmt.Fprintf(c.stdout, "%s: paused %s\n", tool, untilText(p.Until, now))
		default:
			fmt.Fprintf(c.stdout, "%s: running\n", tool)
		}
		switch lim, set, err := tt.Limit(ctx, tool); {
		case err != nil:
			fmt.Fprintf(c.stdout, "%s: rate limit: %v\n", tool, err)
			code = exitError
		case !set:
			fmt.Fprintf(c.stdout, "%s: rate limit: the manifest's, if it declares one\n", tool)
		case !lim.Limited():
			fmt.Fprintf(c.stdout, "%s: rate limit: none (set by the operator)\n", tool)
		default:
			fmt.Fprintf(c.stdout, "%s: rate limit: %g calls/s, burst %d (set by the operator)\n", tool, lim.Rate, max(lim.Burst, 1))
		}
	}
	return code
}

func (c *command) history(ctx context.Context, args []string) int {
	fs := newFlagSet("history", c.stderr, "history [TOOL]")
	var (
		com   common
		limit int
	)
	com.register(fs)
	fs.IntVar(&limit, "limit", 1000, "print the newest this many records")
	pos, err := parse(fs, args)
	if err != nil {
		return usageStatus(err)
	}
	tools, status := c.tools(fs, pos, 0, 1)
	if status >= 0 {
		return status
	}
	var tool protocol.ToolName
	if len(tools) == 1 {
		tool = tools[0]
	}
	ctx, cancel := context.WithTimeout(ctx, com.timeout)
	defer cancel()
	nc, tt, err := c.open(ctx, com.prefix)
	if err != nil {
		return c.fail("history", err)
	}
	defer nc.Close()
	limit = max(limit, 1)
	recs, err := tt.History(ctx, tool, limit)
	if err != nil {
		return c.fail("history", err)
	}
	if len(recs) > limit {
		recs = recs[len(recs)-limit:]
	}
	now := c.now()
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
			line += "  by " + clip(n.By)
		}
		if n.Reason != "" {
			line += "  reason " + clip(n.Reason)
		}
		fmt.Fprintln(c.stdout, line)
	}
	return exitOK
}

// untilText says when a pause ends.
func untilText(until, now time.Time) string {
	if until.IsZero() || until.Sub(now) > protocol.PauseForever/2 {
		return "until resumed"
	}
	return "until " + until.UTC().Format(time.RFC3339) + " (in " + until.Sub(now).Round(time.Second).String() + ")"
}

// clip makes operator- or wire-given text safe for a terminal line.
func clip(s string) string { return termsafe.Line(s, 200) }
