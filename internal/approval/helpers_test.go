package approval

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/internal/testsync"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// startServer runs a JetStream server on a random loopback port with its
// store in t.TempDir().
func startServer(t testing.TB) *server.Server {
	t.Helper()
	s, err := server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: server.RANDOM_PORT, JetStream: true,
		StoreDir: t.TempDir(), NoLog: true, NoSigs: true,
	})
	if err != nil {
		t.Fatalf("NewServer: %v", err)
	}
	s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	return s
}

// connect opens a client connection to s, closed when the test ends.
func connect(t testing.TB, s *server.Server, opts ...nats.Option) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect(s.ClientURL(), append([]nats.Option{nats.Name(t.Name())}, opts...)...)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("jetstream.New: %v", err)
	}
	return nc, js
}

// ensureStream creates the approvals stream as the fleet does.
func ensureStream(t testing.TB, js jetstream.JetStream) jetstream.Stream {
	t.Helper()
	var s protocol.Subjects
	if err := natsbus.EnsureStreams(context.Background(), js, s, natsbus.StreamConfig{}); err != nil {
		t.Fatalf("creating the fleet's streams: %v", err)
	}
	st, err := js.Stream(context.Background(), s.ApprovalsStream())
	if err != nil {
		t.Fatalf("the approvals stream: %v", err)
	}
	return st
}

// fixture is a server with the approvals stream, a coordinator connection
// running the gate and an operator connection.
type fixture struct {
	srv    *server.Server
	nc     *nats.Conn
	js     jetstream.JetStream
	op     *nats.Conn
	stream jetstream.Stream
	logs   *testsync.Buffer
	gate   *Gate
}

func newFixture(t testing.TB, cfg GateConfig) *fixture {
	t.Helper()
	f := &fixture{srv: startServer(t), logs: &testsync.Buffer{}}
	f.nc, f.js = connect(t, f.srv)
	f.op, _ = connect(t, f.srv)
	f.stream = ensureStream(t, f.js)
	cfg.Logger = zerolog.New(f.logs)
	f.gate = NewGate(f.nc, f.js, protocol.Subjects{}, cfg)
	return f
}

// watch subscribes the operator to approval requests and returns a channel
// of the decoded requests.
func (f *fixture) watch(t testing.TB) <-chan protocol.ApprovalRequest {
	t.Helper()
	ch := make(chan protocol.ApprovalRequest, 16)
	sub, err := f.op.Subscribe(protocol.Subjects{}.ApprovalRequests(), func(m *nats.Msg) {
		req, err := protocol.DecodeApprovalRequest(m.Data, 0)
		if err != nil {
			t.Errorf("operator got an undecodable request: %v", err)
			return
		}
		ch <- req
	})
	if err != nil {
		t.Fatalf("subscribe: %v", err)
	}
	if err := f.op.Flush(); err != nil {
		t.Fatalf("flush: %v", err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return ch
}

// decide publishes a decision for req from the operator connection.
func (f *fixture) decide(t testing.TB, req protocol.ApprovalRequest, d any) {
	t.Helper()
	data, ok := d.([]byte)
	if !ok {
		var err error
		if data, err = json.Marshal(d); err != nil {
			t.Fatal(err)
		}
	}
	subj, err := protocol.Subjects{}.ApprovalDecision(req.RunID, req.CallKey)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.op.Publish(subj, data); err != nil {
		t.Fatalf("publish decision: %v", err)
	}
	if err := f.op.Flush(); err != nil {
		t.Fatalf("flush: %v", err)
	}
}

type approveResult struct {
	d       loop.Decision
	err     error
	elapsed time.Duration
}

// approveAsync runs Approve in a goroutine.
func (f *fixture) approveAsync(ctx context.Context, req protocol.ApprovalRequest) <-chan approveResult {
	ch := make(chan approveResult, 1)
	go func() {
		start := time.Now()
		d, err := f.gate.Approve(ctx, req)
		ch <- approveResult{d, err, time.Since(start)}
	}()
	return ch
}

// newRequest builds a request for a fresh call key.
func newRequest(t testing.TB, run protocol.RunID, tool protocol.ToolName, args string, ttl time.Duration) protocol.ApprovalRequest {
	t.Helper()
	return protocol.ApprovalRequest{
		V: protocol.Version, RunID: run, CallKey: protocol.NewCallKey(), CallID: "call_1", Round: 1,
		Tool: tool, Arguments: json.RawMessage(args), Deadline: time.Now().Add(ttl),
	}
}

func digestOf(t testing.TB, req protocol.ApprovalRequest) string {
	t.Helper()
	d, err := protocol.Digest(req.RunID, req.CallKey, req.Tool, req.Arguments)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func recv[T any](t testing.TB, ch <-chan T, timeout time.Duration) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(timeout):
		var zero T
		t.Fatalf("nothing received within %v", timeout)
		return zero
	}
}

func ptr[T any](v T) *T { return &v }

// sansProof checks that an approval carries a proof of its decision (and a
// denial none) and returns d without it, for comparison.
func sansProof(t testing.TB, d loop.Decision) loop.Decision {
	t.Helper()
	if d.Approved != (d.Proof != nil) {
		t.Errorf("Decision %+v: an approval, and only one, carries a proof", d)
	}
	if d.Proof != nil && (d.Proof.RequestSeq == 0 || d.Proof.DecisionSeq <= d.Proof.RequestSeq) {
		t.Errorf("proof %+v: want a request sequence and a later decision sequence", *d.Proof)
	}
	d.Proof = nil
	return d
}
