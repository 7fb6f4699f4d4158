package approval

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// Exit statuses of [Command].
const (
	exitOK    = 0
	exitError = 1
	exitUsage = 2
)

const commandUsage = `usage: approvals <command> [flags]

commands:
  list                          show pending approval requests
  approve RUN KEY [--reason R]  approve one request
  deny RUN KEY --reason R       deny one request

Run "approvals <command> -h" for a command's flags.
`

// Command runs "approvals list|approve|deny". args are the words after
// "approvals" (a leading "approvals" is skipped). conn opens the NATS
// connection, which Command closes; it is called only once the arguments
// are valid. The result is the exit status: 0 done, 1 error (NATS, unknown
// or expired request, already settled), 2 bad usage.
func Command(ctx context.Context, args []string, stdout, stderr io.Writer, conn func(context.Context) (*nats.Conn, error)) int {
	if len(args) > 0 && args[0] == "approvals" {
		args = args[1:]
	}
	if len(args) == 0 {
		fmt.Fprint(stderr, commandUsage)
		return exitUsage
	}
	c := &command{stdout: stdout, stderr: stderr, conn: conn}
	switch args[0] {
	case "list", "ls":
		return c.list(ctx, args[1:])
	case "approve":
		return c.decide(ctx, args[1:], true)
	case "deny":
		return c.decide(ctx, args[1:], false)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, commandUsage)
		return exitOK
	default:
		fmt.Fprintf(stderr, "approvals: unknown command %q\n%s", displayText(args[0], 32), commandUsage)
		return exitUsage
	}
}

type command struct {
	stdout, stderr io.Writer
	conn           func(context.Context) (*nats.Conn, error)
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

func newFlagSet(name string, stderr io.Writer, usage string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: approvals %s\n\nflags:\n", usage)
		fs.PrintDefaults()
	}
	return fs
}

// usageStatus maps a flag parsing error to an exit status: -h is not an
// error.
func usageStatus(err error) int {
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	return exitUsage
}

func (c *command) usageError(fs *flag.FlagSet, format string, a ...any) int {
	fmt.Fprintf(c.stderr, "approvals %s: %s\n", fs.Name(), fmt.Sprintf(format, a...))
	fs.Usage()
	return exitUsage
}

func (c *command) fail(name string, err error) int {
	fmt.Fprintf(c.stderr, "approvals %s: %v\n", name, err)
	return exitError
}

// open connects and returns the connection and the approvals ledger.
func (c *command) open(ctx context.Context, subjects protocol.Subjects) (*nats.Conn, *natsbus.ApprovalLedger, error) {
	nc, err := c.conn(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("connecting to NATS: %w", err)
	}
	js, err := natsbus.NewJetStream(nc, "")
	if err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("JetStream: %w", err)
	}
	return nc, natsbus.NewApprovalLedger(js, subjects), nil
}

func defaultApprover() string {
	if u := os.Getenv("USER"); u != "" {
		return u
	}
	return os.Getenv("LOGNAME")
}

// printRequest shows what an operator is deciding about.
func printRequest(w io.Writer, p pending, now time.Time) {
	fmt.Fprintf(w, "run:       %s\n", p.req.RunID)
	fmt.Fprintf(w, "key:       %s\n", p.req.CallKey)
	fmt.Fprintf(w, "tool:      %s\n", p.req.Tool)
	if p.req.CallID != "" {
		fmt.Fprintf(w, "call id:   %s\n", displayText(string(p.req.CallID), 64))
	}
	fmt.Fprintf(w, "round:     %d\n", p.req.Round)
	fmt.Fprintf(w, "arguments: %s\n", p.args)
	fmt.Fprintf(w, "digest:    %s\n", p.req.Digest)
	fmt.Fprintf(w, "deadline:  %s (%s)\n", p.req.Deadline.UTC().Format(time.RFC3339), untilText(p.req.Deadline, now))
}

func untilText(deadline, now time.Time) string {
	d := deadline.Sub(now)
	if d <= 0 {
		return "expired " + (-d).Truncate(time.Second).String() + " ago"
	}
	return "in " + d.Truncate(time.Second).String()
}

// pubCommand is the nats CLI command that publishes a decision for p.
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
