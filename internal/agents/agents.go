// Package agents is the coordinator's side of named agents: the fleet's
// agent definitions read and written through the agents bucket
// ([Registry]), and what a serving coordinator makes of them for each run
// ([Serving]).
package agents

import (
	"context"
	"errors"
	"fmt"

	"github.com/toolfleet/toolfleet/internal/natsbus/stores"
	"github.com/toolfleet/toolfleet/pkg/agent"
	"github.com/toolfleet/toolfleet/pkg/config"
	"github.com/toolfleet/toolfleet/pkg/loop"
)

// ErrNotFound is returned for an agent the fleet does not hold (for the
// default agent: the coordinator then runs as it does without agents).
var ErrNotFound = stores.ErrAgentNotFound

// Registry reads and writes the fleet's agent definitions.
type Registry struct {
	// Store is the agents bucket.
	Store *stores.AgentStore
	// LookupEnv checks that an agent's key variable is set; nil checks
	// nothing (a definition put from a machine that does not run it).
	LookupEnv func(string) (string, bool)
	// Invalid is told of each revision of an agent that [Registry.Resolve]
	// passed over because it does not validate (err says why); nil tells
	// nothing.
	Invalid func(name string, rev uint64, err error)
}

// Put validates a definition and stores it: a new revision of its agent,
// which it returns. A definition that does not validate (or whose key
// variable is not set, with LookupEnv) is refused with a [config.Error]
// and nothing is stored.
func (r *Registry) Put(ctx context.Context, doc []byte) (agent.Definition, uint64, error) {
	d, err := agent.Parse(doc)
	if err != nil {
		return agent.Definition{}, 0, err
	}
	if err := d.CheckEnv(r.LookupEnv); err != nil {
		return agent.Definition{}, 0, err
	}
	data, err := d.Marshal()
	if err != nil {
		return agent.Definition{}, 0, err
	}
	rev, err := r.Store.Put(ctx, d.Name, data)
	if err != nil {
		return agent.Definition{}, 0, fmt.Errorf("agents: storing %s: %w", d.Name, err)
	}
	return d, rev, nil
}

// Resolve returns the newest valid definition of agent name ("" is
// [agent.DefaultName]) and its revision, validated again (the bucket may
// have been written by other means than Put) and with its key variable
// checked. Newer revisions that do not validate are passed over (each
// told to Invalid): the agent runs on its newest valid revision. When none
// of the kept revisions validates, the newest one's error is returned.
// ErrNotFound says the fleet has no such agent (or it was removed).
func (r *Registry) Resolve(ctx context.Context, name string) (agent.Definition, uint64, error) {
	if name == "" {
		name = agent.DefaultName
	}
	data, rev, err := r.Store.Get(ctx, name)
	if err != nil {
		return agent.Definition{}, 0, err
	}
	d, err := r.parse(name, data)
	if err != nil {
		if d, rev, err = r.newestValid(ctx, name, rev, err); err != nil {
			return agent.Definition{}, 0, err
		}
	}
	if err := d.CheckEnv(r.LookupEnv); err != nil {
		return agent.Definition{}, 0, fmt.Errorf("agents: %s: %w", name, err)
	}
	return d, rev, nil
}

// newestValid is the newest kept revision of name that validates, newer
// than none removed, after newest (which failed with newestErr) was found
// invalid.
func (r *Registry) newestValid(ctx context.Context, name string, newest uint64, newestErr error) (agent.Definition, uint64, error) {
	hist, err := r.Store.History(ctx, name)
	if err != nil {
		return agent.Definition{}, 0, err
	}
	for _, h := range hist {
		if h.Revision > newest {
			continue // written since the Get: the next run reads it
		}
		if h.Removed {
			return agent.Definition{}, 0, ErrNotFound
		}
		d, err := r.parse(name, h.Data)
		if err == nil {
			return d, h.Revision, nil
		}
		if r.Invalid != nil {
			r.Invalid(name, h.Revision, err)
		}
	}
	return agent.Definition{}, 0, fmt.Errorf("agents: no kept revision of %s validates; the newest: %w", name, newestErr)
}

