package main

import (
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The floor's claim: the cheapest at-most-once on JetStream, as the
// fleet's non-idempotent calls are claimed (workerbus/claim.go). Before it
// runs a claimed call, the worker stores the call's start record on a
// subject of its own in a stream that keeps one message per subject and
// refuses a second (Nats-Expected-Last-Subject-Sequence: 0), published
// asynchronously; once the record's PubAck is in it acknowledges the call,
// runs it and publishes its result. Of two deliveries of a call exactly one
// stores the record, and only that one runs it. What this row costs beyond
// the same floor unclaimed is what at-most-once costs on this server, with
// nothing of the fleet's.
const (
	floorStartStream  = "BENCH_FLOOR_STARTS"
	floorStartPrefix  = "bench.floor.start."
	floorClaimHeader  = "Bench-Claim"
	floorStartsMaxAge = 10 * time.Minute
)

// floorStartsConfig is the start records' stream: one record per call,
// a second refused.
var floorStartsConfig = jetstream.StreamConfig{
	Name: floorStartStream, Subjects: []string{floorStartPrefix + ">"}, Retention: jetstream.LimitsPolicy,
	Storage: jetstream.FileStorage, MaxMsgsPerSubject: 1, Discard: jetstream.DiscardNew, DiscardNewPerSubject: true,
	Duplicates: 2 * time.Minute, MaxAge: floorStartsMaxAge,
}

// floorClaim is a call whose start record is being stored.
type floorClaim struct {
	f   jetstream.PubAckFuture
	msg jetstream.Msg
}

// claim publishes the start record of the call m carries.
func (w *floorWorker) claim(m jetstream.Msg) error {
	rec := nats.NewMsg(floorStartPrefix + m.Headers().Get(jetstream.MsgIDHeader))
	rec.Header.Set(jetstream.ExpectedLastSubjSeqHeader, "0")
	f, err := w.js.PublishMsgAsync(rec)
	if err != nil {
		return err
	}
	w.claims <- floorClaim{f: f, msg: m}
	return nil
}

// claimer runs each claimed call once its start record is stored: the
// call is acknowledged, run, and its result published; a record refused
// (another delivery's is stored) or lost leaves the call unrun.
func (w *floorWorker) claimer() {
	defer close(w.claimed)
	for c := range w.claims {
		select {
		case <-c.f.Ok():
			c.msg.Ack()
			w.answer(c.msg, false)
		case <-c.f.Err():
			c.msg.Term()
			w.release()
		case <-w.closed:
			w.release()
		}
	}
}
