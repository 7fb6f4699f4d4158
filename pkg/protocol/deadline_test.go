package protocol

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

func TestCallTimeout(t *testing.T) {
	own := &ToolSpec{TimeoutMS: 1500}
	none := &ToolSpec{}
	for _, tc := range []struct {
		name     string
		spec     *ToolSpec
		override time.Duration
		want     time.Duration
	}{
		{"the tool's own", own, 0, 1500 * time.Millisecond},
		{"override wins", own, 4 * time.Second, 4 * time.Second},
		{"default", none, 0, DefaultToolTimeout},
		{"no spec", nil, 0, DefaultToolTimeout},
		{"override without own", none, time.Second, time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := CallTimeout(tc.spec, tc.override); got != tc.want {
				t.Fatalf("CallTimeout = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestCallDeadline(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	d := NewCallDeadline(now, 2*time.Second, 0)
	if !d.At.Equal(now.Add(2*time.Second)) || d.GraceOrDefault() != DefaultCallGrace {
		t.Fatalf("NewCallDeadline = %+v, want now+2s with the default grace", d)
	}
	if got, want := d.ResultBy(), d.At.Add(DefaultCallGrace); !got.Equal(want) {
		t.Fatalf("ResultBy = %v, want %v", got, want)
	}
	long := NewCallDeadline(now, 2*time.Second, 7*time.Second)
	if got, want := long.ResultBy(), now.Add(9*time.Second); !got.Equal(want) {
		t.Fatalf("ResultBy with grace 7s = %v, want %v", got, want)
	}
	if d.Expired(d.At.Add(-time.Nanosecond)) || !d.Expired(d.At) || !d.Expired(d.At.Add(time.Second)) {
		t.Fatal("Expired must turn true exactly at At")
	}

	// On the wire: the grace travels in grace_ms, omitted when default.
	for _, tc := range []struct {
		name    string
		grace   time.Duration
		wantMS  int64
		wantDur time.Duration
	}{
		{"default omitted", 0, 0, DefaultCallGrace},
		{"default spelled out omitted", DefaultCallGrace, 0, DefaultCallGrace},
		{"other grace carried", 3 * time.Second, 3000, 3 * time.Second},
		{"sub-millisecond rounds up", time.Microsecond, 1, time.Millisecond},
		{"clamped", 2 * MaxCallGrace, MaxCallGrace.Milliseconds(), MaxCallGrace},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Call{V: Version, RunID: "r", Round: 1, CallKey: "k", Tool: "t", Arguments: json.RawMessage(`{}`), Attempt: 1}
			c.SetCallDeadline(NewCallDeadline(now, time.Second, tc.grace))
			if c.GraceMS != tc.wantMS || !c.Deadline.Equal(now.Add(time.Second)) {
				t.Fatalf("GraceMS = %d, Deadline %v; want %d, now+1s", c.GraceMS, c.Deadline, tc.wantMS)
			}
			data, err := Encode(&c)
			if err != nil {
				t.Fatal(err)
			}
			if has := strings.Contains(string(data), `"grace_ms"`); has != (tc.wantMS != 0) {
				t.Fatalf("encoded %s: grace_ms present = %v, want %v", data, has, tc.wantMS != 0)
			}
			back, err := DecodeCall(data, 0)
			if err != nil {
				t.Fatal(err)
			}
			if got := back.CallDeadline(); got.GraceOrDefault() != tc.wantDur || !got.At.Equal(c.Deadline) {
				t.Fatalf("decoded deadline %+v, want grace %v", got, tc.wantDur)
			}
		})
	}
}

func TestCallGraceValidated(t *testing.T) {
	base := `{"v":1,"run_id":"r","round":1,"call_key":"k","tool":"t","arguments":{},"deadline":"2026-01-02T03:04:05Z","attempt":1`
	for _, tc := range []struct {
		name, tail string
		ok         bool
	}{
		{"absent", `}`, true},
		{"zero", `,"grace_ms":0}`, true},
		{"set", `,"grace_ms":2500}`, true},
		{"negative", `,"grace_ms":-1}`, false},
		{"past the maximum", `,"grace_ms":3600001}`, false},
		{"not a number", `,"grace_ms":"1s"}`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeCall([]byte(base+tc.tail), 0)
			if (err == nil) != tc.ok {
				t.Fatalf("DecodeCall err = %v, want ok=%v", err, tc.ok)
			}
		})
	}
}

func TestCallDeadlineTighten(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	d := CallDeadline{At: at, Grace: time.Second}
	earlier := d
	earlier.At = at.Add(-time.Minute)
	for _, tc := range []struct {
		name, header string
		want         time.Time
		wantErr      bool
	}{
		{"no header", "", at, false},
		{"its own header", d.Header(), at, false},
		{"earlier header wins", earlier.Header(), at.Add(-time.Minute), false},
		{"later header ignored", CallDeadline{At: at.Add(time.Hour)}.Header(), at, false},
		{"garbage", "tomorrow", at, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := d.Tighten(tc.header)
			if (err != nil) != tc.wantErr || !errors.Is(err, ErrInvalidField) && tc.wantErr {
				t.Fatalf("Tighten err = %v, want error %v", err, tc.wantErr)
			}
			if !got.At.Equal(tc.want) || got.Grace != d.Grace {
				t.Fatalf("Tighten = %+v, want At %v and the grace kept", got, tc.want)
			}
		})
	}
}

