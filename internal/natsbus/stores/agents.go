package stores

import (
	"context"
	"errors"
	"slices"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// ErrAgentNotFound is returned for an agent (or a revision of one) the
// agents bucket does not hold.
var ErrAgentNotFound = errors.New("natsbus: no such agent")

// AgentStore is the agents bucket: one definition per agent name, whose
// KV revision is the agent's version. It stores bytes; what they mean is
// pkg/agent's.
type AgentStore struct {
	js jetstream.JetStream
	kv jetstream.KeyValue
}

// OpenAgents returns the agents bucket of subjects, which must exist
// ([Provision] creates it).
func OpenAgents(ctx context.Context, js natsbus.JetStream, subjects protocol.Subjects) (*AgentStore, error) {
	kv, err := js.KeyValue(ctx, subjects.AgentsBucket())
	if err != nil {
		return nil, err
	}
	return &AgentStore{js: js, kv: kv}, nil
}

// Put stores data as agent name's newest revision and returns it.
func (a *AgentStore) Put(ctx context.Context, name string, data []byte) (uint64, error) {
	return a.kv.Put(ctx, name, data)
}

// Get returns agent name's newest definition and its revision. Like
// every read of the store it asks again while the cluster does not answer
// (a leader being elected, an answer lost with a node), 5s an attempt, for
// up to 30s: a run started or resumed then is configured, not failed.
func (a *AgentStore) Get(ctx context.Context, name string) ([]byte, uint64, error) {
	type got struct {
		data []byte
		rev  uint64
	}
	g, err := natsbus.AskRetrying(ctx, agentNotFound, func(ctx context.Context) (got, error) {
		data, rev, err := entry(a.kv.Get(ctx, name))
		if errors.Is(err, ErrAgentNotFound) {
			data, rev, err = a.onLeader(ctx, name, 0)
		}
		return got{data, rev}, err
	})
	return g.data, g.rev, err
}

// GetRevision returns agent name's definition at revision rev, also when
// a newer one replaced it or it was removed since (within
// [AgentHistory] revisions).
func (a *AgentStore) GetRevision(ctx context.Context, name string, rev uint64) ([]byte, error) {
	return natsbus.AskRetrying(ctx, agentNotFound, func(ctx context.Context) ([]byte, error) {
		data, _, err := entry(a.kv.GetRevision(ctx, name, rev))
		if errors.Is(err, ErrAgentNotFound) {
			data, _, err = a.onLeader(ctx, name, rev)
		}
		return data, err
	})
}

// onLeader reads agent name's revision rev (its newest when rev is 0)
// from the bucket's leader. A get is a direct get, which any replica may
// answer: on a cluster, one that has not yet stored a revision another
// node acknowledged answers "not found", so a get's "not found" is
// confirmed here before it is believed.
func (a *AgentStore) onLeader(ctx context.Context, name string, rev uint64) ([]byte, uint64, error) {
	subject := "$KV." + a.kv.Bucket() + "." + name
	get := natsbus.LeaderGet{Seq: rev}
	if rev == 0 {
		get = natsbus.LeaderGet{LastBySubject: subject}
	}
	m, err := natsbus.GetFromLeader(ctx, a.js, "KV_"+a.kv.Bucket(), get)
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
		return nil, 0, ErrAgentNotFound
	case err != nil:
		return nil, 0, err
	case m.Subject != subject || m.Header.Get(headerKVOperation) != "":
		return nil, 0, ErrAgentNotFound // another key's, or a removal
	}
	return m.Data, m.Sequence, nil
}

func agentNotFound(err error) bool { return errors.Is(err, ErrAgentNotFound) }

// AgentRevision is one kept revision of an agent: its stored bytes, or
// its removal.
type AgentRevision struct {
	Revision uint64
	Data     []byte
	Removed  bool
}

// History returns the kept revisions of agent name (at most
// [AgentHistory]), newest first; [ErrAgentNotFound] when none is kept.
func (a *AgentStore) History(ctx context.Context, name string) ([]AgentRevision, error) {
	es, err := natsbus.AskRetrying(ctx, agentNotFound, func(ctx context.Context) ([]jetstream.KeyValueEntry, error) {
		es, err := a.kv.History(ctx, name)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return nil, ErrAgentNotFound
		}
		return es, err
	})
	if err != nil {
		return nil, err
	}
	out := make([]AgentRevision, 0, len(es))
	for i := len(es) - 1; i >= 0; i-- {
		e := es[i]
		out = append(out, AgentRevision{Revision: e.Revision(), Data: e.Value(), Removed: e.Operation() != jetstream.KeyValuePut})
	}
	return out, nil
}

// Names lists the stored agents, sorted.
func (a *AgentStore) Names(ctx context.Context) ([]string, error) {
	l, err := a.kv.ListKeys(ctx)
	if err != nil {
		return nil, err
	}
	var names []string
	for k := range l.Keys() {
		names = append(names, k)
	}
	_ = l.Stop() // the listing is done: its watch may be gone already
	slices.Sort(names)
	return names, nil
}

// Delete removes agent name: runs can no longer start on it, and runs
// that started on one of its revisions still resume on it.
func (a *AgentStore) Delete(ctx context.Context, name string) error {
	if _, _, err := a.Get(ctx, name); err != nil {
		return err
	}
	return a.kv.Delete(ctx, name)
}

func entry(e jetstream.KeyValueEntry, err error) ([]byte, uint64, error) {
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound), errors.Is(err, jetstream.ErrKeyDeleted):
		return nil, 0, ErrAgentNotFound
	case err != nil:
		return nil, 0, err
	case e.Operation() != jetstream.KeyValuePut:
		return nil, 0, ErrAgentNotFound
	}
	return e.Value(), e.Revision(), nil
}
