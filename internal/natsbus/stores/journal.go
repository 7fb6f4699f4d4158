package stores

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// Journal entry kinds of the journal itself (the loop ignores them).
const (
	// EntryOwner: a coordinator took the run (Owner, At, Note = why).
	EntryOwner = "owner"
	// EntryRequest: the run's request and applied limits (Data).
	EntryRequest = "request"
)

// MaxJournalEntryBytes bounds one encoded journal entry.
const MaxJournalEntryBytes = protocol.DefaultMaxMessageBytes - 8<<10

// journalOpTimeout bounds one journal operation.
const journalOpTimeout = 5 * time.Second

// journalAppendWait bounds an append with its retries: long enough to
// wait out the election of a new stream leader after a node is lost (a
// few seconds, more on a loaded machine), as a starting process waits for
// its streams (StreamGuardConfig.StartWait), rather than end the run.
const journalAppendWait = 30 * time.Second

// Journal is one run's journal in the journal stream, owned by one
// coordinator: a [loop.Journal]. Open takes the run over by appending an
// owner entry after the last entry it read; every append names the
// sequence of the entry before it (Nats-Expected-Last-Subject-Sequence), so
// once another coordinator has appended, this one can append nothing more
// ([loop.ErrFenced]).
type Journal struct {
	js      jetstream.JetStream
	stream  string
	subject string
	owner   string
	// token tells this Journal's appends from any other's, even another
	// process under the same owner name.
	token string

	// incomplete: what was read does not begin at the run's start.
	incomplete bool

	// pending is the append AppendAsync started, its error delivered
	// once; the loop calls Append, AppendAsync and Flush from one
	// goroutine at a time.
	pending chan error

	mu      sync.Mutex
	entries []loop.JournalEntry
	last    uint64 // stream sequence of the run's last entry; 0: none
	fenced  bool
}

var (
	_ loop.PipelinedJournal = (*Journal)(nil)
	_ loop.BatchJournal     = (*Journal)(nil)
)

// Notes of the owner entries OpenJournal appends.
const (
	// NoteStart: the run starts here; its journal must be empty.
	NoteStart = "start"
	// NoteResume: the run was taken before; its journal must begin with
	// the owner entry of its start.
	NoteResume = "resume"
)

// OpenJournal reads run's journal and takes the run over for owner: it
// appends an owner entry (with note saying why: NoteStart, NoteResume),
// fenced on the last entry read. Entries returns what was read, owner
// entries included. The Journal is Incomplete when what was read does not
// begin with the owner entry of the run's start, or is empty for a run
// taken before (note other than NoteStart) while the journal stream has
// lost messages (by age or purge): entries were lost, and the loop ends
// the run (loop.TerminationJournalLost) rather than start it over.
func OpenJournal(ctx context.Context, js jetstream.JetStream, subjects protocol.Subjects, run protocol.RunID, owner, note string) (*Journal, error) {
	subject, err := subjects.Journal(run)
	if err != nil {
		return nil, fmt.Errorf("natsbus: journal: %w", err)
	}
	j := &Journal{js: js, stream: subjects.JournalStream(), subject: subject, owner: owner, token: protocol.NewID()}
	recs, last, err := readJournal(ctx, js, j.stream, subject)
	if err != nil {
		return nil, err
	}
	for _, r := range recs {
		j.entries = append(j.entries, r.Entry)
	}
	j.last = last
	switch {
	case len(j.entries) == 0 && note != NoteStart:
		// Taken before, and nothing there: lost, unless the stream never
		// lost anything (its previous owner died before its first append).
		if j.incomplete, err = journalStreamLost(ctx, js, j.stream); err != nil {
			return nil, err
		}
		if !j.incomplete {
			// Then this owner starts the run: its entry is the run's
			// start, as the next owner must read it.
			note = NoteStart
		}
	case len(j.entries) == 0:
	default:
		first := j.entries[0]
		j.incomplete = first.Kind != EntryOwner || first.Note != NoteStart
	}
	if err := j.append(ctx, loop.JournalEntry{Kind: EntryOwner, Owner: owner, Note: note, At: time.Now().UTC()}); err != nil {
		return nil, err
	}
	return j, nil
}