func TestOutputLimit(t *testing.T) {
	for _, tc := range []struct{ asked, own, want int }{
		{0, 100, 100}, {20, 100, 20}, {1000, 100, 100}, {100, 100, 100},
	} {
		if got := OutputLimit(tc.asked, tc.own); got != tc.want {
			t.Errorf("OutputLimit(%d, %d) = %d, want %d", tc.asked, tc.own, got, tc.want)
		}
	}
}

// TestDefaultOutputFitsAResult holds the derivation of DefaultMaxOutputChars:
// an output of that many runes, each of the widest JSON encoding, fits a
// result of DefaultMaxMessageBytes with ids of the longest valid length,
// so EncodeResultWithin never cuts a default-bounded output.
func TestDefaultOutputFitsAResult(t *testing.T) {
	if MaxOutputCharsWithin(DefaultMaxMessageBytes) < DefaultMaxOutputChars {
		t.Fatalf("MaxOutputCharsWithin(%d) = %d < DefaultMaxOutputChars %d",
			DefaultMaxMessageBytes, MaxOutputCharsWithin(DefaultMaxMessageBytes), DefaultMaxOutputChars)
	}
	if DefaultMaxObservationChars > DefaultMaxOutputChars {
		t.Fatalf("the coordinator's default bound %d is past the worker's %d", DefaultMaxObservationChars, DefaultMaxOutputChars)
	}
	long := strings.Repeat("x", 64)
	for _, widest := range []string{"\x01", "\u2028", "\U0001F600"} {
		r := Result{V: Version, RunID: RunID(long), CallKey: CallKey(long), Outcome: OutcomeOK,
			Output: strings.Repeat(widest, DefaultMaxOutputChars), ErrorType: strings.Repeat("e", 128),
			Worker: strings.Repeat("w", 256), DurationMS: 1 << 40, Attempt: 1 << 30}
		data, err := EncodeResultWithin(&r, DefaultMaxMessageBytes)
		if err != nil || r.Truncated || utf8.RuneCountInString(r.Output) != DefaultMaxOutputChars {
			t.Fatalf("%q: %d bytes, truncated %v, err %v; want it to fit uncut", widest, len(data), r.Truncated, err)
		}
	}
}

func TestEncodeResultWithinFitsTheLimit(t *testing.T) {
	tests := []struct {
		name   string
		output string
		limit  int
		cut    bool
	}{
		{"fits", "hello", 1024, false},
		{"ascii too long", strings.Repeat("a", 10_000), 2048, true},
		{"escapes expand", strings.Repeat("\x01", 5_000), 4096, true},
		{"multibyte", strings.Repeat("é", 5_000), 4096, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := Result{V: 1, RunID: "r", CallKey: "k", Outcome: OutcomeOK, Output: tc.output}
			data, err := EncodeResultWithin(&r, tc.limit)
			if err != nil {
				t.Fatalf("EncodeResultWithin: %v", err)
			}
			if len(data) > tc.limit {
				t.Fatalf("encoded %d bytes, limit %d", len(data), tc.limit)
			}
			back, err := DecodeResult(data, tc.limit)
			if err != nil {
				t.Fatalf("does not decode: %v", err)
			}
			if back.Truncated != tc.cut || !utf8.ValidString(back.Output) {
				t.Fatalf("Truncated = %v (valid UTF-8 %v), want %v", back.Truncated, utf8.ValidString(back.Output), tc.cut)
			}
			if tc.cut && !strings.HasSuffix(back.Output, TruncationMarker) {
				t.Fatalf("cut output lacks the truncation marker")
			}
		})
	}
}

// FuzzCallDeadlineTighten checks that a deadline header, whatever it
// holds, can only bring a call's deadline earlier and never changes its
// grace.
func FuzzCallDeadlineTighten(f *testing.F) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, s := range []string{"", "2026-01-02T03:04:05Z", "2026-01-02T03:04:04.999999999Z", "9999-12-31T23:59:59Z", "0001-01-01T00:00:00Z", "x", "2026-01-02T03:04:05+99:00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, header string) {
		d := CallDeadline{At: at, Grace: 3 * time.Second}
		got, err := d.Tighten(header)
		if err != nil {
			if got != d {
				t.Fatalf("Tighten(%q) failed and changed the deadline to %+v", header, got)
			}
			return
		}
		if got.At.After(d.At) || got.Grace != d.Grace {
			t.Fatalf("Tighten(%q) = %+v, from %+v: later or another grace", header, got, d)
		}
	})
}
