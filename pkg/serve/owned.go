package serve

import (
	"context"
	"errors"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/toolfleet/toolfleet/internal/metrics"
	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/internal/natsbus/stores"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// errRunCancelled is the cause of a run an operator cancelled.
var errRunCancelled = errors.New("coordinator: the run was cancelled by an operator")

// own records that this coordinator runs run, so a cancel request reaches
// it; the returned func forgets it.
func (s *Server) own(run protocol.RunID, cancel context.CancelCauseFunc) func() {
	s.mu.Lock()
	s.owned[run] = cancel
	s.mu.Unlock()
	return func() {
		s.mu.Lock()
		delete(s.owned, run)
		s.mu.Unlock()
	}
}

// onCancelRequest cancels the run named by a cancel request's subject, if
// this coordinator runs it and the message is a valid cancel request of
// that run, naming its author ([protocol.DecodeRunCancelRequest]): any
// other message there (a server's acknowledgement stored by the cancels
// stream, a request for another run) is logged, counted and ignored. The
// request is stored in the cancels stream, so a coordinator that takes
// the run later sees it too (cancelRequested).
func (s *Server) onCancelRequest(m *nats.Msg) {
	prefix := strings.TrimSuffix(s.subjects.JournalCancels(), "*")
	token, ok := strings.CutPrefix(m.Subject, prefix)
	run, err := protocol.ParseRunID(token)
	if !ok || err != nil {
		return
	}
	if _, err := protocol.DecodeRunCancelRequest(m.Data, run, natsbus.MaxCancelRequestBytes); err != nil {
		s.refusedCancel(run, err)
		return
	}
	s.mu.Lock()
	cancel := s.owned[run]
	s.mu.Unlock()
	if cancel != nil {
		s.log.Info().Str(logRun, string(run)).Msg("run cancelled by an operator")
		cancel(errRunCancelled)
	}
}

// cancelRequested reports whether an operator asked to cancel run.
func (s *Server) cancelRequested(run protocol.RunID) bool {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	ok, err := stores.CancelRequested(ctx, s.js, s.subjects, run)
	var perr *protocol.Error
	switch {
	case errors.As(err, &perr):
		s.refusedCancel(run, err)
	case err != nil:
		s.limited.Warn().Err(err).Str(logRun, string(run)).Msg("could not read the run's cancel requests")
	}
	return ok
}

// refusedCancel logs and counts a message on run's cancel subject that is
// not a valid cancel request of run (err, a *protocol.Error): it cancels
// nothing.
func (s *Server) refusedCancel(run protocol.RunID, err error) {
	s.refused(metrics.RefusedCancelRequest)
	code, field := protoError(err)
	s.limited.Warn().Str(logRun, string(run)).Str(logCode, code).Str(logField, field).
		Msg("ignored a message on the run's cancel subject that is not a cancel request of the run naming its author")
}

// hookedJournal calls after once each entry is stored.
type hookedJournal struct {
	*stores.Journal
	after func(loop.JournalEntry)
}

func (h hookedJournal) Append(ctx context.Context, e loop.JournalEntry) error {
	err := h.Journal.Append(ctx, e)
	if err == nil {
		h.after(e)
	}
	return err
}

// AppendBatch calls after for each of es once they are stored.
func (h hookedJournal) AppendBatch(ctx context.Context, es []loop.JournalEntry) error {
	err := h.Journal.AppendBatch(ctx, es)
	if err == nil {
		for _, e := range es {
			h.after(e)
		}
	}
	return err
}

// AppendAsync calls after once e is stored, as Append does.
func (h hookedJournal) AppendAsync(ctx context.Context, e loop.JournalEntry) <-chan struct{} {
	return h.Journal.AppendAsyncThen(ctx, e, h.after)
}

// protoError is err's protocol code and field, for a log line: never its
// text, which may quote what a stranger wrote.
func protoError(err error) (code, field string) {
	var perr *protocol.Error
	if errors.As(err, &perr) {
		return perr.Code, perr.Field
	}
	return "internal", ""
}
