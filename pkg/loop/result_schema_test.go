package loop_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// TestResultSchemaEnums holds docs/result.schema.json to the code: its
// outcome enums (a call's outcome, the metadata's outcome counts) are
// protocol.Outcomes and its termination reasons loop.TerminationReasons, so
// adding either without the schema fails here.
func TestResultSchemaEnums(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "docs", "result.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	var doc any
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	var outcomes []string
	for _, o := range protocol.Outcomes {
		outcomes = append(outcomes, string(o))
	}
	var reasons []string
	for _, r := range loop.TerminationReasons {
		reasons = append(reasons, string(r))
	}
	for _, c := range []struct {
		path []string
		want []string
	}{
		{[]string{"properties", "termination_reason", "enum"}, reasons},
		{[]string{"properties", "metadata", "properties", "outcomes", "propertyNames", "enum"}, outcomes},
		{[]string{"properties", "calls", "items", "properties", "outcome", "enum"}, outcomes},
	} {
		got := enumAt(t, doc, c.path)
		slices.Sort(got)
		want := slices.Sorted(slices.Values(c.want))
		if !slices.Equal(got, want) {
			t.Errorf("docs/result.schema.json %v = %v, want %v", c.path, got, want)
		}
	}
}

// enumAt walks doc along path and returns the strings of the array there.
func enumAt(t *testing.T, doc any, path []string) []string {
	t.Helper()
	v := doc
	for _, k := range path {
		m, ok := v.(map[string]any)
		if !ok {
			t.Fatalf("docs/result.schema.json: no object at %q of %v", k, path)
		}
		v = m[k]
	}
	list, ok := v.([]any)
	if !ok {
		t.Fatalf("docs/result.schema.json: no array at %v", path)
	}
	var out []string
	for _, e := range list {
		s, _ := e.(string)
		out = append(out, s)
	}
	return out
}
