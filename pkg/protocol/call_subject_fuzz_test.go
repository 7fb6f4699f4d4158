package protocol

import (
	"strings"
	"testing"
)

// FuzzParseCall: a subject ParseCall accepts is exactly the one Call
// builds from its tokens, under the prefix; anything else is refused.
func FuzzParseCall(f *testing.F) {
	for _, s := range []string{
		"fleet.call.echo.interactive.local", "fleet.call.echo.batch.acme", "fleet.call.echo",
		"fleet.call.echo.urgent.acme", "fleet.call.echo.batch.acme.x", "fleet.call..batch.acme",
		"fleet.call.*.batch.>", "other.call.echo.batch.acme", "fleet.call.e cho.batch.acme",
	} {
		f.Add("", s)
	}
	f.Add("tenant-1", "tenant-1.call.echo.interactive.a")
	f.Fuzz(func(t *testing.T, prefix, subject string) {
		s, err := NewSubjects(prefix)
		if err != nil {
			return
		}
		tool, class, client, ok := s.ParseCall(subject)
		if !ok {
			return
		}
		back, err := s.Call(tool, class, client)
		if err != nil || back != subject {
			t.Fatalf("ParseCall(%q) = %q %q %q, but Call gives %q (%v)", subject, tool, class, client, back, err)
		}
		if strings.ContainsAny(string(tool)+client, ".*> ") || !class.Valid() {
			t.Fatalf("ParseCall(%q) accepted tokens %q %q %q", subject, tool, class, client)
		}
	})
}

// FuzzParseClass: ParseClass accepts the two classes (and "" for the
// default) and nothing else.
func FuzzParseClass(f *testing.F) {
	for _, s := range []string{"", "interactive", "batch", "Batch", " batch", "urgent", "interactive\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := ParseClass(s)
		if err != nil {
			return
		}
		if !c.Valid() {
			t.Fatalf("ParseClass(%q) = %q, not a class", s, c)
		}
		if s != "" && s != string(c) {
			t.Fatalf("ParseClass(%q) = %q", s, c)
		}
	})
}
