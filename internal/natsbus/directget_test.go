package natsbus_test

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolfleet/toolfleet/internal/embedded"
	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/internal/natsbus/bustest"
	"github.com/toolfleet/toolfleet/internal/natstest"
)

// directStream starts a server and creates on it the stream T, on t.>,
// which allows direct gets; it returns the server and a connection to it.
func directStream(t *testing.T) (*embedded.Server, *nats.Conn, jetstream.JetStream) {
	t.Helper()
	srv := natstest.Start(t)
	nc := natstest.Connect(t, srv)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(bustest.Ctx(t), jetstream.StreamConfig{Name: "T", Subjects: []string{"t.>"}, AllowDirect: true}); err != nil {
		t.Fatal(err)
	}
	return srv, nc, js
}

// TestDirectReaderReadsWithoutConsumers: batches of a subject from a
// sequence on, all of it past several batches in order, and the last of
// each of some subjects — and the stream has no consumer after.
func TestDirectReaderReadsWithoutConsumers(t *testing.T) {
	_, _, js := directStream(t)
	const n = 600
	for i := 1; i <= n; i++ {
		subj := fmt.Sprintf("t.a.%d", i%3)
		if _, err := js.Publish(bustest.Ctx(t), subj, []byte(fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := js.Publish(bustest.Ctx(t), "t.b", []byte("b")); err != nil {
		t.Fatal(err)
	}
	r := natsbus.NewDirectReader(js)

	b, err := r.Next(bustest.Ctx(t), "T", "t.a.>", 10, 5)
	if err != nil {
		t.Fatal(err)
	}
	if len(b.Msgs) != 5 || b.Msgs[0].Seq != 10 || string(b.Msgs[4].Data) != "14" || b.Pending != n-14 {
		t.Fatalf("batch from 10: %d messages, first seq %d, pending %d; want 5 from 10, pending %d", len(b.Msgs), b.Msgs[0].Seq, b.Pending, n-14)
	}
	if b.Msgs[0].Subject != "t.a.1" || b.Msgs[0].Stored.IsZero() {
		t.Fatalf("message %+v: want subject t.a.1 and its time", b.Msgs[0])
	}

	var got []string
	truncated, err := r.All(bustest.Ctx(t), "T", "t.a.2", 0, 0, func(m natsbus.DirectMsg) bool {
		got = append(got, string(m.Data))
		return true
	})
	if err != nil || truncated || len(got) != n/3 || got[0] != "2" || got[len(got)-1] != "599" {
		t.Fatalf("All: %d messages (%v..), truncated %v, err %v; want %d from 2 to 599", len(got), got[:min(3, len(got))], truncated, err, n/3)
	}
	truncated, err = r.All(bustest.Ctx(t), "T", "t.>", 0, 300, func(natsbus.DirectMsg) bool { return true })
	if err != nil || !truncated {
		t.Fatalf("All with limit 300 of %d: truncated %v, err %v; want truncated", n+1, truncated, err)
	}

	last, err := r.LastOf(bustest.Ctx(t), "T", "t.a.*", "t.b")
	if err != nil {
		t.Fatal(err)
	}
	var lastData []string
	for _, m := range last {
		lastData = append(lastData, m.Subject+"="+string(m.Data))
	}
	if fmt.Sprint(lastData) != "[t.a.1=598 t.a.2=599 t.a.0=600 t.b=b]" {
		t.Fatalf("LastOf: %v", lastData)
	}

	if b, err := r.Next(bustest.Ctx(t), "T", "t.none", 0, 10); err != nil || len(b.Msgs) != 0 {
		t.Fatalf("a subject with no message: %d messages, err %v; want none", len(b.Msgs), err)
	}
	if info, err := js.Stream(bustest.Ctx(t), "T"); err != nil || info.CachedInfo().State.Consumers != 0 {
		t.Fatalf("consumers: %v, %v; want none", info.CachedInfo().State.Consumers, err)
	}
}

// TestDirectReaderSkipsReflectedAnswers: a direct get's answer that a
// stream stored (its reply subject pointed there) is marked Reflected and
// skipped by All, and its stored headers are kept apart from the
// server's; a message stored with headers of its own reads with them.
func TestDirectReaderSkipsReflectedAnswers(t *testing.T) {
	_, nc, js := directStream(t)
	m := nats.NewMsg("t.x")
	m.Data = []byte("one")
	m.Header.Set("Who", "me")
	if _, err := js.PublishMsg(bustest.Ctx(t), m); err != nil {
		t.Fatal(err)
	}
	// The server's answer to a direct get of message 1, sent to t.x.
	if err := nc.PublishRequest("$JS.API.DIRECT.GET.T", "t.x", []byte(`{"seq":1}`)); err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, 5e9, func() error {
		if info, err := js.Stream(bustest.Ctx(t), "T"); err != nil || info.CachedInfo().State.Msgs != 2 {
			return fmt.Errorf("the answer is not stored yet (%v)", err)
		}
		return nil
	})
	r := natsbus.NewDirectReader(js)
	b, err := r.Next(bustest.Ctx(t), "T", "t.x", 0, 10)
	if err != nil || len(b.Msgs) != 2 {
		t.Fatalf("%d messages, err %v; want 2", len(b.Msgs), err)
	}
	if b.Msgs[0].Reflected || b.Msgs[0].Header.Get("Who") != "me" || b.Msgs[0].Header.Get("Nats-Sequence") != "" {
		t.Fatalf("the published message: %+v", b.Msgs[0])
	}
	if !b.Msgs[1].Reflected || b.Msgs[1].Seq != 2 {
		t.Fatalf("the stored answer: %+v, want Reflected at seq 2", b.Msgs[1])
	}
	var read []uint64
	if _, err := r.All(bustest.Ctx(t), "T", "t.x", 0, 0, func(m natsbus.DirectMsg) bool { read = append(read, m.Seq); return true }); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(read) != "[1]" {
		t.Fatalf("All read %v, want [1]: the reflected answer skipped", read)
	}
}

// TestDirectReaderStreamWithoutDirectGets: a stream that allows no direct
// get answers nothing, and the read fails (no responders) rather than
// reading empty.
func TestDirectReaderStreamWithoutDirectGets(t *testing.T) {
	srv := natstest.Start(t)
	nc := natstest.Connect(t, srv)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(bustest.Ctx(t), jetstream.StreamConfig{Name: "N", Subjects: []string{"n.>"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := natsbus.NewDirectReader(js).Next(bustest.Ctx(t), "N", "n.>", 0, 1); err == nil {
		t.Fatal("a direct get of a stream without direct gets succeeded")
	}
}

// TestDirectReaderRawHeaderBlocks: a peer that writes the protocol itself
// stores messages whose header blocks no client library writes — lines
// ended by a bare LF, an empty line before the end, the server's own
// header names with forged values. A direct get of each reads the
// subject, sequence and body the server stored it with, or, where nats.go
// cannot read the answer's headers (an empty line before the server's),
// fails with ErrDirectAnswer: it never reads a forged subject or sequence.
func TestDirectReaderRawHeaderBlocks(t *testing.T) {
	srv, _, js := directStream(t)
	if _, err := js.Publish(bustest.Ctx(t), "t.real", []byte("real")); err != nil {
		t.Fatal(err)
	}
	blocks := []struct {
		hdr      string
		readable bool
	}{
		{"NATS/1.0\n\n\r\n\r\n", true},
		{"NATS/1.0\r\nNats-Sequence: 1\r\nNats-Subject: t.real\r\nNats-Time-Stamp: 2020-01-01T00:00:00Z\r\nNats-Stream: T\n\r\n", true},
		{"NATS/1.0\r\nNats-Sequence: 1\r\n\n\r\n", false},
		{"NATS/1.0\r\nNats-Sequence: 1\r\nNats-Subject: t.real\r\nNats-Time-Stamp: 2020-01-01T00:00:00Z\r\nNats-Stream: T\r\n\n\r\n", false},
	}
	raw, err := net.Dial("tcp", strings.TrimPrefix(srv.ClientURL(), "nats://"))
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	r := bufio.NewReader(raw)
	if _, err := r.ReadString('\n'); err != nil { // INFO
		t.Fatal(err)
	}
	fmt.Fprint(raw, "CONNECT {\"verbose\":false,\"headers\":true,\"protocol\":1}\r\n")
	for _, b := range blocks {
		fmt.Fprintf(raw, "HPUB t.raw %d %d\r\n%sbody\r\n", len(b.hdr), len(b.hdr)+4, b.hdr)
	}
	fmt.Fprint(raw, "PING\r\n")
	if line, err := r.ReadString('\n'); err != nil || line != "PONG\r\n" {
		t.Fatalf("the server answered %q, %v", line, err)
	}
	// The PONG says the server read the publishes; the stream stores them
	// on its own goroutine, so wait until it has.
	want := uint64(len(blocks) + 1)
	for deadline := time.Now().Add(10 * time.Second); ; {
		info, err := js.Stream(bustest.Ctx(t), "T")
		if err == nil && info.CachedInfo().State.LastSeq >= want {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the stream did not store the %d raw messages within 10s (%v)", len(blocks), err)
		}
		time.Sleep(5 * time.Millisecond) // polling the server, not synchronising
	}
	rd := natsbus.NewDirectReader(js)
	for i, b := range blocks {
		seq := uint64(i + 2)
		got, err := rd.Next(bustest.Ctx(t), "T", "t.raw", seq, 1)
		switch {
		case !b.readable && !errors.Is(err, natsbus.ErrDirectAnswer):
			t.Errorf("block %q: %+v, %v; want ErrDirectAnswer", b.hdr, got.Msgs, err)
		case b.readable && err != nil:
			t.Errorf("block %q: %v", b.hdr, err)
		case b.readable && (len(got.Msgs) != 1 || got.Msgs[0].Subject != "t.raw" || got.Msgs[0].Seq != seq || string(got.Msgs[0].Data) != "body"):
			t.Errorf("block %q read as %+v, want t.raw at %d with its body", b.hdr, got.Msgs, seq)
		}
	}
}
