package protocol

import (
	"errors"
	"strings"
	"testing"
)

// badTokens are strings no subject token may be: each would change a
// subject's shape (a '.', a wildcard, whitespace) or break its bounds.
var badTokens = []string{"", "a.b", "*", ">", "a b", "a\n", "é", "\x00", strings.Repeat("a", 65)}

// TestParseIDsRefuseBadTokens holds the named conversions from text to an
// id type to the token rule: they are the only way a string becomes a
// ToolName, RunID or CallKey outside a decoder.
func TestParseIDsRefuseBadTokens(t *testing.T) {
	parsers := map[string]func(string) (string, error){
		"tool": func(s string) (string, error) { v, err := ParseToolName(s); return string(v), err },
		"run_id": func(s string) (string, error) {
			v, err := ParseRunID(s)
			return string(v), err
		},
		"call_key": func(s string) (string, error) {
			v, err := ParseCallKey(s)
			return string(v), err
		},
	}
	for field, parse := range parsers {
		t.Run(field, func(t *testing.T) {
			for _, good := range []string{"a", "calc_2-x", NewID(), strings.Repeat("z", 64)} {
				if got, err := parse(good); err != nil || got != good {
					t.Errorf("parse(%q) = %q, %v; want it unchanged", good, got, err)
				}
			}
			for _, bad := range badTokens {
				got, err := parse(bad)
				var pe *Error
				if !errors.As(err, &pe) || !errors.Is(err, ErrInvalidField) || pe.Field != field || got != "" {
					t.Errorf("parse(%q) = %q, %v; want an invalid_field error naming %s", bad, got, err, field)
				}
			}
		})
	}
	if !NewRunID().Valid() || !NewCallKey().Valid() {
		t.Fatal("NewRunID or NewCallKey made an invalid token")
	}
}

// TestSubjectBuildersRefuseBadTokens checks that every builder taking an
// id checks it again: a string converted to RunID, CallKey or ToolName
// without its Parse function still cannot make a subject. (That no builder
// takes a CallID is a compile-time property, stated on [Subjects].)
func TestSubjectBuildersRefuseBadTokens(t *testing.T) {
	var s Subjects
	const run, key, tool = RunID("r1"), CallKey("k1"), ToolName("calc")
	builders := map[string]func(bad string) (string, error){
		"Call":             func(b string) (string, error) { return s.Call(ToolName(b), ClassInteractive, "acme") },
		"Call/client":      func(b string) (string, error) { return s.Call(tool, ClassBatch, b) },
		"CallsOf":          func(b string) (string, error) { return s.CallsOf(ToolName(b), ClassBatch) },
		"ClassConsumer":    func(b string) (string, error) { return s.ClassConsumer(ToolName(b), ClassBatch) },
		"ToolInfo":         func(b string) (string, error) { return s.ToolInfo(ToolName(b)) },
		"Consumer":         func(b string) (string, error) { return s.Consumer(ToolName(b)) },
		"Result/run":       func(b string) (string, error) { return s.Result(RunID(b), tool) },
		"Result/tool":      func(b string) (string, error) { return s.Result(run, ToolName(b)) },
		"ResultsOf":        func(b string) (string, error) { return s.ResultsOf(RunID(b)) },
		"Started":          func(b string) (string, error) { return s.Started(RunID(b)) },
		"Cancel/run":       func(b string) (string, error) { return s.Cancel(RunID(b), key) },
		"Cancel/key":       func(b string) (string, error) { return s.Cancel(run, CallKey(b)) },
		"ApprovalRequest":  func(b string) (string, error) { return s.ApprovalRequest(run, CallKey(b)) },
		"ApprovalDecision": func(b string) (string, error) { return s.ApprovalDecision(RunID(b), key) },
		"ApprovalOutcome":  func(b string) (string, error) { return s.ApprovalOutcome(run, CallKey(b)) },
		"RunSubmission":    func(b string) (string, error) { return s.RunSubmission("alice", "default", b) },
		"RunResult":        func(b string) (string, error) { return s.RunResult(RunID(b)) },
		"ClientRunResult":  func(b string) (string, error) { return s.ClientRunResult("alice", RunID(b)) },
		"Journal":          func(b string) (string, error) { return s.Journal(RunID(b)) },
		"JournalCancel":    func(b string) (string, error) { return s.JournalCancel(RunID(b)) },
	}
	for name, build := range builders {
		t.Run(name, func(t *testing.T) {
			if _, err := build("good"); err != nil {
				t.Fatalf("valid token refused: %v", err)
			}
			for _, bad := range badTokens {
				if subj, err := build(bad); !errors.Is(err, ErrInvalidField) || subj != "" {
					t.Errorf("%s(%q) = %q, %v; want invalid_field", name, bad, subj, err)
				}
			}
		})
	}
}
