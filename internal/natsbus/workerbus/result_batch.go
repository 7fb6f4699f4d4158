package workerbus

import (
	"errors"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// maxResultsPerMessage bounds the results a worker puts in one
// [protocol.ResultBatch] (within protocol.MaxResultBatch, which readers
// enforce).
const maxResultsPerMessage = 64

// batchHeaderRoom is what a batch leaves of the server's max_payload for
// its headers (its id, version and shape).
const batchHeaderRoom = 1 << 10

// errNoPubAck is a publish whose PubAck did not come within one attempt's
// time.
var errNoPubAck = errors.New("natsbus: no acknowledgement within the attempt's time")

// resultLanes coalesces a worker's results by result subject (one run's
// calls to one tool): a result whose subject has no message in flight is
// published alone at once, in the one-result form; one that finds a
// message in flight waits for that message's first attempt to end, and
// then everything waiting for the subject is published together, as one
// [protocol.ResultBatch] (or a few, each within the worker's message
// bound and maxResultsPerMessage). A call answered on its own costs what
// it always did; calls finishing while the server is storing an earlier
// result share one message.
//
// No goroutine or timer is added per result: the handler that published
// a message (a result's own, or the first member of a batch) waits for
// its PubAck as it would for its own, hands the lane on (publishing what
// waits) and tells the batch's other members the outcome.
type resultLanes struct {
	mu    sync.Mutex
	lanes map[string]*resultLane // by result subject
}

// resultLane is one result subject's state.
type resultLane struct {
	run  protocol.RunID
	tool protocol.ToolName
	// inflight counts the subject's messages whose first attempt has not
	// ended. While it is above 0, new results wait.
	inflight int
	waiting  []*queuedResult
}

// queuedResult is a result waiting for a message to carry it.
type queuedResult struct {
	key  protocol.CallKey
	data []byte
	// limit is the largest batch its coordinator reads.
	limit int
	// carrier receives the message that carries the result (buffered).
	carrier chan *resultMsg
}

// resultMsg is one published message of a lane and its outcome.
type resultMsg struct {
	msg    *nats.Msg
	future jetstream.PubAckFuture // nil when the client could not queue it
	// members are the results it carries; the first waits for its PubAck.
	members []*queuedResult
	done    chan struct{} // closed once again and err are set
	again   bool
	err     error
}

// coalesced publishes the encoded result (data) of tool's call key on
// subject with whatever else waits for it, in a batch of at most limit
// bytes, and returns the outcome of the message that carried it, once
// its first attempt ended. again says that it was not stored and the
// caller should try again with its own message (deduplicated by
// protocol.ResultMsgID), as after a first attempt of its own; then err
// says why.
func (w *Worker) coalesced(subject string, run protocol.RunID, tool protocol.ToolName, key protocol.CallKey, data []byte, limit int) (again bool, err error) {
	rl := &w.resultLanes
	rl.mu.Lock()
	if rl.lanes == nil {
		rl.lanes = make(map[string]*resultLane)
	}
	lane := rl.lanes[subject]
	if lane == nil {
		lane = &resultLane{run: run, tool: tool}
		rl.lanes[subject] = lane
	}
	if lane.inflight == 0 {
		// Nothing in flight: published alone, now.
		lane.inflight++
		rl.mu.Unlock()
		again, err := w.firstAttempt(w.resultMessage(subject, protocol.ResultMsgID(tool, key), data))
		w.handOn(subject)
		return again, err
	}
	q := &queuedResult{key: key, data: data, limit: limit, carrier: make(chan *resultMsg, 1)}
	lane.waiting = append(lane.waiting, q)
	rl.mu.Unlock()

	m := <-q.carrier
	if m.members[0] == q {
		m.again, m.err = w.firstAttemptOf(m)
		if m.err != nil && len(m.members) > 1 {
			w.limited.Warn().Err(m.err).Str(natsbus.LogSubject, subject).Int("results", len(m.members)).
				Msg("a batch of results was not confirmed stored: publishing them one by one")
		}
		close(m.done)
		w.handOn(subject)
	} else {
		<-m.done
	}
	if m.err == nil || len(m.members) == 1 {
		return m.again, m.err // the result's own message
	}
	// A batch that failed or is not confirmed: each of its results is
	// published alone, with its own id. One the server did store in the
	// batch is then stored twice; readers take the first result of a call.
	return true, m.err
}

// handOn ends the first attempt of one of subject's messages: what waits
// for the subject is published now, in as few messages as its bounds allow.
func (w *Worker) handOn(subject string) {
	rl := &w.resultLanes
	rl.mu.Lock()
	lane := rl.lanes[subject]
	lane.inflight--
	waiting := lane.waiting
	lane.waiting = nil
	run, tool := lane.run, lane.tool
	var chunks [][]*queuedResult
	if len(waiting) > 0 {
		chunks = w.chunkResults(run, waiting)
		lane.inflight += len(chunks)
	} else if lane.inflight == 0 {
		delete(rl.lanes, subject)
	}
	rl.mu.Unlock()
	for _, members := range chunks {
		m := &resultMsg{members: members, done: make(chan struct{})}
		if len(members) == 1 {
			m.msg = w.resultMessage(subject, protocol.ResultMsgID(tool, members[0].key), members[0].data)
		} else {
			keys := make([]protocol.CallKey, len(members))
			encoded := make([][]byte, len(members))
			for i, q := range members {
				keys[i], encoded[i] = q.key, q.data
			}
			m.msg = w.resultMessage(subject, protocol.ResultBatchMsgID(tool, keys), protocol.EncodeResultBatch(run, encoded))
			m.msg.Header.Set(protocol.HeaderResultBatch, protocol.ResultBatchStored)
		}
		m.future, _ = w.js.PublishMsgAsync(m.msg, w.toResults)
		for _, q := range members {
			q.carrier <- m
		}
	}
}

// chunkResults splits waiting results into messages: each within the
// worker's message bound, the server's max_payload, the size their
// coordinator reads and maxResultsPerMessage, and a call key at most once
// in a message (two attempts of one call may both finish here). A message
// of one result is that result alone. rl.mu is held.
func (w *Worker) chunkResults(run protocol.RunID, waiting []*queuedResult) [][]*queuedResult {
	limit := w.cfg.MaxMessageBytes
	if p := int(w.nc.MaxPayload()) - batchHeaderRoom; p > 0 && p < limit {
		limit = p
	}
	for _, q := range waiting {
		limit = min(limit, q.limit)
	}
	var chunks [][]*queuedResult
	var cur []*queuedResult
	size := 0
	for _, q := range waiting {
		fits := len(cur) < maxResultsPerMessage &&
			protocol.ResultBatchBytes(run, len(cur)+1, size+len(q.data)) <= limit
		for _, o := range cur {
			if o.key == q.key {
				fits = false
			}
		}
		if len(cur) > 0 && !fits {
			chunks = append(chunks, cur)
			cur, size = nil, 0
		}
		cur = append(cur, q)
		size += len(q.data)
	}
	return append(chunks, cur)
}

// resultMessage is a message of the results stream on subject. Its
// header values share one allocation; each is a slice whose capacity ends
// at its value, so that an Add to one copies it rather than writes over
// the next.
func (w *Worker) resultMessage(subject, id string, data []byte) *nats.Msg {
	vals := &[2]string{id, versionHeader}
	return &nats.Msg{Subject: subject, Data: data, Header: nats.Header{
		protocol.HeaderMsgID:   vals[0:1:1],
		protocol.HeaderVersion: vals[1:2:2],
	}}
}

// versionHeader is every result's protocol.HeaderVersion.
var versionHeader = strconv.Itoa(protocol.Version)

// firstAttempt publishes msg asynchronously and waits for its PubAck for
// one attempt's time. again says that another attempt may pass (no
// answer, or one that says "not now"), err why it was not stored.
func (w *Worker) firstAttempt(msg *nats.Msg) (again bool, err error) {
	w.resultsAlone.Add(1)
	defer w.resultsAlone.Add(-1)
	f, err := w.js.PublishMsgAsync(msg, w.toResults)
	return awaitPubAck(f, err)
}

// firstAttemptOf waits for the PubAck of m, published by handOn.
func (w *Worker) firstAttemptOf(m *resultMsg) (again bool, err error) {
	if m.future == nil {
		return true, errNoPubAck
	}
	return awaitPubAck(m.future, nil)
}

// awaitPubAck waits for f's PubAck for one attempt's time; queued is the
// error of queuing it.
func awaitPubAck(f jetstream.PubAckFuture, queued error) (again bool, err error) {
	if queued != nil {
		return true, queued
	}
	t := time.NewTimer(natsbus.PublishAttemptTimeout)
	defer t.Stop()
	select {
	case <-f.Ok():
		return false, nil
	case err := <-f.Err():
		return natsbus.Transient(err), err
	case <-t.C:
		return true, errNoPubAck
	}
}

// waiting counts the results waiting for a message.
func (rl *resultLanes) waiting() int {
	rl.mu.Lock()
	defer rl.mu.Unlock()
	n := 0
	for _, l := range rl.lanes {
		n += len(l.waiting)
	}
	return n
}
