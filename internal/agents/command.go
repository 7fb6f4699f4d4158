package agents

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/internal/termsafe"
	"github.com/toolfleet/toolfleet/pkg/agent"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// Exit statuses of [Command].
const (
	exitOK    = 0
	exitError = 1
	exitUsage = 2
)

const usage = `usage: agents <command> [flags]

commands:
  put FILE [--no-env-check]   validate a definition and store it (admin or operator);
                              prints its revision. The key variable it names must
                              be set here, unless --no-env-check
  get NAME [--revision N]     print a definition (the newest, or revision N)
  ls                          every agent and the revision its runs start on (the
                              newest that validates); newer revisions that do
                              not validate are marked INVALID
  show NAME                   every kept revision of an agent: valid, INVALID (and
                              why), or removed, and the one runs start on
  rm NAME                     remove an agent (runs that started on it still resume)

The same with the nats CLI (prefix "fleet"; nothing is validated then, and
a coordinator passes over a revision that does not validate: agents show):
  nats kv put fleet_agents NAME "$(cat FILE)"
  nats kv get fleet_agents NAME [--revision N]
  nats kv ls fleet_agents
  nats kv history fleet_agents NAME
  nats kv del fleet_agents NAME
`

// Command runs "agents put|get|ls|rm". conn opens the NATS connection,
// which Command closes; lookupEnv checks a definition's key variable on
// put. The result is the exit status: 0 done, 1 error, 2 bad usage or a
// refused definition.
func Command(ctx context.Context, args []string, stdout, stderr io.Writer, conn func(context.Context) (*nats.Conn, error),
	lookupEnv func(string) (string, bool)) int {
	if len(args) > 0 && args[0] == "agents" {
		args = args[1:]
	}
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	name, args := args[0], args[1:]
	fs := flag.NewFlagSet("agents "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	prefix := fs.String("prefix", protocol.DefaultPrefix, "subject prefix of the fleet")
	timeout := fs.Duration("timeout", 10*time.Second, "bound on the command's NATS work")
	noEnv := fs.Bool("no-env-check", false, "put: do not check that the key variable is set here")
	revision := fs.Uint64("revision", 0, "get: this revision rather than the newest")
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return exitOK
			}
			return exitUsage
		}
		if fs.NArg() == 0 {
			break
		}
		pos, args = append(pos, fs.Arg(0)), fs.Args()[1:]
	}
	want := map[string]int{"put": 1, "get": 1, "ls": 0, "list": 0, "rm": 1, "show": 1}
	n, ok := want[name]
	switch {
	case name == "help" || name == "-h" || name == "--help":
		fmt.Fprint(stdout, usage)
		return exitOK
	case !ok:
		fmt.Fprintf(stderr, "agents: unknown command %s\n%s", strconv.Quote(clip(name)), usage)
		return exitUsage
	case len(pos) != n:
		fmt.Fprintf(stderr, "agents %s: takes %d argument(s), got %d\n%s", name, n, len(pos), usage)
		return exitUsage
	}
	subjects, err := protocol.NewSubjects(*prefix)
	if err != nil {
		fmt.Fprintf(stderr, "agents: --prefix: %v\n", err)
		return exitUsage
	}
	var doc []byte
	if name == "put" {
		// Validate before connecting: a refused definition needs no server.
		if doc, err = readDoc(pos[0]); err != nil {
			fmt.Fprintf(stderr, "agents put: %v\n", err)
			return exitUsage
		}
		d, err := agent.Parse(doc)
		if err == nil && !*noEnv {
			err = d.CheckEnv(lookupEnv)
		}
		if err != nil {
			fmt.Fprintf(stderr, "agents put: %s: %v (nothing stored)\n", pos[0], err)
			return exitUsage
		}
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	nc, err := conn(ctx)
	if err != nil {
		fmt.Fprintf(stderr, "agents %s: connecting to NATS: %v\n", name, err)
		return exitError
	}
	defer nc.Close()
	js, err := natsbus.NewJetStream(nc, "")
	if err != nil {
		fmt.Fprintf(stderr, "agents %s: %v\n", name, err)
		return exitError
	}
	store, err := natsbus.OpenAgents(ctx, js, subjects)
	if err != nil {
		fmt.Fprintf(stderr, "agents %s: bucket %s: %v\n", name, subjects.AgentsBucket(), err)
		return exitError
	}
	reg := &Registry{Store: store}
	switch name {
	case "put":
		var d agent.Definition
		var rev uint64
		if d, rev, err = reg.Put(ctx, doc); err == nil {
			fmt.Fprintf(stdout, "agent %s stored, revision %d\n", d.Name, rev)
		}
	case "get":
		err = get(ctx, store, pos[0], *revision, stdout)
	case "show":
		err = show(ctx, reg, pos[0], stdout)
	case "rm":
		if err = store.Delete(ctx, pos[0]); err == nil {
			fmt.Fprintf(stdout, "agent %s removed\n", pos[0])
		}
	default:
		err = ls(ctx, reg, store, stdout)
	}
	if err != nil {
		fmt.Fprintf(stderr, "agents %s: %v\n", name, err)
		return exitError
	}
	return exitOK
}