// journalStreamLost reports whether the journal stream ever removed a
// message (by age, or an administrator's purge): its first sequence is
// past 1, or it has gaps. It never deletes one itself (deny_delete,
// discard new).
func journalStreamLost(ctx context.Context, js jetstream.JetStream, stream string) (bool, error) {
	ictx, cancel := context.WithTimeout(ctx, journalOpTimeout)
	defer cancel()
	s, err := js.Stream(ictx, stream)
	if err != nil {
		return false, fmt.Errorf("natsbus: journal stream %s: %w", stream, err)
	}
	st := s.CachedInfo().State
	return st.FirstSeq > 1 || st.NumDeleted > 0, nil
}

var _ loop.IncompleteJournal = (*Journal)(nil)

// Incomplete implements [loop.IncompleteJournal].
func (j *Journal) Incomplete() bool { return j.incomplete }

// Entries implements [loop.Journal]: the entries read by OpenJournal.
func (j *Journal) Entries() []loop.JournalEntry {
	j.mu.Lock()
	defer j.mu.Unlock()
	return append([]loop.JournalEntry(nil), j.entries...)
}

// Fenced reports whether an append was refused because another owner
// appended.
func (j *Journal) Fenced() bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.fenced
}

// Append implements [loop.Journal]. A server that does not answer is asked
// again with the same message id; an answer that another entry is last is
// checked against the run's last entry, which is this one when an earlier
// attempt was stored. An append AppendAsync started is waited for first.
func (j *Journal) Append(ctx context.Context, e loop.JournalEntry) error {
	if err := j.Flush(ctx); err != nil {
		return err
	}
	return j.append(ctx, e)
}

// AppendAsync implements [loop.PipelinedJournal]: e is appended as by
// Append, by another goroutine, fenced on the entry before it like every
// other (the next append is fenced on e, so it waits for e's sequence).
func (j *Journal) AppendAsync(ctx context.Context, e loop.JournalEntry) <-chan struct{} {
	return j.AppendAsyncThen(ctx, e, nil)
}

// AppendAsyncThen is AppendAsync, calling stored (when set) once e is
// stored, before the returned channel is closed.
func (j *Journal) AppendAsyncThen(ctx context.Context, e loop.JournalEntry, stored func(loop.JournalEntry)) <-chan struct{} {
	prev := j.pending
	done := make(chan error, 1)
	settled := make(chan struct{})
	j.pending = done
	go func() {
		// settled closes before done is sent: whoever has the append's
		// outcome (Flush, the next append) sees it settled.
		var err error
		if prev != nil {
			err = <-prev
		}
		if err == nil {
			err = j.append(ctx, e)
			if err == nil && stored != nil {
				stored(e)
			}
		}
		close(settled)
		done <- err
	}()
	return settled
}

// Flush implements [loop.PipelinedJournal].
func (j *Journal) Flush(ctx context.Context) error {
	if j.pending == nil {
		return nil
	}
	select {
	case err := <-j.pending:
		j.pending = nil
		return err
	case <-ctx.Done():
		return fmt.Errorf("natsbus: appending to the journal: %w", ctx.Err())
	}
}

// AppendBatch implements [loop.BatchJournal]: es are stored as one
// message (a JSON array of the entries), fenced on the entry before them
// like any append, so they are all stored or none. Entries too large to
// share one message are appended one by one, each fenced.
func (j *Journal) AppendBatch(ctx context.Context, es []loop.JournalEntry) error {
	if err := j.Flush(ctx); err != nil {
		return err
	}
	if len(es) < 2 || len(es) > maxJournalBatch {
		for _, e := range es {
			if err := j.append(ctx, e); err != nil {
				return err
			}
		}
		return nil
	}
	data, err := json.Marshal(es)
	if err != nil {
		return fmt.Errorf("natsbus: encoding journal entries: %w", err)
	}
	if len(data) > MaxJournalEntryBytes {
		for _, e := range es {
			if err := j.append(ctx, e); err != nil {
				return err
			}
		}
		return nil
	}
	return j.store(ctx, data)
}

// maxJournalBatch bounds the entries of one journal message.
const maxJournalBatch = 8

