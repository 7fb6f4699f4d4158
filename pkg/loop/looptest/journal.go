package looptest

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/toolfleet/toolfleet/pkg/loop"
)

// Journal is an in-memory [loop.Journal]. Every entry goes through JSON,
// as it does on the wire, so a replayed entry is what a resumed run would
// read. It can fail an append (FailAt) or fence its writer (Fence). It is
// a [loop.PipelinedJournal] and a [loop.BatchJournal], as the fleet's is;
// a batch's entries count one by one for FailAt and Resume.
type Journal struct {
	// FailAt, when > 0, makes the FailAt-th append (counting from 1) and
	// every later one fail with loop.ErrFenced, as for an owner whose run
	// was taken over.
	FailAt int

	// pending is the append AppendAsync started (one goroutine at a
	// time calls Append, AppendAsync and Flush).
	pending chan error

	mu      sync.Mutex
	entries [][]byte
	replay  []loop.JournalEntry
	appends int
	// waited and pipelined count the stores the run asked for (Stores).
	waited, pipelined int
}

var (
	_ loop.PipelinedJournal = (*Journal)(nil)
	_ loop.BatchJournal     = (*Journal)(nil)
)

// NewJournal returns an empty journal.
func NewJournal() *Journal { return &Journal{} }

// Resume returns a journal holding the first n entries of j (all of them
// when n < 0 or n is past the end), to be replayed: a run that crashed
// after its n-th append.
func (j *Journal) Resume(n int) *Journal {
	j.mu.Lock()
	defer j.mu.Unlock()
	if n < 0 || n > len(j.entries) {
		n = len(j.entries)
	}
	out := &Journal{entries: append([][]byte(nil), j.entries[:n]...)}
	for _, data := range out.entries {
		var e loop.JournalEntry
		if err := json.Unmarshal(data, &e); err != nil {
			panic(fmt.Sprintf("looptest: journal entry: %v", err))
		}
		out.replay = append(out.replay, e)
	}
	return out
}

// Entries implements [loop.Journal].
func (j *Journal) Entries() []loop.JournalEntry {
	j.mu.Lock()
	defer j.mu.Unlock()
	return append([]loop.JournalEntry(nil), j.replay...)
}

// Append implements [loop.Journal].
func (j *Journal) Append(ctx context.Context, e loop.JournalEntry) error {
	j.count(&j.waited)
	if err := j.Flush(ctx); err != nil {
		return err
	}
	return j.append(e)
}

// AppendAsync implements [loop.PipelinedJournal]: e is appended by
// another goroutine.
func (j *Journal) AppendAsync(ctx context.Context, e loop.JournalEntry) <-chan struct{} {
	j.count(&j.pipelined)
	prev := j.pending
	done := make(chan error, 1)
	settled := make(chan struct{})
	j.pending = done
	go func() {
		// settled closes before done is sent, as the fleet's journal's.
		var err error
		if prev != nil {
			err = <-prev
		}
		if err == nil {
			err = j.append(e)
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
		return ctx.Err()
	}
}

// AppendBatch implements [loop.BatchJournal]: all of es or none (when
// one of them is at or past FailAt).
func (j *Journal) AppendBatch(ctx context.Context, es []loop.JournalEntry) error {
	j.count(&j.waited)
	if err := j.Flush(ctx); err != nil {
		return err
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	var datas [][]byte
	for _, e := range es {
		j.appends++
		if j.FailAt > 0 && j.appends >= j.FailAt {
			return loop.ErrFenced
		}
		data, err := json.Marshal(e)
		if err != nil {
			return err
		}
		datas = append(datas, data)
	}
	j.entries = append(j.entries, datas...)
	return nil
}

func (j *Journal) append(e loop.JournalEntry) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.appends++
	if j.FailAt > 0 && j.appends >= j.FailAt {
		return loop.ErrFenced
	}
	data, err := json.Marshal(e)
	if err != nil {
		return err
	}
	j.entries = append(j.entries, data)
	return nil
}

// Stores says how many stores the run asked of the journal, each one
// message on the wire: waited, those it waited for (Append, and
// AppendBatch, however many entries it carried), and pipelined, those it
// went on while (AppendAsync).
func (j *Journal) Stores() (waited, pipelined int) {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.waited, j.pipelined
}

func (j *Journal) count(n *int) {
	j.mu.Lock()
	*n++
	j.mu.Unlock()
}

// Len is the number of entries journaled.
func (j *Journal) Len() int {
	j.mu.Lock()
	defer j.mu.Unlock()
	return len(j.entries)
}

// Kinds lists the entries' kinds, in order.
func (j *Journal) Kinds() []string {
	j.mu.Lock()
	defer j.mu.Unlock()
	out := make([]string, len(j.entries))
	for i, data := range j.entries {
		var e struct {
			Kind string `json:"kind"`
		}
		json.Unmarshal(data, &e)
		out[i] = e.Kind
	}
	return out
}
