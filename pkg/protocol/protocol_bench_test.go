package protocol

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// benchCall is a call as the coordinator publishes it for the echo tool: a
// 128-byte text argument.
func benchCall() Call {
	return Call{
		V: Version, RunID: NewRunID(), Round: 1, CallKey: NewCallKey(), CallID: "call_abc123",
		Tool: "echo", Arguments: json.RawMessage(`{"text":"` + strings.Repeat("x", 128) + `"}`),
		Deadline: time.Now().Add(30 * time.Second).UTC(), Attempt: 1, MaxOutputChars: 12000,
	}
}

func benchResult() Result {
	return Result{
		V: Version, RunID: NewRunID(), CallKey: NewCallKey(), Outcome: OutcomeOK,
		Output: strings.Repeat("x", 128), DurationMS: 1, Worker: "worker-1", Attempt: 1,
	}
}

func BenchmarkEncodeCall(b *testing.B) {
	c := benchCall()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Encode(&c); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeCall(b *testing.B) {
	c := benchCall()
	data, _ := Encode(&c)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeCall(data, 0); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkEncodeResult(b *testing.B) {
	r := benchResult()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Encode(&r); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeResult(b *testing.B) {
	r := benchResult()
	data, _ := Encode(&r)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeResult(data, 0); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeStarted(b *testing.B) {
	p := Started{V: Version, RunID: NewRunID(), CallKey: NewCallKey(), Worker: "worker-1", Attempt: 1}
	data, _ := Encode(&p)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeStarted(data, 0); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkValidToken(b *testing.B) {
	id := NewID()
	b.ReportAllocs()
	for b.Loop() {
		if !ValidToken(id) {
			b.Fatal("NewID is not a valid token")
		}
	}
}

func BenchmarkTruncate(b *testing.B) {
	for _, bc := range []struct {
		name string
		s    string
		max  int
	}{
		{"fits/128B", strings.Repeat("x", 128), 12000},
		{"cut/ascii-100k-to-12000", strings.Repeat("x", 100_000), 12000},
		{"cut/multibyte-100k-to-12000", strings.Repeat("é", 50_000), 12000},
		{"fits/multibyte-8000", strings.Repeat("é", 8000), 12000},
		{"invalid-utf8/10k", strings.Repeat("x\xff", 5000), 12000},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.SetBytes(int64(len(bc.s)))
			b.ReportAllocs()
			for b.Loop() {
				Truncate(bc.s, bc.max)
			}
		})
	}
}

func BenchmarkDigest(b *testing.B) {
	run, key := NewRunID(), NewCallKey()
	args := []byte(`{"path": "/tmp/report.txt", "mode": "overwrite", "content": "` + strings.Repeat("y", 200) + `"}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Digest(run, key, "write_file", args); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkArgsDigest(b *testing.B) {
	args := []byte(`{"text":"` + strings.Repeat("x", 128) + `"}`)
	b.ReportAllocs()
	for b.Loop() {
		ArgsDigest(args)
	}
}

func BenchmarkCanonical(b *testing.B) {
	doc := []byte(`{"z": 1, "a": {"y": [1, 2.50, "three"], "b": null}, "text": "` + strings.Repeat("x", 128) + `"}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Canonical(doc); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSubjectResult is a result subject as both ends of every call
// build it: the coordinator for the call's reply-to header, the worker to
// check that header.
func BenchmarkSubjectResult(b *testing.B) {
	var s Subjects
	run, tool := NewRunID(), ToolName("echo")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.Result(run, tool); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkParseCall is the worker's check of a delivered call's subject.
func BenchmarkParseCall(b *testing.B) {
	var s Subjects
	subject, err := s.Call("echo", ClassInteractive, "acme")
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, _, _, ok := s.ParseCall(subject); !ok {
			b.Fatalf("ParseCall(%q) refused its own subject", subject)
		}
	}
}

// BenchmarkResultBatchBytes is a worker's sizing of a batch of results,
// which it does again for every result it adds to the batch.
func BenchmarkResultBatchBytes(b *testing.B) {
	run := NewRunID()
	b.ReportAllocs()
	for b.Loop() {
		if ResultBatchBytes(run, 8, 4096) <= 4096 {
			b.Fatal("a batch is larger than its results")
		}
	}
}