func (j *Journal) append(ctx context.Context, e loop.JournalEntry) error {
	data, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("natsbus: encoding a journal entry: %w", err)
	}
	if len(data) > MaxJournalEntryBytes {
		return fmt.Errorf("natsbus: journal entry %s is %d bytes, limit %d: %w", e.Kind, len(data), MaxJournalEntryBytes, protocol.ErrTooLarge)
	}
	return j.store(ctx, data)
}

// store appends one journal message, fenced on the run's last one.
func (j *Journal) store(ctx context.Context, data []byte) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.fenced {
		return loop.ErrFenced
	}
	msgID := journalMsgID(j.subject, j.last, j.token)
	msg := nats.NewMsg(j.subject)
	msg.Data = data
	msg.Header.Set(protocol.HeaderMsgID, msgID)
	msg.Header.Set(protocol.HeaderVersion, strconv.Itoa(protocol.Version))
	msg.Header.Set(headerJournalOwner, j.owner)
	actx, cancel := context.WithTimeout(ctx, journalAppendWait)
	defer cancel()
	for attempt := 1; ; attempt++ {
		pctx, pcancel := context.WithTimeout(actx, natsbus.PublishAttemptTimeout)
		ack, err := j.js.PublishMsg(pctx, msg, jetstream.WithExpectStream(j.stream), jetstream.WithExpectLastSequencePerSubject(j.last))
		pcancel()
		switch {
		case err == nil:
			j.last = ack.Sequence
			return nil
		case wrongLastSequence(err):
			// Stored by an earlier attempt, or another owner appended.
			// Only the run's last entry, read from the stream's leader,
			// tells which: an entry past j.last is this one or another
			// owner's. A read that fails (a leader change, a timeout) or
			// shows nothing past j.last (a refusal while a new leader
			// catches up) is tried again, never taken for another owner.
			seq, lastID, rerr := j.lastEntry(actx)
			switch {
			case rerr == nil && seq > j.last && lastID == msgID:
				j.last = seq
				return nil
			case rerr == nil && seq > j.last:
				j.fenced = true
				return loop.ErrFenced
			case rerr == nil:
			case actx.Err() != nil || !natsbus.Transient(rerr):
				return fmt.Errorf("natsbus: appending to the journal: reading its last entry: %w", rerr)
			default:
				err = rerr
			}
		case actx.Err() != nil || !natsbus.Transient(err):
			return fmt.Errorf("natsbus: appending to the journal: %w", err)
		}
		if !natsbus.SleepCtx(actx, natsbus.Backoff(attempt)) {
			return fmt.Errorf("natsbus: appending to the journal: %w", err)
		}
	}
}

// lastEntry reads the sequence and dedup id of the run's last entry from
// the stream's leader (0 and "" when the run has none).
func (j *Journal) lastEntry(ctx context.Context) (seq uint64, msgID string, err error) {
	rctx, cancel := context.WithTimeout(ctx, natsbus.PublishAttemptTimeout)
	defer cancel()
	m, err := lastFromLeader(rctx, j.js, j.stream, j.subject)
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
		return 0, "", nil
	case err != nil:
		return 0, "", err
	}
	return m.Sequence, m.Header.Get(protocol.HeaderMsgID), nil
}

// lastFromLeader reads the last message on subject in stream from the
// stream's leader (STREAM.MSG.GET), or jetstream.ErrMsgNotFound. A direct
// get (what nats.go asks for when the stream allows it) may be answered by
// a replica that has not stored the newest messages yet, and a journal's
// last entry decides where its next owner appends and whether an owner is
// fenced.
func lastFromLeader(ctx context.Context, js jetstream.JetStream, stream, subject string) (*jetstream.RawStreamMsg, error) {
	return natsbus.GetFromLeader(ctx, js, stream, natsbus.LeaderGet{LastBySubject: subject})
}

// headerJournalOwner names the coordinator that appended an entry.
const headerJournalOwner = "Toolfleet-Owner"

// journalMsgID is the dedup id of the entry a Journal (token) appends
// after seq.
func journalMsgID(subject string, seq uint64, token string) string {
	return subject + "@" + strconv.FormatUint(seq, 10) + "@" + token
}

