package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Names of the baselines' own subjects, stream and consumer; nothing of the
// fleet's.
const (
	baseCoreSubject = "bench.core"
	baseStream      = "BENCH_WQ"
	baseSubjects    = "bench.wq.>"
	baseTaskSubject = "bench.wq.task"
	baseConsumer    = "bench"
	baseReplyHeader = "Bench-Reply"
	// basePayload is the size of every baseline message.
	basePayload = 256
)

// baselines measures bare NATS on the server at url, with the kind of
// connection the fleet uses (TCP loopback): core request-reply, a
// JetStream work-queue round trip, and a JetStream fan-out and gather of
// fanout messages.
type baselines struct {
	url     string
	timeout time.Duration // bounds one round trip
}

// coreRequestReply is a responder on one connection and a requester on
// another, n sequential requests of basePayload bytes.
func (b baselines) coreRequestReply(n int) (summary, error) {
	resp, err := nats.Connect(b.url, nats.Name("fleetbench-responder"))
	if err != nil {
		return summary{}, err
	}
	defer resp.Close()
	req, err := nats.Connect(b.url, nats.Name("fleetbench-requester"))
	if err != nil {
		return summary{}, err
	}
	defer req.Close()
	if _, err := resp.Subscribe(baseCoreSubject, func(m *nats.Msg) { m.Respond(m.Data) }); err != nil {
		return summary{}, err
	}
	if err := resp.Flush(); err != nil {
		return summary{}, err
	}
	payload := make([]byte, basePayload)
	var s samples
	cpu := startCPU()
	for i := range warmup(n) + n {
		start := time.Now()
		if _, err := req.Request(baseCoreSubject, payload, b.timeout); err != nil {
			return summary{}, fmt.Errorf("core request: %w", err)
		}
		if i >= warmup(n) {
			s.add(time.Since(start))
		}
	}
	sum := s.summary()
	sum.cpu = cpu.per(warmup(n) + n)
	sum.msgs = cpu.msgsPer(warmup(n) + n)
	return sum, nil
}

// jsRig is a work-queue stream with one pull consumer whose handler acks
// each message and answers it on the inbox its header names.
type jsRig struct {
	client   *nats.Conn
	js       jetstream.JetStream
	worker   *nats.Conn
	consumer jetstream.ConsumeContext
	inbox    string
	replies  *nats.Subscription
	timeout  time.Duration // bounds one round trip
}

func (b baselines) openJS(ctx context.Context) (*jsRig, error) {
	r := &jsRig{timeout: b.timeout}
	var err error
	if r.client, err = nats.Connect(b.url, nats.Name("fleetbench-js-client")); err != nil {
		return nil, err
	}
	if r.worker, err = nats.Connect(b.url, nats.Name("fleetbench-js-worker")); err != nil {
		r.close()
		return nil, err
	}
	if r.js, err = jetstream.New(r.client); err != nil {
		r.close()
		return nil, err
	}
	if _, err := r.js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:      baseStream,
		Subjects:  []string{baseSubjects},
		Retention: jetstream.WorkQueuePolicy,
		Storage:   jetstream.FileStorage,
	}); err != nil {
		r.close()
		return nil, fmt.Errorf("baseline stream: %w", err)
	}
	wjs, err := jetstream.New(r.worker)
	if err != nil {
		r.close()
		return nil, err
	}
	cons, err := wjs.CreateOrUpdateConsumer(ctx, baseStream, jetstream.ConsumerConfig{
		Durable:       baseConsumer,
		FilterSubject: baseTaskSubject,
		AckPolicy:     jetstream.AckExplicitPolicy,
	})
	if err != nil {
		r.close()
		return nil, fmt.Errorf("baseline consumer: %w", err)
	}
	worker := r.worker
	r.consumer, err = cons.Consume(func(m jetstream.Msg) {
		m.Ack()
		worker.Publish(m.Headers().Get(baseReplyHeader), m.Data())
	}, jetstream.PullMaxMessages(64))
	if err != nil {
		r.close()
		return nil, fmt.Errorf("baseline consume: %w", err)
	}
	r.inbox = r.client.NewInbox()
	if r.replies, err = r.client.SubscribeSync(r.inbox); err != nil {
		r.close()
		return nil, err
	}
	if err := r.client.Flush(); err != nil {
		r.close()
		return nil, err
	}
	return r, nil
}

func (r *jsRig) close() {
	if r.consumer != nil {
		r.consumer.Stop()
	}
	if r.worker != nil {
		r.worker.Close()
	}
	if r.client != nil {
		r.client.Close()
	}
}

func (r *jsRig) task(payload []byte) *nats.Msg {
	m := nats.NewMsg(baseTaskSubject)
	m.Data = payload
	m.Header.Set(baseReplyHeader, r.inbox)
	return m
}

// roundTrip is n sequential tasks: publish (waiting for the stream's ack),
// then wait for the answer.
func (r *jsRig) roundTrip(ctx context.Context, n int) (summary, error) {
	payload := make([]byte, basePayload)
	var s samples
	cpu := startCPU()
	for i := range warmup(n) + n {
		start := time.Now()
		if _, err := r.js.PublishMsg(ctx, r.task(payload)); err != nil {
			return summary{}, fmt.Errorf("baseline publish: %w", err)
		}
		if _, err := r.replies.NextMsg(r.timeout); err != nil {
			return summary{}, fmt.Errorf("baseline reply: %w", err)
		}
		if i >= warmup(n) {
			s.add(time.Since(start))
		}
	}
	sum := s.summary()
	sum.cpu = cpu.per(warmup(n) + n)
	sum.msgs = cpu.msgsPer(warmup(n) + n)
	return sum, nil
}

// fanOut is n rounds of fanout tasks published asynchronously, each round
// ending when every publish is acknowledged and every answer is in.
func (r *jsRig) fanOut(n, fanout int) (summary, error) {
	payload := make([]byte, basePayload)
	var s samples
	futures := make([]jetstream.PubAckFuture, fanout)
	cpu := startCPU()
	for i := range warmup(n) + n {
		start := time.Now()
		for j := range futures {
			f, err := r.js.PublishMsgAsync(r.task(payload))
			if err != nil {
				return summary{}, fmt.Errorf("baseline async publish: %w", err)
			}
			futures[j] = f
		}
		for range fanout {
			if _, err := r.replies.NextMsg(r.timeout); err != nil {
				return summary{}, fmt.Errorf("baseline reply: %w", err)
			}
		}
		for _, f := range futures {
			select {
			case <-f.Ok():
			case err := <-f.Err():
				return summary{}, fmt.Errorf("baseline async publish: %w", err)
			case <-time.After(r.timeout):
				return summary{}, errors.New("baseline async publish: no ack")
			}
		}
		if i >= warmup(n) {
			s.add(time.Since(start))
		}
	}
	sum := s.summary()
	sum.cpu = cpu.per((warmup(n) + n) * fanout)
	sum.msgs = cpu.msgsPer((warmup(n) + n) * fanout)
	return sum, nil
}

// warmup is how many unrecorded iterations precede n recorded ones.
func warmup(n int) int { return max(n/10, 1) }
