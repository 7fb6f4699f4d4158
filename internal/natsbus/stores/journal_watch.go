package stores

import (
	"context"
	"fmt"
	"time"

	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// JournalWatch delivers a run's journal entries from its first, and then
// each one as it is stored.
type JournalWatch struct {
	w       *natsbus.StreamWatch
	subject string
	queued  []JournalRecord
}

// WatchJournal starts reading run's journal from its first entry. ctx
// bounds the setup. Stop the watch when done.
func WatchJournal(ctx context.Context, js natsbus.JetStream, subjects protocol.Subjects, run protocol.RunID) (*JournalWatch, error) {
	subject, err := subjects.Journal(run)
	if err != nil {
		return nil, fmt.Errorf("natsbus: journal: %w", err)
	}
	w, err := natsbus.WatchStream(ctx, js, subjects.JournalStream(), []string{subject}, time.Time{}, 64)
	if err != nil {
		return nil, err
	}
	return &JournalWatch{w: w, subject: subject}, nil
}

// Next returns the next entry. It blocks until one is stored, ctx ends
// or the watch stops. An entry that does not decode is an error.
func (w *JournalWatch) Next(ctx context.Context) (JournalRecord, error) {
	for len(w.queued) == 0 {
		m, err := w.w.Next(ctx)
		if err != nil {
			return JournalRecord{}, err
		}
		if m.Reflected {
			continue
		}
		es, err := decodeJournalEntries(m.Data)
		if err != nil {
			return JournalRecord{}, fmt.Errorf("natsbus: journal %s entry %d: %w", w.subject, m.Seq, err)
		}
		for _, e := range es {
			w.queued = append(w.queued, JournalRecord{Seq: m.Seq, Time: m.Stored, Entry: e})
		}
	}
	r := w.queued[0]
	w.queued = w.queued[1:]
	return r, nil
}

// Stop ends the watch. It may be called more than once.
func (w *JournalWatch) Stop() { w.w.Stop() }