// readDoc reads a definition file, bounded ("-" is stdin).
func readDoc(path string) ([]byte, error) {
	f := os.Stdin
	if path != "-" {
		var err error
		if f, err = os.Open(path); err != nil {
			return nil, err
		}
		defer f.Close()
	}
	return io.ReadAll(io.LimitReader(f, agent.MaxInputBytes+1))
}

func get(ctx context.Context, store *natsbus.AgentStore, name string, rev uint64, w io.Writer) error {
	var data []byte
	var err error
	if rev > 0 {
		data, err = store.GetRevision(ctx, name, rev)
	} else {
		data, rev, err = store.Get(ctx, name)
	}
	if err != nil {
		return err
	}
	var v any
	if json.Unmarshal(data, &v) != nil {
		return fmt.Errorf("the stored definition of %s is not JSON", clip(name))
	}
	out, _ := json.MarshalIndent(v, "", "  ")
	fmt.Fprintf(w, "%s\n", out)
	return nil
}

func ls(ctx context.Context, reg *Registry, store *natsbus.AgentStore, w io.Writer) error {
	names, err := store.Names(ctx)
	if err != nil {
		return err
	}
	if len(names) == 0 {
		fmt.Fprintln(w, "no agents")
		return nil
	}
	for _, n := range names {
		revs, err := reg.Revisions(ctx, n)
		if err != nil || len(revs) == 0 || revs[0].Removed {
			continue
		}
		fmt.Fprintf(w, "%-32s %s\n", clip(n), summary(revs))
	}
	return nil
}

// summary says which revision an agent's runs start on, and marks the
// newer ones that do not validate.
func summary(revs []Revision) string {
	var invalid []string
	for _, r := range revs {
		switch {
		case r.Used && len(invalid) == 0:
			return fmt.Sprintf("revision %d", r.Revision)
		case r.Used:
			return fmt.Sprintf("revision %d (newer revision %s INVALID: runs start on %d)", r.Revision, strings.Join(invalid, ", "), r.Revision)
		case r.Removed:
			return fmt.Sprintf("no valid revision (revision %s INVALID, older ones removed)", strings.Join(invalid, ", "))
		}
		if len(invalid) < 8 {
			invalid = append(invalid, strconv.FormatUint(r.Revision, 10))
		} else if len(invalid) == 8 {
			invalid = append(invalid, "…")
		}
	}
	return fmt.Sprintf("no valid revision (revision %s INVALID): its runs fail", strings.Join(invalid, ", "))
}

// show prints every kept revision of agent name, newest first.
func show(ctx context.Context, reg *Registry, name string, w io.Writer) error {
	revs, err := reg.Revisions(ctx, name)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "agent %s: %d kept revisions, newest first\n", clip(name), len(revs))
	for _, r := range revs {
		var state string
		switch {
		case r.Removed:
			state = "removed"
		case r.Err != nil:
			state = "INVALID: " + termsafe.Line(r.Err.Error(), 160)
		default:
			state = "valid"
		}
		if r.Used {
			state += " (runs start on it)"
		}
		fmt.Fprintf(w, "  revision %-8d %s\n", r.Revision, state)
	}
	return nil
}

func clip(s string) string {
	if len(s) > 64 {
		s = s[:64]
	}
	q := strconv.Quote(s)
	return q[1 : len(q)-1]
}
