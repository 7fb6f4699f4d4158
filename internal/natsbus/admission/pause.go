package admission

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// A tool's kill switch is the JetStream pause of its durable consumer in
// the calls stream (nats-server 2.11+): the server stops handing the
// tool's calls to every worker at once, the calls wait in the stream (the
// coordinator answers those still waiting at their deadline), and the
// pause is part of the consumer's stored configuration, so it survives
// worker and server restarts. A worker that creates or updates the
// consumer cannot lift it: the server keeps an existing consumer's
// pause_until whatever a create or update request says (nats-server
// jetstream_api.go), so only $JS.API.CONSUMER.PAUSE.<calls stream>.<consumer>
// changes it, which deploy/nats-server.conf grants the operator (and
// admin) only. "coordinator tools pause" also records who, when and why in
// the traffic stream (FLEET_TRAFFIC) first: a stream of its own, which
// only operators write and which never refuses a record for want of room
// (it forgets a tool's oldest records instead), so the kill switch does
// not depend on the approvals stream having room.

// ToolPause is a tool consumer's pause as the server reports it.
type ToolPause struct {
	// Paused is true while the pause lasts.
	Paused bool
	// Until ends the pause (zero when not paused).
	Until time.Time
}

// ToolTraffic is the operator's traffic control of the fleet's tools: the
// kill switch (pause, resume) and the rate limits, each change recorded in
// the traffic stream (an audit log of its own) before it takes effect.
type ToolTraffic struct {
	js       jetstream.JetStream
	subjects protocol.Subjects
}

// NewToolTraffic returns the traffic control of the fleet of subjects.
func NewToolTraffic(js natsbus.JetStream, subjects protocol.Subjects) *ToolTraffic {
	return &ToolTraffic{js: js, subjects: subjects}
}

// ErrNoToolConsumer means the tool has no consumer in the calls stream: no
// worker ever served it (or the operator removed it), so there is nothing
// to pause.
var ErrNoToolConsumer = errors.New("no worker has served this tool yet (it has no consumer in the calls stream)")

// PauseState returns the tool's pause.
func (t *ToolTraffic) PauseState(ctx context.Context, tool protocol.ToolName) (ToolPause, error) {
	durable, err := t.subjects.Consumer(tool)
	if err != nil {
		return ToolPause{}, err
	}
	cons, err := t.js.Consumer(ctx, t.subjects.CallsStream(), durable)
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		return ToolPause{}, ErrNoToolConsumer
	}
	if err != nil {
		return ToolPause{}, err
	}
	info := cons.CachedInfo()
	if !info.Paused {
		return ToolPause{}, nil
	}
	p := ToolPause{Paused: true}
	if info.Config.PauseUntil != nil {
		p.Until = *info.Config.PauseUntil
	}
	return p, nil
}

// ToolQueue is a tool's queue as its consumers (interactive and batch)
// report it.
type ToolQueue struct {
	// Waiting counts the calls stored and not yet delivered to a worker.
	Waiting uint64
	// InFlight counts the calls delivered to a worker and not yet
	// acknowledged: running, or lost with a worker until redelivered.
	InFlight int
}

// Queue returns the tool's queue, or ErrNoToolConsumer before any worker
// served it. It reads consumer info, as PauseState does.
func (t *ToolTraffic) Queue(ctx context.Context, tool protocol.ToolName) (ToolQueue, error) {
	var q ToolQueue
	for _, class := range []protocol.Class{protocol.ClassInteractive, protocol.ClassBatch} {
		durable, err := t.subjects.ClassConsumer(tool, class)
		if err != nil {
			return ToolQueue{}, err
		}
		cons, err := t.js.Consumer(ctx, t.subjects.CallsStream(), durable)
		switch {
		case errors.Is(err, jetstream.ErrConsumerNotFound) && class == protocol.ClassInteractive:
			return ToolQueue{}, ErrNoToolConsumer
		case errors.Is(err, jetstream.ErrConsumerNotFound):
			continue
		case err != nil:
			return ToolQueue{}, err
		}
		info := cons.CachedInfo()
		q.Waiting += info.NumPending
		q.InFlight += info.NumAckPending
	}
	return q, nil
}

