package schema_test

import (
	"sort"
	"testing"

	"github.com/toolfleet/toolfleet/pkg/schema"
)

// validateBoth runs Validate on args and ValidateObject on their parsed
// object, and fails if they disagree.
func validateBoth(t *testing.T, s *schema.Schema, args []byte) {
	t.Helper()
	errText := func(err error) string {
		if err == nil {
			return ""
		}
		return err.Error()
	}
	want := errText(s.Validate(args))
	obj, err := schema.ParseObject(args)
	if err != nil {
		if want == "" {
			t.Fatalf("Validate accepted %q, which ParseObject refuses: %v", args, err)
		}
		return
	}
	if got := errText(s.ValidateObject(obj)); sameParts(got) != sameParts(want) {
		t.Fatalf("ValidateObject(%q) = %q, Validate = %q", args, got, want)
	}
}

// sameParts normalises a validation message for comparison. The validator
// lists problems (and the properties within one problem) in map order, so
// two runs of Validate on the same arguments may word one message in
// different orders: compare the message's sorted runes. A message cut at
// MaxMessageLen may end anywhere, so only its being an error counts then.
func sameParts(msg string) string {
	if len(msg) >= schema.MaxMessageLen {
		return "(long error)"
	}
	r := []rune(msg)
	sort.Slice(r, func(i, j int) bool { return r[i] < r[j] })
	return string(r)
}

func TestValidateObjectAgreesWithValidate(t *testing.T) {
	s, err := schema.Compile("bench", []byte(richSchema))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args  string
		valid bool
	}{
		{`{"path":"/tmp/a","mode":"append"}`, true},
		{`{"path":"/tmp/a","mode":"append","retries":1.0}`, true},
		{`{"path":"","mode":"truncate","lines":[1,2],"retries":99}`, false},
		{`{"path":"/tmp/a","mode":"append","retries":true}`, false},
		{`{"path":"/tmp/a","mode":"append","extra":1}`, false},
		{`{}`, false},
	} {
		t.Run(tc.args, func(t *testing.T) {
			obj, err := schema.ParseObject([]byte(tc.args))
			if err != nil {
				t.Fatal(err)
			}
			if err := s.ValidateObject(obj); (err == nil) != tc.valid {
				t.Fatalf("ValidateObject = %v, want valid=%v", err, tc.valid)
			}
			validateBoth(t, s, []byte(tc.args))
		})
	}
}

// FuzzValidateObject checks that ValidateObject on parsed arguments gives
// Validate's answer.
func FuzzValidateObject(f *testing.F) {
	for _, s := range []string{`{"path":"a","mode":"append"}`, `{"mode":"x"}`, `{"lines":[1]}`, `[]`, `{`} {
		f.Add([]byte(s))
	}
	s, err := schema.Compile("bench", []byte(richSchema))
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, args []byte) { validateBoth(t, s, args) })
}