func wrongLastSequence(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}

// JournalRecord is one stored journal entry.
type JournalRecord struct {
	Seq   uint64
	Time  time.Time
	Entry loop.JournalEntry
}

// ReadJournal returns run's journal, in order.
func ReadJournal(ctx context.Context, js jetstream.JetStream, subjects protocol.Subjects, run protocol.RunID) ([]JournalRecord, error) {
	subject, err := subjects.Journal(run)
	if err != nil {
		return nil, fmt.Errorf("natsbus: journal: %w", err)
	}
	recs, _, err := readJournal(ctx, js, subjects.JournalStream(), subject)
	return recs, err
}

// readJournal reads every entry on subject up to the last one at the time
// of the call, and that last entry's sequence (0 when there is none).
func readJournal(ctx context.Context, js jetstream.JetStream, stream, subject string) ([]JournalRecord, uint64, error) {
	rctx, cancel := context.WithTimeout(ctx, 4*journalOpTimeout)
	defer cancel()
	s, err := js.Stream(rctx, stream)
	if err != nil {
		return nil, 0, fmt.Errorf("natsbus: journal stream %s: %w", stream, err)
	}
	lastMsg, err := lastFromLeader(rctx, js, stream, subject)
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
		return nil, 0, nil
	case err != nil:
		return nil, 0, fmt.Errorf("natsbus: reading the journal %s: %w", subject, err)
	}
	last := lastMsg.Sequence
	cons, err := s.OrderedConsumer(rctx, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{subject}, DeliverPolicy: jetstream.DeliverAllPolicy,
		InactiveThreshold: time.Minute,
	})
	if err != nil {
		return nil, 0, fmt.Errorf("natsbus: reading the journal %s: %w", subject, err)
	}
	var recs []JournalRecord
	for {
		batch, err := cons.Fetch(256, jetstream.FetchContext(rctx))
		if err != nil {
			return nil, 0, fmt.Errorf("natsbus: reading the journal %s: %w", subject, err)
		}
		for m := range batch.Messages() {
			md, err := m.Metadata()
			if err != nil {
				continue
			}
			es, err := decodeJournalEntries(m.Data())
			if err != nil {
				return nil, 0, fmt.Errorf("natsbus: journal %s entry %d: %w", subject, md.Sequence.Stream, err)
			}
			for _, e := range es {
				recs = append(recs, JournalRecord{Seq: md.Sequence.Stream, Time: md.Timestamp, Entry: e})
			}
			if md.Sequence.Stream >= last {
				return recs, last, nil
			}
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
			return nil, 0, fmt.Errorf("natsbus: reading the journal %s: %w", subject, err)
		}
		if rctx.Err() != nil {
			return nil, 0, fmt.Errorf("natsbus: reading the journal %s: %w", subject, rctx.Err())
		}
	}
}

// decodeJournalEntries decodes one journal message strictly: one entry
// (a JSON object), or the entries of one AppendBatch (a JSON array of 2 to
// maxJournalBatch entries, each as decodeJournalEntry wants it).
func decodeJournalEntries(data []byte) ([]loop.JournalEntry, error) {
	if len(data) > MaxJournalEntryBytes {
		return nil, protocol.ErrTooLarge
	}
	trimmed := bytes.TrimLeft(data, " \t\r\n")
	if len(trimmed) == 0 || trimmed[0] != '[' {
		var e loop.JournalEntry
		if err := decodeJournalEntry(data, &e); err != nil {
			return nil, err
		}
		return []loop.JournalEntry{e}, nil
	}
	var raws []json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&raws); err != nil {
		return nil, fmt.Errorf("natsbus: journal entries: %w", err)
	}
	if dec.More() {
		return nil, errors.New("natsbus: journal entries: trailing data")
	}
	if len(raws) < 2 || len(raws) > maxJournalBatch {
		return nil, fmt.Errorf("natsbus: journal entries: %d in one message, want 2 to %d", len(raws), maxJournalBatch)
	}
	es := make([]loop.JournalEntry, len(raws))
	for i, raw := range raws {
		if t := bytes.TrimLeft(raw, " \t\r\n"); len(t) == 0 || t[0] != '{' {
			return nil, errors.New("natsbus: journal entries: an entry is not an object")
		}
		if err := decodeJournalEntry(raw, &es[i]); err != nil {
			return nil, err
		}
	}
	return es, nil
}