// Pause records note (action pause, until set) and pauses the tool's
// consumer until note.Until. Nothing is paused unless the record is
// stored.
func (t *ToolTraffic) Pause(ctx context.Context, note protocol.TrafficNote) (ToolPause, error) {
	note.Action = protocol.TrafficPause
	if note.Until == nil {
		return ToolPause{}, fmt.Errorf("natsbus: pause %s: no end time", note.Tool)
	}
	if _, err := t.PauseState(ctx, note.Tool); err != nil {
		return ToolPause{}, err
	}
	if err := t.record(ctx, &note); err != nil {
		return ToolPause{}, err
	}
	durable, _ := t.subjects.Consumer(note.Tool)
	resp, err := t.js.PauseConsumer(ctx, t.subjects.CallsStream(), durable, *note.Until)
	if err != nil {
		return ToolPause{}, fmt.Errorf("pausing consumer %s: %w", durable, err)
	}
	if !resp.Paused {
		return ToolPause{}, fmt.Errorf("pausing consumer %s: the server did not pause it (an end time in the past?)", durable)
	}
	// The tool's batch calls have a consumer of their own (priority.go).
	batch, _ := t.subjects.ClassConsumer(note.Tool, protocol.ClassBatch)
	if _, err := t.js.PauseConsumer(ctx, t.subjects.CallsStream(), batch, *note.Until); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return ToolPause{}, fmt.Errorf("pausing consumer %s: %w", batch, err)
	}
	return ToolPause{Paused: true, Until: resp.PauseUntil}, nil
}

// Resume records note (action resume) and resumes the tool's consumer.
func (t *ToolTraffic) Resume(ctx context.Context, note protocol.TrafficNote) error {
	note.Action = protocol.TrafficResume
	note.Until = nil
	if _, err := t.PauseState(ctx, note.Tool); err != nil {
		return err
	}
	if err := t.record(ctx, &note); err != nil {
		return err
	}
	durable, _ := t.subjects.Consumer(note.Tool)
	if _, err := t.js.ResumeConsumer(ctx, t.subjects.CallsStream(), durable); err != nil {
		return fmt.Errorf("resuming consumer %s: %w", durable, err)
	}
	batch, _ := t.subjects.ClassConsumer(note.Tool, protocol.ClassBatch)
	if _, err := t.js.ResumeConsumer(ctx, t.subjects.CallsStream(), batch); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return fmt.Errorf("resuming consumer %s: %w", batch, err)
	}
	return nil
}

// record stores note in the traffic stream.
func (t *ToolTraffic) record(ctx context.Context, note *protocol.TrafficNote) error {
	note.V = protocol.Version
	if note.At.IsZero() {
		note.At = time.Now().UTC()
	}
	if err := note.Validate(); err != nil {
		return err
	}
	subj, err := t.subjects.TrafficNote(note.Tool)
	if err != nil {
		return err
	}
	data, err := protocol.EncodeTrafficNote(note)
	if err != nil {
		return err
	}
	if _, err := t.js.Publish(ctx, subj, data, jetstream.WithExpectStream(t.subjects.TrafficStream())); err != nil {
		return fmt.Errorf("recording the %s in %s: %w", note.Action, t.subjects.TrafficStream(), err)
	}
	return nil
}

// TrafficRecord is one stored traffic audit record.
type TrafficRecord struct {
	Note protocol.TrafficNote
	Seq  uint64
}

