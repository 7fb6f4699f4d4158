package main

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

	"github.com/toolfleet/toolfleet/internal/cliconfig"
	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/internal/procsec"
	"github.com/toolfleet/toolfleet/internal/termsafe"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// defaultOpTimeout bounds an operator command's NATS work unless --timeout
// says otherwise.
const defaultOpTimeout = 10 * time.Second

// envConnFlagOf names the environment variables that set the connection
// of the operator commands (approvals, runs, agents, tools), which take no
// connection flags.
var envConnFlagOf = cliconfig.Flags{
	"Conn":             "env " + natsbus.EnvURL,
	"Conn.URL":         "env " + natsbus.EnvURL,
	"Conn.CredsFile":   "env " + natsbus.EnvCreds,
	"Conn.User":        "env " + natsbus.EnvUser,
	"Conn.NKeyFile":    "env " + natsbus.EnvNKey,
	"Conn.InboxPrefix": "env " + natsbus.EnvInboxPrefix,
	"Conn.auth":        "env NATS_CREDS, NATS_USER, NATS_TOKEN, NATS_NKEY",
}

// envConn is the connection of a command that takes no connection flags:
// everything from the environment, read with procsec.Getenv, which sees
// the secrets (NATS_PASSWORD, NATS_TOKEN) main took out of it.
func envConn(name string) natsbus.ConnConfig {
	return natsbus.ConnConfig{Name: name, Getenv: procsec.Getenv}
}

// opGroup is an operator command made of subcommands ("coordinator tools
// pause|resume|..."), each connecting as the user the environment names
// ([opGroup.command]). Every group has the same shape: its usage, its
// subcommands by name, and [opGroup.run], which dispatches.
type opGroup struct {
	// name is the group's word ("tools"); messages start with
	// "<name> <subcommand>:".
	name string
	// commands is the usage after its synopsis ("usage: <name> <command>
	// [flags]", then "commands:"): a line a subcommand, and notes. The
	// usage is printed for help and on a missing or unknown subcommand.
	commands string
	// subs are the subcommands by name (an alias is a second entry).
	subs map[string]func(ctx context.Context, o *op, args []string) int
}

// command runs "coordinator <name> ...", connecting as "toolfleet-<name>"
// with the connection the environment alone configures ([envConn]): a
// connection setting that cannot work is a configuration error (exit
// status 2) before any subcommand runs.
func (g opGroup) command(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	name := "coordinator " + g.name
	conn := envConn("toolfleet-" + g.name)
	if err := conn.Validate(); err != nil {
		c := &command{name: name, flags: envConnFlagOf, stderr: stderr}
		return c.fail(nest("Conn", err))
	}
	ctx, refused, cancel := watchRefusals(ctx, name, procsec.Getenv(natsbus.EnvUser))
	defer cancel(nil)
	connect := func(ctx context.Context) (*nats.Conn, error) { return natsbus.Connect(ctx, conn, refused) }
	code := g.run(ctx, args, stdout, stderr, connect)
	if err := refusal(ctx); err != nil && code != exitOK {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
	}
	return code
}

// run dispatches args (the words after the group's name; a leading
// repetition of the name is skipped) to the subcommand they name. conn
// opens the connection ([withNATS] closes it); it is called only once the
// arguments are valid. The result is the exit status: 0 done, 1
// error, 2 bad usage.
func (g opGroup) run(ctx context.Context, args []string, stdout, stderr io.Writer, conn func(context.Context) (*nats.Conn, error)) int {
	if len(args) > 0 && args[0] == g.name {
		args = args[1:]
	}
	if len(args) == 0 {
		fmt.Fprint(stderr, g.usage())
		return exitUsage
	}
	switch args[0] {
	case "help", "-h", "--help":
		fmt.Fprint(stdout, g.usage())
		return exitOK
	}
	sub, ok := g.subs[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "%s: unknown command %q\n%s", g.name, termsafe.Line(args[0], 32), g.usage())
		return exitUsage
	}
	o := &op{name: g.name + " " + args[0], stdout: stdout, stderr: stderr, conn: conn, now: time.Now}
	return sub(ctx, o, args[1:])
}

// usage is the group's usage.
func (g opGroup) usage() string {
	return "usage: " + g.name + " <command> [flags]\n\ncommands:\n" + g.commands
}

// op is one run of an operator subcommand: what every subcommand shares —
// its flag set with --prefix and --timeout, its usage and messages, its
// exit statuses and its connection.
type op struct {
	name           string // "tools pause"
	stdout, stderr io.Writer
	conn           func(context.Context) (*nats.Conn, error)
	now            func() time.Time

	fs       *flag.FlagSet
	prefix   string
	timeout  time.Duration
	subjects protocol.Subjects // of --prefix, once parsed
	// wait is --wait of approve and deny (0 elsewhere): they wait that
	// long for the coordinator's outcome beyond --timeout, so their NATS
	// work is bounded by --timeout plus wait ([withNATS]).
	wait time.Duration
}

