package serve

import (
	"encoding/json"

	"github.com/nats-io/nats.go"

	"github.com/toolfleet/toolfleet/internal/metrics"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// inputQueue bounds the inputs a run holds before its loop takes them:
// one more is refused until it does.
const inputQueue = 8

// runInput is where a run this coordinator runs takes its client's input.
type runInput struct {
	client string
	ch     chan loop.Input
}

// takeInputs registers run as taking its client's input
// ([Server.onRunInput]); the loop reads the channel, and forget ends it.
func (s *Server) takeInputs(run protocol.RunID, client string) (in <-chan loop.Input, forget func()) {
	ri := &runInput{client: client, ch: make(chan loop.Input, inputQueue)}
	s.mu.Lock()
	s.inputs[run] = ri
	s.mu.Unlock()
	return ri.ch, func() {
		s.mu.Lock()
		if s.inputs[run] == ri {
			delete(s.inputs, run)
		}
		s.mu.Unlock()
	}
}

// onRunInput hands a client's input to its run, when this coordinator
// runs it, and answers: accepted (the run takes it at its next step
// boundary, or at once while a round gathers, and journals it), or refused
// with why. A message for a run of another coordinator is left to it; one
// that names another client than the run's, does not decode, or names
// another run than its subject's is logged, counted and refused; a run
// whose queue of inputs is full refuses more until it takes them.
func (s *Server) onRunInput(m *nats.Msg) {
	client, run, ok := s.subjects.ParseRunInput(m.Subject)
	if !ok {
		return
	}
	s.mu.Lock()
	ri := s.inputs[run]
	s.mu.Unlock()
	if ri == nil {
		return // another coordinator's run, or no run now
	}
	log := s.limited.With().Str(logRun, string(run)).Str(logClient, client).Logger()
	if client != ri.client {
		// Not answered: whoever sent it learns nothing of the run.
		s.refused(metrics.RefusedRunInput)
		log.Warn().Msg("refused an input to a run from another client than the run's")
		return
	}
	req, err := protocol.DecodeRunInput(m.Data, run)
	if err != nil {
		s.refused(metrics.RefusedRunInput)
		code, field := protoError(err)
		log.Warn().Str(logCode, code).Str(logField, field).Msg("refused a message on the run's input subject that is not an input of the run")
		s.replyInput(m, run, protocol.RunErrorFrom(err))
		return
	}
	select {
	case ri.ch <- loop.Input{Mode: loop.InputMode(req.Mode), Content: req.Content}:
		log.Info().Str("mode", req.Mode).Msg("the run's client sent it an input")
		s.replyInput(m, run, nil)
	default:
		log.Warn().Msg("refused an input to a run that has not taken its earlier ones yet")
		s.replyInput(m, run, &protocol.RunError{Code: protocol.CodeUnavailable,
			Message: "the run has not yet taken its earlier inputs: send again later"})
	}
}

// replyInput answers a run input: accepted when rerr is nil.
func (s *Server) replyInput(m *nats.Msg, run protocol.RunID, rerr *protocol.RunError) {
	if m.Reply == "" {
		return
	}
	data, err := json.Marshal(protocol.RunInputReply{V: protocol.Version, RunID: run, Accepted: rerr == nil, Error: rerr})
	if err == nil {
		err = m.Respond(data)
	}
	if err != nil {
		s.limited.Warn().Err(err).Str(logRun, string(run)).Msg("could not answer a run input")
	}
}
