package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/toolfleet/toolfleet/internal/agents"
	"github.com/toolfleet/toolfleet/internal/natsbus/stores"
	"github.com/toolfleet/toolfleet/internal/procsec"
	"github.com/toolfleet/toolfleet/internal/termsafe"
	"github.com/toolfleet/toolfleet/pkg/agent"
)

// lookupEnv looks a variable up as the coordinator will: procsec.Getenv
// sees the secrets main took out of the environment.
func lookupEnv(name string) (string, bool) { v := procsec.Getenv(name); return v, v != "" }

// agentsGroup is "coordinator agents": put, get, list, show or remove the
// fleet's agent definitions, over NATS ($NATS_URL); put checks a
// definition's key variable with lookup.
func agentsGroup(lookup func(string) (string, bool)) opGroup {
	return opGroup{
		name: "agents",
		commands: `  put FILE [--no-env-check]   validate a definition and store it (admin or operator);
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
`,
		subs: map[string]func(context.Context, *op, []string) int{
			"put":  func(ctx context.Context, o *op, args []string) int { return agentsPut(ctx, o, args, lookup) },
			"get":  agentsGet,
			"ls":   agentsList,
			"list": agentsList,
			"show": agentsShow,
			"rm":   agentsRemove,
		},
	}
}

// openAgents is the open of [withNATS] of the agents subcommands: the
// agents bucket's registry (its Store is the bucket).
func openAgents(ctx context.Context, o *op, c natsConn) (*agents.Registry, error) {
	store, err := stores.OpenAgents(ctx, c.js, o.subjects)
	if err != nil {
		return nil, fmt.Errorf("bucket %s: %w", o.subjects.AgentsBucket(), err)
	}
	return &agents.Registry{Store: store}, nil
}

func agentsPut(ctx context.Context, o *op, args []string, lookup func(string) (string, bool)) int {
	fs := o.flags("put FILE [--no-env-check]")
	noEnv := fs.Bool("no-env-check", false, "do not check that the key variable is set here")
	pos, code, done := o.parse(args, 1)
	if done {
		return code
	}
	// Validate before connecting: a refused definition needs no server.
	doc, err := readDoc(pos[0])
	if err != nil {
		return o.usageError("%v", err)
	}
	d, err := agent.Parse(doc)
	if err == nil && !*noEnv {
		err = d.CheckEnv(lookup)
	}
	if err != nil {
		fmt.Fprintf(o.stderr, "%s: %s: %v (nothing stored)\n", o.name, pos[0], err)
		return exitUsage
	}
	return withNATS(ctx, o, openAgents, func(ctx context.Context, reg *agents.Registry) error {
		d, rev, err := reg.Put(ctx, doc)
		if err != nil {
			return err
		}
		fmt.Fprintf(o.stdout, "agent %s stored, revision %d\n", d.Name, rev)
		return nil
	})
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

func agentsGet(ctx context.Context, o *op, args []string) int {
	fs := o.flags("get NAME [--revision N]")
	rev := fs.Uint64("revision", 0, "this revision rather than the newest")
	pos, code, done := o.parse(args, 1)
	if done {
		return code
	}
	return withNATS(ctx, o, openAgents, func(ctx context.Context, reg *agents.Registry) error {
		var data []byte
		var err error
		if *rev > 0 {
			data, err = reg.Store.GetRevision(ctx, pos[0], *rev)
		} else {
			data, _, err = reg.Store.Get(ctx, pos[0])
		}
		if err != nil {
			return err
		}
		var v any
		if json.Unmarshal(data, &v) != nil {
			return fmt.Errorf("the stored definition of %s is not JSON", clipName(pos[0]))
		}
		out, _ := json.MarshalIndent(v, "", "  ")
		fmt.Fprintf(o.stdout, "%s\n", out)
		return nil
	})
}

func agentsList(ctx context.Context, o *op, args []string) int {
	o.flags("ls")
	_, code, done := o.parse(args, 0)
	if done {
		return code
	}
	return withNATS(ctx, o, openAgents, func(ctx context.Context, reg *agents.Registry) error {
		names, err := reg.Store.Names(ctx)
		if err != nil {
			return err
		}
		if len(names) == 0 {
			fmt.Fprintln(o.stdout, "no agents")
			return nil
		}
		for _, n := range names {
			revs, err := reg.Revisions(ctx, n)
			if err != nil || len(revs) == 0 || revs[0].Removed {
				continue
			}
			fmt.Fprintf(o.stdout, "%-32s %s\n", clipName(n), revisionSummary(revs)+usedClients(revs))
		}
		return nil
	})
}

// usedClients says which clients the revision runs start on serves.
func usedClients(revs []agents.Revision) string {
	for _, r := range revs {
		if r.Used {
			return "; " + clientsOf(r.Clients)
		}
	}
	return ""
}

// clientsOf names the clients a revision serves (agent names are tokens,
// safe to print), at most 8 of them.
func clientsOf(clients []string) string {
	switch {
	case len(clients) == 0:
		return "clients: every client"
	case len(clients) > 8:
		return fmt.Sprintf("clients: %s, … (%d in all)", strings.Join(clients[:8], ", "), len(clients))
	}
	return "clients: " + strings.Join(clients, ", ")
}

// revisionSummary says which revision an agent's runs start on, and marks
// the newer ones that do not validate.
func revisionSummary(revs []agents.Revision) string {
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

func agentsShow(ctx context.Context, o *op, args []string) int {
	o.flags("show NAME")
	pos, code, done := o.parse(args, 1)
	if done {
		return code
	}
	return withNATS(ctx, o, openAgents, func(ctx context.Context, reg *agents.Registry) error {
		revs, err := reg.Revisions(ctx, pos[0])
		if err != nil {
			return err
		}
		showRevisions(o.stdout, pos[0], revs)
		return nil
	})
}

// showRevisions prints every kept revision of agent name, newest first.
func showRevisions(w io.Writer, name string, revs []agents.Revision) {
	fmt.Fprintf(w, "agent %s: %d kept revisions, newest first\n", clipName(name), len(revs))
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
		if !r.Removed && r.Err == nil {
			state += "; " + clientsOf(r.Clients)
		}
		fmt.Fprintf(w, "  revision %-8d %s\n", r.Revision, state)
	}
}

func agentsRemove(ctx context.Context, o *op, args []string) int {
	o.flags("rm NAME")
	pos, code, done := o.parse(args, 1)
	if done {
		return code
	}
	return withNATS(ctx, o, openAgents, func(ctx context.Context, reg *agents.Registry) error {
		if err := reg.Store.Delete(ctx, pos[0]); err != nil {
			return err
		}
		fmt.Fprintf(o.stdout, "agent %s removed\n", pos[0])
		return nil
	})
}

// clipName makes an agent's name, which may come from the bucket, safe
// to print.
func clipName(s string) string {
	if len(s) > 64 {
		s = s[:64]
	}
	q := strconv.Quote(s)
	return q[1 : len(q)-1]
}