// flags returns the subcommand's flag set, --prefix and --timeout
// registered; usage is its synopsis ("pause TOOL [--until T]").
func (o *op) flags(usage string) *flag.FlagSet {
	fs := newFlagSet(o.name, o.stderr)
	fs.StringVar(&o.prefix, "prefix", protocol.DefaultPrefix, "subject prefix of the fleet")
	fs.DurationVar(&o.timeout, "timeout", defaultOpTimeout, "bound on the whole command's NATS work")
	group, _, _ := strings.Cut(o.name, " ")
	fs.Usage = func() {
		fmt.Fprintf(o.stderr, "usage: %s %s\n\nflags:\n", group, usage)
		fs.PrintDefaults()
	}
	o.fs = fs
	return fs
}

// anyNumber is the n of [op.parse] for a subcommand that checks its
// positional arguments itself.
const anyNumber = -1

// parse parses the flags, which may stand before, between or after the
// positional arguments, and returns the positional ones, of which there
// must be n (anyNumber: any). When done is set the subcommand returns
// code: 0 for -h, 2 for a bad flag, a --timeout that is not positive, a
// --prefix that is not a subject token or another number of arguments.
func (o *op) parse(args []string, n int) (pos []string, code int, done bool) {
	pos, err := parseInterleaved(o.fs, args)
	if errors.Is(err, flag.ErrHelp) {
		return nil, exitOK, true
	}
	if err != nil {
		return nil, exitUsage, true
	}
	if o.timeout <= 0 {
		return nil, o.usageError("--timeout must be > 0"), true
	}
	if o.subjects, err = protocol.NewSubjects(o.prefix); err != nil {
		return nil, o.usageError("--prefix: %v", err), true
	}
	if n != anyNumber {
		if code, done := o.argCount(pos, n); done {
			return nil, code, true
		}
	}
	return pos, exitOK, false
}

// argCount refuses positional arguments pos unless there are n of them:
// done, with exit status 2, when it does.
func (o *op) argCount(pos []string, n int) (code int, done bool) {
	if len(pos) != n {
		return o.usageError("takes %d argument(s), got %d", n, len(pos)), true
	}
	return exitOK, false
}

// usageError prints a usage problem and the usage, and returns 2.
func (o *op) usageError(format string, a ...any) int {
	fmt.Fprintf(o.stderr, "%s: %s\n", o.name, fmt.Sprintf(format, a...))
	if o.fs != nil {
		o.fs.Usage()
	}
	return exitUsage
}

// fail prints err and returns 1.
func (o *op) fail(err error) int {
	fmt.Fprintf(o.stderr, "%s: %v\n", o.name, err)
	return exitError
}

// natsConn is a subcommand's connection to NATS and its JetStream.
type natsConn struct {
	nc *nats.Conn
	js natsbus.JetStream
}

// withNATS is how an operator subcommand reaches NATS: under --timeout
// (plus --wait where the subcommand has one: [op.wait]) it connects, makes
// what it needs of the connection with open, runs do with it under the
// same bound, and closes the connection. It returns the exit status: 0
// when do returns nil; 1 when connecting, open or do fails, the error
// printed unless it is [errShown].
func withNATS[T any](ctx context.Context, o *op, open func(context.Context, *op, natsConn) (T, error), do func(context.Context, T) error) int {
	ctx, cancel := context.WithTimeout(ctx, o.timeout+o.wait)
	defer cancel()
	nc, err := o.conn(ctx)
	if err != nil {
		return o.fail(fmt.Errorf("connecting to NATS: %w", err))
	}
	defer nc.Close()
	js, err := natsbus.NewJetStream(nc, "")
	if err != nil {
		return o.fail(fmt.Errorf("JetStream: %w", err))
	}
	v, err := open(ctx, o, natsConn{nc, js})
	if err != nil {
		return o.fail(err)
	}
	switch err := do(ctx, v); {
	case err == nil:
		return exitOK
	case errors.Is(err, errShown):
		return exitError
	default:
		return o.fail(err)
	}
}

// errShown is the error of a subcommand that has shown what failed
// itself (tools status, beside each tool): exit status 1, nothing more
// printed.
var errShown = errors.New("failed, as shown")

// useConn is the open of [withNATS] for a subcommand that uses the
// connection itself.
func useConn(_ context.Context, _ *op, c natsConn) (natsConn, error) { return c, nil }

// whoAmI is the name a record names by default: $USER, else $LOGNAME.
func whoAmI() string {
	if u := os.Getenv("USER"); u != "" {
		return u
	}
	return os.Getenv("LOGNAME")
}