// Revision is one kept revision of an agent, as [Registry.Revisions]
// reports it.
type Revision struct {
	Revision uint64
	// Removed: the agent was removed at this revision.
	Removed bool
	// Err says why the revision does not validate; nil for a valid one.
	Err error
	// Clients are the clients a valid revision serves
	// (agent.Definition.Clients): nil for every client.
	Clients []string
	// Used: runs of the agent start on this revision (the newest valid
	// one, newer than any removal).
	Used bool
}

// Revisions returns the kept revisions of agent name, newest first, each
// with whether it validates (its key variable is not checked) and which
// one runs start on. ErrNotFound says none is kept.
func (r *Registry) Revisions(ctx context.Context, name string) ([]Revision, error) {
	hist, err := r.Store.History(ctx, name)
	if err != nil {
		return nil, err
	}
	out := make([]Revision, len(hist))
	searching := true
	for i, h := range hist {
		out[i] = Revision{Revision: h.Revision, Removed: h.Removed}
		if !h.Removed {
			var d agent.Definition
			d, out[i].Err = r.parse(name, h.Data)
			out[i].Clients = d.Clients
		}
		if searching && (h.Removed || out[i].Err == nil) {
			out[i].Used, searching = !h.Removed, false
		}
	}
	return out, nil
}

// ResolveRevision returns the definition ref names: a resumed run's agent
// at the revision it started on, even if it was changed or removed since.
func (r *Registry) ResolveRevision(ctx context.Context, ref agent.Ref) (agent.Definition, error) {
	data, err := r.Store.GetRevision(ctx, ref.Name, ref.Revision)
	if err != nil {
		return agent.Definition{}, err
	}
	return r.decode(ref.Name, data)
}

func (r *Registry) decode(name string, data []byte) (agent.Definition, error) {
	d, err := r.parse(name, data)
	if err != nil {
		return agent.Definition{}, err
	}
	if err := d.CheckEnv(r.LookupEnv); err != nil {
		return agent.Definition{}, fmt.Errorf("agents: %s: %w", name, err)
	}
	return d, nil
}

// parse decodes and validates the definition stored as name.
func (r *Registry) parse(name string, data []byte) (agent.Definition, error) {
	d, err := agent.Parse(data)
	if err != nil {
		return agent.Definition{}, fmt.Errorf("agents: the stored definition of %s: %w", name, err)
	}
	if d.Name != name {
		return agent.Definition{}, fmt.Errorf("agents: the definition stored as %s is named %s", name, d.Name)
	}
	return d, nil
}

// IsConfig reports whether err is a definition's error (a config.Error)
// rather than the store's.
func IsConfig(err error) bool { return config.Errors(err) != nil && !errors.Is(err, ErrNotFound) }

// ForRun returns the agent a run runs on, given its journal's entries: the
// revision the journal names when the run is resumed (even if the agent
// was changed or removed since: a resumed run never moves to another
// revision), else the newest revision of name, which the caller journals
// before the run starts (pin is true: append agent.JournalEntry(ref)).
func (r *Registry) ForRun(ctx context.Context, name string, entries []loop.JournalEntry) (d agent.Definition, ref agent.Ref, pin bool, err error) {
	if ref, ok := agent.FromJournal(entries); ok {
		d, err := r.ResolveRevision(ctx, ref)
		if err != nil {
			return agent.Definition{}, ref, false, fmt.Errorf("agents: %s revision %d, which the run started on: %w", ref.Name, ref.Revision, err)
		}
		return d, ref, false, nil
	}
	d, rev, err := r.Resolve(ctx, name)
	if err != nil {
		return agent.Definition{}, agent.Ref{}, false, err
	}
	return d, agent.Ref{Name: d.Name, Revision: rev}, true, nil
}
