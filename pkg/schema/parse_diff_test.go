package schema

import (
	"bytes"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// parseReference is ParseObject with jsonschema's own decoding alone.
func parseReference(args []byte) (map[string]any, error) {
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(args))
	if err != nil {
		return nil, &ArgumentError{Msg: "arguments are not valid JSON"}
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return nil, &ArgumentError{Msg: "arguments must be a JSON object"}
	}
	return obj, nil
}

// checkSameParse fails t unless ParseObject and parseReference give args
// the same object and the same error.
func checkSameParse(t *testing.T, args []byte) {
	t.Helper()
	if err := sameParse(args); err != nil {
		t.Fatal(err)
	}
}

// sameParse says how ParseObject and parseReference differ on args, if
// they do.
func sameParse(args []byte) error {
	got, gotErr := ParseObject(args)
	want, wantErr := parseReference(args)
	if !reflect.DeepEqual(gotErr, wantErr) || !reflect.DeepEqual(got, want) {
		return fmt.Errorf("ParseObject(%q) = %v, %v; want %v, %v", args, got, gotErr, want, wantErr)
	}
	return nil
}

var parseInputs = []string{
	`{"text":"hi"}`, `{"a":1.50,"b":[1,2,{"c":null}],"d":true}`, ` {"text" : "a" } ` + "\n\t\r",
	`{} {}`, `{}x`, `{}]`, `{},`, "{}\v", "{}\u00a0", `{"a":}`, `{"a":1`, `{`, ``, `  `, `[]`, `null`, `12`, `12 `,
	`"s"`, `{"a":1,"a":"x"}`, `{"a":1e400}`, `{"n":12345678901234567890123}`, `{"text":"\ud800"}`, "{\"text\":\"\xff\"}",
	`{"text":"` + strings.Repeat("x", 64<<10) + `"}`,
}

// Parsing gives every input the object and the error jsonschema's own
// decoding gives, whatever was parsed before.
func TestParseObjectMatchesReference(t *testing.T) {
	for _, args := range parseInputs {
		for _, prev := range parseInputs {
			checkSameParse(t, []byte(prev))
			checkSameParse(t, []byte(args))
		}
	}
	// A parsed object shares nothing with the bytes it was parsed from.
	first := []byte(`{"text":"hi","n":1.5,"list":["a",{"b":"c"}]}`)
	want, _ := parseReference(first)
	kept, err := ParseObject(first)
	if err != nil {
		t.Fatal(err)
	}
	for i := range first {
		first[i] = ' '
	}
	if !reflect.DeepEqual(kept, want) {
		t.Fatalf("an object changed with the bytes it was parsed from: %v, want %v", kept, want)
	}
}

// FuzzParseObjectMatchesReference compares ParseObject with jsonschema's
// own decoding after an input accepted, after one refused and twice in a
// row.
func FuzzParseObjectMatchesReference(f *testing.F) {
	for _, a := range parseInputs[:len(parseInputs)-1] {
		f.Add([]byte(a))
	}
	f.Fuzz(func(t *testing.T, args []byte) {
		checkSameParse(t, []byte(`{"text":"hi"}`))
		checkSameParse(t, args)
		checkSameParse(t, []byte(`12 3`))
		checkSameParse(t, args)
		checkSameParse(t, args)
		checkSameParse(t, []byte(`{"text":"hi"}`))
	})
}

// Parsing serves goroutines at once, each its own input.
func TestParseObjectConcurrent(t *testing.T) {
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 50 {
				if err := sameParse([]byte(parseInputs[(g+i)%(len(parseInputs)-1)])); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}
