package serve

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/nats-io/nats.go"

	"github.com/toolfleet/toolfleet/internal/natsbus/stores"
	"github.com/toolfleet/toolfleet/internal/natsbus/streammsg"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// maxAdvisoryBytes bounds a decoded max-deliveries advisory.
const maxAdvisoryBytes = 4 << 10

// maxDeliveriesAdvisory is the part of the server's
// io.nats.jetstream.advisory.v1.max_deliver event the server reads.
type maxDeliveriesAdvisory struct {
	Stream     string `json:"stream"`
	Consumer   string `json:"consumer"`
	StreamSeq  uint64 `json:"stream_seq"`
	Deliveries uint64 `json:"deliveries"`
}

// onMaxDeliveries gives a run whose request was taken MaxDeliver times,
// and never finished, its result: an "abandoned" error. It then deletes the
// request, which the work queue would otherwise keep until it expires.
// Coordinators handle each advisory once, in a queue group.
func (s *Server) onMaxDeliveries(m *nats.Msg) {
	var adv maxDeliveriesAdvisory
	if len(m.Data) > maxAdvisoryBytes || json.Unmarshal(m.Data, &adv) != nil ||
		adv.Stream != s.subjects.RunsStream() || adv.Consumer != s.subjects.RunsConsumer() || adv.StreamSeq == 0 {
		s.limited.Warn().Str("subject", m.Subject).Msg("ignored a malformed max-deliveries advisory")
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	st, err := stores.RunsStream(ctx, s.js, s.subjects)
	if err != nil {
		s.limited.Warn().Err(err).Msg("reading an abandoned run request")
		return
	}
	raw, err := streammsg.Get(ctx, st, adv.StreamSeq, "")
	if err != nil {
		// Gone already: another coordinator handled it, or it finished.
		s.log.Debug().Err(err).Uint64("seq", adv.StreamSeq).Msg("abandoned run request not found")
		return
	}
	// A run whose header names no agent is still answered, abandoned.
	sub, _ := s.subjects.ParseStoredSubmission(raw.Subject, raw.Header.Get(protocol.HeaderMsgID), raw.Header.Get(protocol.HeaderAgent))
	client, run := sub.Client, protocol.SubmissionRunID(sub.Client, sub.Submission)
	if client != "" && !s.answered(client, run) {
		rec := &protocol.RunResult{
			V: protocol.Version, RunID: run, Submission: sub.Submission, Agent: sub.Agent, Coordinator: s.cfg.Name, Attempt: int(adv.Deliveries),
			SubmittedAt: raw.Time.UTC(),
			Error: &protocol.RunError{Code: protocol.CodeAbandoned, Message: fmt.Sprintf(
				"the run was taken %d times and never finished: each coordinator that took it stopped mid-run", adv.Deliveries)},
		}
		log := s.log.With().Str(logRun, string(run)).Int(logAttempt, rec.Attempt).Logger()
		data, created, err := s.store(client, rec)
		switch {
		case err != nil:
			log.Error().Err(err).Msg("could not store an abandoned run's result")
			return // keep the request: another coordinator may manage
		case created:
			if subject, err := s.subjects.ClientRunResult(client, run); err == nil {
				s.nc.Publish(subject, data)
			}
			log.Warn().Msg("run abandoned: it was taken as often as allowed and never finished")
		}
	}
	if err := st.DeleteMsg(ctx, adv.StreamSeq); err != nil {
		s.limited.Warn().Err(err).Uint64("seq", adv.StreamSeq).Msg("could not delete an abandoned run request")
	}
}
