package serve

import (
	"context"
	"encoding/json"
	"errors"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/toolfleet/toolfleet/internal/metrics"
	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/internal/natsbus/stores"
	"github.com/toolfleet/toolfleet/pkg/logkey"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/model/modelerr"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// parkedRun is what a parked run journals with its parked entry
// (loop.Durable.ParkData): its submission's subject tokens and its
// request, as the client stored it, so that a resume submits it again.
type parkedRun struct {
	Client     string          `json:"client"`
	Agent      string          `json:"agent"`
	Submission string          `json:"submission_id"`
	Request    json.RawMessage `json:"request"`
}

// parkReason is loop.Durable.Park of a served run: a model that answered
// an HTTP error, did not answer in time or could not be reached, after
// its provider's retries (modelerr.Policy), parks the run; an answer the
// loop cannot use, a request the provider cannot express, or a failure
// of another kind fails it as before, since asking again cannot help. The
// reason names the provider's status and error type and code, never the
// server's message (modelerr.APIError).
func parkReason(err error) string {
	var apiErr *modelerr.APIError
	var terr *modelerr.TransportError
	switch {
	case errors.As(err, &apiErr):
		return "the model answered " + apiErr.Error() + ", after its retries"
	case errors.Is(err, modelerr.ErrTimeout):
		return "the model did not answer within its request timeout, after its retries"
	case errors.As(err, &terr):
		return "the model could not be reached (transport error), after its retries"
	}
	return ""
}

// parkData is the ParkData of the run submitted on client's and agent's
// subject as submission, with request.
func parkData(client, agent, submission string, request []byte) json.RawMessage {
	data, _ := json.Marshal(parkedRun{Client: client, Agent: agent, Submission: submission, Request: request})
	return data
}

// onResumeRequest resumes the parked run named by a resume request's
// subject: when the message is a valid resume request of that run naming
// its author (protocol.DecodeRunResumeRequest) and the run's journal ends
// with its parked entry, the coordinator submits the run's request again
// on its own subject, with a message id derived from that entry (two
// resumes of one parking submit it once). Whichever serving coordinator
// takes it resumes the run from its journal. Anything else is logged and
// counted, and resumes nothing. Coordinators handle each request once, in
// a queue group.
func (s *Server) onResumeRequest(m *nats.Msg) {
	prefix := strings.TrimSuffix(s.subjects.JournalResumes(), "*")
	token, ok := strings.CutPrefix(m.Subject, prefix)
	run, err := protocol.ParseRunID(token)
	if !ok || err != nil {
		return
	}
	req, err := protocol.DecodeRunResumeRequest(m.Data, run, natsbus.MaxCancelRequestBytes)
	if err != nil {
		// Counted with the cancel requests: the same request, on the
		// run's other control subject.
		s.refused(metrics.RefusedCancelRequest)
		code, field := protoError(err)
		s.limited.Warn().Str(logRun, string(run)).Str(logCode, code).Str(logField, field).
			Msg("ignored a message on the run's resume subject that is not a resume request of the run naming its author")
		return
	}
	log := s.log.With().Str(logRun, string(run)).Logger()
	ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
	defer cancel()
	recs, err := stores.ReadJournal(ctx, s.js, s.subjects, run)
	if err != nil {
		s.limited.Warn().Err(err).Str(logRun, string(run)).Msg("could not read the journal of a run to resume")
		return
	}
	if len(recs) == 0 || recs[len(recs)-1].Entry.Kind != loop.EntryParked {
		log.Warn().Msg("ignored a resume request of a run that is not parked")
		return
	}
	last := recs[len(recs)-1]
	var p parkedRun
	if err := json.Unmarshal(last.Entry.Data, &p); err != nil || protocol.SubmissionRunID(p.Client, p.Submission) != run {
		log.Error().Msg("the parked entry of the run does not name its submission: it cannot be resumed")
		return
	}
	subject, err := s.subjects.RunSubmission(p.Client, p.Agent, p.Submission)
	if err != nil {
		log.Error().Err(err).Msg("the parked entry of the run does not name its submission: it cannot be resumed")
		return
	}
	if err := s.markResumed(ctx, p.Client, run, req.By); err != nil {
		log.Warn().Err(err).Msg("could not mark the parked run's result resumed: its resume is lost, ask again")
		return
	}
	msg := nats.NewMsg(subject)
	msg.Data = p.Request
	msg.Header.Set(nats.MsgIdHdr, protocol.ResubmissionMsgID(p.Client, p.Submission, last.Seq))
	msg.Header.Set(protocol.HeaderAgent, p.Agent)
	if _, err := s.js.PublishMsg(ctx, msg); err != nil {
		log.Warn().Err(err).Msg("could not submit a parked run again: its resume is lost, ask again")
		return
	}
	log.Info().Str(logClient, p.Client).Str(logAgent, p.Agent).Str("by", req.By).Int(logkey.Round, last.Entry.Round).
		Msg("parked run submitted again: a serving coordinator resumes it from its journal")
}

// markResumed sets ResumedBy on run's parked result, so that the
// coordinator that takes the submission runs it (answered). A run with no
// result yet (its coordinator stopped between parking and storing it)
// needs no mark; one whose result is not parked is not resumed.
func (s *Server) markResumed(ctx context.Context, client string, run protocol.RunID, by string) error {
	key := protocol.RunKey(client, run)
	data, rev, err := s.results.Entry(ctx, key)
	switch {
	case errors.Is(err, stores.ErrNoResult):
		return nil
	case err != nil:
		return err
	}
	res, err := protocol.DecodeRunResult(data, len(data)+1)
	if err != nil || res.RunID != run || !res.Parked() {
		return errors.New("the run's result is not a parked result of the run")
	}
	res.ResumedBy = by
	if data, err = encodeJSON(&res); err != nil {
		return err
	}
	return s.results.Replace(ctx, key, data, rev)
}

// parkedResult reports whether data is a parked run's result.
func parkedResult(data []byte) bool {
	res, err := protocol.DecodeRunResult(data, len(data)+1)
	return err == nil && res.Parked()
}

// resumedResult reports whether data is a parked run's result that an
// operator resumed.
func resumedResult(data []byte) bool {
	res, err := protocol.DecodeRunResult(data, len(data)+1)
	return err == nil && res.Parked() && res.ResumedBy != ""
}