// decodeJournalEntry decodes one entry strictly: one JSON object of known
// fields, within MaxJournalEntryBytes, with a kind.
func decodeJournalEntry(data []byte, e *loop.JournalEntry) error {
	if len(data) > MaxJournalEntryBytes {
		return protocol.ErrTooLarge
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(e); err != nil {
		return fmt.Errorf("natsbus: journal entry: %w", err)
	}
	if dec.More() {
		return errors.New("natsbus: journal entry: trailing data")
	}
	if e.Kind == "" {
		return errors.New("natsbus: journal entry: no kind")
	}
	return nil
}

// ListJournals returns the runs that have a journal, with their entry
// counts.
func ListJournals(ctx context.Context, js jetstream.JetStream, subjects protocol.Subjects) (map[protocol.RunID]uint64, error) {
	s, err := js.Stream(ctx, subjects.JournalStream())
	if err != nil {
		return nil, fmt.Errorf("natsbus: journal stream %s: %w", subjects.JournalStream(), err)
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(subjects.Journals()))
	if err != nil {
		return nil, fmt.Errorf("natsbus: journal stream %s: %w", subjects.JournalStream(), err)
	}
	prefix := subjects.Journals()
	prefix = prefix[:len(prefix)-1]
	out := make(map[protocol.RunID]uint64, len(info.State.Subjects))
	for subj, n := range info.State.Subjects {
		if len(subj) <= len(prefix) || subj[:len(prefix)] != prefix {
			continue
		}
		if run, err := protocol.ParseRunID(subj[len(prefix):]); err == nil {
			out[run] = n
		}
	}
	return out, nil
}

// RequestCancel stores a cancel request for run, in the cancels stream
// (never in the journal stream, which only runs' coordinators write): the
// coordinator running it cancels it at once, and one that takes it later
// cancels it too.
func RequestCancel(ctx context.Context, js jetstream.JetStream, subjects protocol.Subjects, run protocol.RunID, req protocol.RunCancelRequest) error {
	subject, err := subjects.JournalCancel(run)
	if err != nil {
		return fmt.Errorf("natsbus: cancel: %w", err)
	}
	req.V, req.RunID = protocol.Version, run
	if err := req.Validate(); err != nil {
		return fmt.Errorf("natsbus: cancel: %w", err)
	}
	data, err := json.Marshal(req)
	if err != nil {
		return err
	}
	if len(data) > natsbus.MaxCancelRequestBytes-512 {
		return fmt.Errorf("natsbus: the cancel request of %s is %d bytes: %w", run, len(data), protocol.ErrTooLarge)
	}
	if _, err := js.Publish(ctx, subject, data, jetstream.WithExpectStream(subjects.CancelsStream())); err != nil {
		return fmt.Errorf("natsbus: storing the cancel request of %s: %w", run, err)
	}
	return nil
}

// CancelRequested reports whether a cancel request is stored for run. A
// stored message that is not a valid request for run
// ([protocol.DecodeRunCancelRequest]) requests nothing: it returns false
// and the decoder's *protocol.Error.
func CancelRequested(ctx context.Context, js jetstream.JetStream, subjects protocol.Subjects, run protocol.RunID) (bool, error) {
	subject, err := subjects.JournalCancel(run)
	if err != nil {
		return false, err
	}
	s, err := js.Stream(ctx, subjects.CancelsStream())
	if err != nil {
		return false, err
	}
	m, err := s.GetLastMsgForSubject(ctx, subject)
	switch {
	case err == nil:
		if _, err := protocol.DecodeRunCancelRequest(m.Data, run, natsbus.MaxCancelRequestBytes); err != nil {
			return false, fmt.Errorf("natsbus: the stored cancel request of %s: %w", run, err)
		}
		return true, nil
	case errors.Is(err, jetstream.ErrMsgNotFound):
		return false, nil
	default:
		return false, err
	}
}
