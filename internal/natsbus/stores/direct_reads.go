package stores

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// What a role that only reads (the console's viewer) reads of the fleet,
// with a [DirectReader]: no consumer, nothing written. A direct get may be
// answered by a replica a moment behind the stream's leader: these are
// for showing, never for deciding (a run's owner reads its journal with
// [OpenJournal]).

// maxJournalReadEntries bounds the journal messages one read of a run's
// journal reads.
const maxJournalReadEntries = 100_000

// ReadJournalFrom returns run's journal entries stored at sequence from
// or after (the whole journal when 0), in order, with direct gets.
func ReadJournalFrom(ctx context.Context, r *natsbus.DirectReader, subjects protocol.Subjects, run protocol.RunID, from uint64) ([]JournalRecord, error) {
	subject, err := subjects.Journal(run)
	if err != nil {
		return nil, fmt.Errorf("natsbus: journal: %w", err)
	}
	var recs []JournalRecord
	var bad error
	truncated, err := r.All(ctx, subjects.JournalStream(), subject, from, maxJournalReadEntries, func(m natsbus.DirectMsg) bool {
		es, err := decodeJournalEntries(m.Data)
		if err != nil {
			bad = fmt.Errorf("natsbus: journal %s entry %d: %w", subject, m.Seq, err)
			return false
		}
		for _, e := range es {
			recs = append(recs, JournalRecord{Seq: m.Seq, Time: m.Stored, Entry: e})
		}
		return true
	})
	switch {
	case err != nil:
		return nil, fmt.Errorf("natsbus: reading the journal %s: %w", subject, err)
	case bad != nil:
		return nil, bad
	case truncated:
		return nil, fmt.Errorf("natsbus: reading the journal %s: more than %d messages", subject, maxJournalReadEntries)
	}
	return recs, nil
}

// KV-Operation marks a key-value bucket's delete and purge markers.
const headerKVOperation = "KV-Operation"

// BucketValues returns the current value of each key of bucket matching
// keys (a key-value key filter: "client.r1", "limit.*", ">"), by key,
// and each value's revision (its stream sequence), with one direct get:
// keys removed are left out. At most 1024 keys match.
func BucketValues(ctx context.Context, r *natsbus.DirectReader, bucket, keys string) (map[string]natsbus.DirectMsg, error) {
	prefix := "$KV." + bucket + "."
	msgs, err := r.LastOf(ctx, "KV_"+bucket, prefix+keys)
	if err != nil {
		return nil, err
	}
	out := map[string]natsbus.DirectMsg{}
	for _, m := range msgs {
		key, ok := strings.CutPrefix(m.Subject, prefix)
		if !ok || m.Header.Get(headerKVOperation) != "" {
			continue
		}
		out[key] = m
	}
	return out, nil
}

// ReadRunResult returns the stored result of run, submitted by client,
// read with a direct get; found is false when none is stored.
func ReadRunResult(ctx context.Context, r *natsbus.DirectReader, subjects protocol.Subjects, client string, run protocol.RunID) (data []byte, found bool, err error) {
	key := protocol.RunKey(client, run)
	vals, err := BucketValues(ctx, r, subjects.RunsBucket(), key)
	if err != nil {
		return nil, false, fmt.Errorf("natsbus: the result of run %s: %w", run, err)
	}
	m, ok := vals[key]
	return m.Data, ok, nil
}

// AgentNames lists the stored agents, sorted, read with a direct get.
func AgentNames(ctx context.Context, r *natsbus.DirectReader, subjects protocol.Subjects) ([]string, error) {
	vals, err := BucketValues(ctx, r, subjects.AgentsBucket(), ">")
	if err != nil {
		return nil, fmt.Errorf("natsbus: listing the agents: %w", err)
	}
	names := make([]string, 0, len(vals))
	for k := range vals {
		names = append(names, k)
	}
	slices.Sort(names)
	return names, nil
}

// ReadAgent returns agent name's current definition and its revision,
// read with a direct get, or [ErrAgentNotFound].
func ReadAgent(ctx context.Context, r *natsbus.DirectReader, subjects protocol.Subjects, name string) ([]byte, uint64, error) {
	if !protocol.ValidToken(name) {
		return nil, 0, ErrAgentNotFound
	}
	vals, err := BucketValues(ctx, r, subjects.AgentsBucket(), name)
	if err != nil {
		return nil, 0, fmt.Errorf("natsbus: reading agent %s: %w", name, err)
	}
	m, ok := vals[name]
	if !ok {
		return nil, 0, ErrAgentNotFound
	}
	return m.Data, m.Seq, nil
}