// History returns the newest limit traffic audit records of tool (every
// tool when empty; every record when limit <= 0), oldest first. It reads
// back from the newest record in growing windows of sequences, so that it
// reads about limit records of tool, not its whole log.
func (t *ToolTraffic) History(ctx context.Context, tool protocol.ToolName, limit int) ([]TrafficRecord, error) {
	filter := t.subjects.TrafficNotes()
	if tool != "" {
		var err error
		if filter, err = t.subjects.TrafficNote(tool); err != nil {
			return nil, err
		}
	}
	if limit <= 0 {
		return t.history(ctx, filter, 1, 0)
	}
	newest, err := natsbus.GetFromLeader(ctx, t.js, t.subjects.TrafficStream(), natsbus.LeaderGet{LastBySubject: filter})
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
		return nil, nil
	case err != nil:
		return nil, err
	}
	for span := uint64(limit); ; span *= 4 {
		from := uint64(1)
		if newest.Sequence > span {
			from = newest.Sequence - span + 1
		}
		out, err := t.history(ctx, filter, from, limit)
		if err != nil || len(out) >= limit || from == 1 {
			return out, err
		}
	}
}

// history reads the traffic records on filter from sequence from, one
// record a request (the stream allows no direct get; no consumer: what
// only reads needs no more than single gets), and keeps the newest limit
// of them (all when limit <= 0).
func (t *ToolTraffic) history(ctx context.Context, filter string, from uint64, limit int) ([]TrafficRecord, error) {
	var out []TrafficRecord
	_, err := natsbus.NewDirectReader(t.js).AllSingly(ctx, t.subjects.TrafficStream(), filter, from, 0, func(m natsbus.DirectMsg) bool {
		if n, err := protocol.DecodeTrafficNote(m.Data); err == nil {
			if want, _ := t.subjects.TrafficNote(n.Tool); want == m.Subject {
				if limit > 0 && len(out) == limit {
					out = append(out[:0], out[1:]...)
				}
				out = append(out, TrafficRecord{Note: n, Seq: m.Seq})
			}
		}
		return true
	})
	return out, err
}

// SetLimit records note (action limit) and stores the tool's rate limit
// for every worker serving it (they read it within limitRefresh). Rate 0
// lifts every limit, the manifest's too.
func (t *ToolTraffic) SetLimit(ctx context.Context, note protocol.TrafficNote) error {
	note.Action = protocol.TrafficLimit
	note.Until = nil
	lim := protocol.RateLimit{Rate: note.Rate, Burst: note.Burst}
	if err := lim.Validate(); err != nil {
		return err
	}
	kv, err := t.js.KeyValue(ctx, t.subjects.LimitsBucket())
	if err != nil {
		return fmt.Errorf("rate limits bucket %s: %w", t.subjects.LimitsBucket(), err)
	}
	if err := t.record(ctx, &note); err != nil {
		return err
	}
	data, err := json.Marshal(lim)
	if err != nil {
		return err
	}
	if _, err := kv.Put(ctx, LimitKey(note.Tool), data); err != nil {
		return fmt.Errorf("storing the limit of %s: %w", note.Tool, err)
	}
	return nil
}

// Limit returns the operator's rate limit of tool, and false when none is
// set (the manifest's, if any, is in force).
func (t *ToolTraffic) Limit(ctx context.Context, tool protocol.ToolName) (protocol.RateLimit, bool, error) {
	kv, err := t.js.KeyValue(ctx, t.subjects.LimitsBucket())
	if err != nil {
		return protocol.RateLimit{}, false, fmt.Errorf("rate limits bucket %s: %w", t.subjects.LimitsBucket(), err)
	}
	e, err := kv.Get(ctx, LimitKey(tool))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return protocol.RateLimit{}, false, nil
	}
	if err != nil {
		return protocol.RateLimit{}, false, err
	}
	lim, err := protocol.DecodeRateLimit(e.Value())
	if err != nil {
		return protocol.RateLimit{}, false, err
	}
	return lim, true, nil
}

// RecordTraffic stores data, an audit record of an operator's change
// (a bulk cancel or resume of runs), on subject in the traffic stream,
// where the tools' pause and limit records are: the server refuses it
// when subject is not the stream's.
func RecordTraffic(ctx context.Context, js natsbus.JetStream, s protocol.Subjects, subject string, data []byte) error {
	_, err := js.Publish(ctx, subject, data, jetstream.WithExpectStream(s.TrafficStream()))
	return err
}
