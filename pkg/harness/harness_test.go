package harness_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/toolfleet/toolfleet/internal/testsync"
	"github.com/toolfleet/toolfleet/pkg/harness"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

const intSchema = `{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"],"additionalProperties":false}`

func constTool(name, out string) harness.Tool {
	return harness.Tool{
		Name: name,
		Run:  func(context.Context, json.RawMessage) (string, error) { return out, nil },
	}
}

func TestNewRejects(t *testing.T) {
	ok := constTool("ok", "x")
	tests := []struct {
		name  string
		cfg   harness.Config
		tools []harness.Tool
		want  string
	}{
		{"invalid name", harness.Config{}, []harness.Tool{constTool("bad.name", "")}, `tools[0]: field "name": must match`},
		{"empty name", harness.Config{}, []harness.Tool{constTool("", "")}, `field "name": required`},
		{"duplicate", harness.Config{}, []harness.Tool{ok, ok}, `tool "ok" (tools[1]): field "name": duplicate name`},
		{"nil run", harness.Config{}, []harness.Tool{{Name: "norun"}}, `tool "norun" (tools[0]): field "run": required`},
		{"schema not JSON", harness.Config{}, []harness.Tool{{Name: "s", Parameters: json.RawMessage(`{`), Run: ok.Run}}, `tool "s" (tools[0]): field "parameters"`},
		{"schema not object", harness.Config{}, []harness.Tool{{Name: "s", Parameters: json.RawMessage(`{"type":"string"}`), Run: ok.Run}}, `field "parameters"`},
		{"schema invalid", harness.Config{}, []harness.Tool{{Name: "s", Parameters: json.RawMessage(`{"type":"object","minProperties":"x"}`), Run: ok.Run}}, `field "parameters"`},
		{"external ref", harness.Config{}, []harness.Tool{{Name: "s", Parameters: json.RawMessage(`{"$ref":"https://example.com/x.json"}`), Run: ok.Run}}, `field "parameters"`},
		{"negative timeout", harness.Config{}, []harness.Tool{{Name: "s", Timeout: -time.Second, Run: ok.Run}}, `field "timeout"`},
		{"negative output bound", harness.Config{MaxOutputChars: -1}, nil, "MaxOutputChars"},
		{"negative abandoned bound", harness.Config{MaxAbandoned: -1}, nil, "MaxAbandoned"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := harness.New(tt.cfg, tt.tools...)
			if err == nil {
				t.Fatalf("New succeeded, want error containing %q", tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("New error = %q, want it to contain %q", err, tt.want)
			}
		})
	}
}

func TestSpecs(t *testing.T) {
	h, _ := newHarness(t, harness.Config{},
		harness.Tool{Name: "zeta", Description: "z", Parameters: json.RawMessage(intSchema), Timeout: 2 * time.Second,
			Idempotent: true, RequiresApproval: true, Run: constTool("zeta", "").Run},
		constTool("alpha", ""),
		harness.Calculator(),
	)
	specs := h.Specs()
	var names []string
	for _, s := range specs {
		names = append(names, string(s.Name))
		if err := s.Validate(); err != nil {
			t.Errorf("spec %s: Validate: %v", s.Name, err)
		}
		digest, err := protocol.SchemaDigest(s.Parameters)
		if err != nil || s.SchemaDigest != digest {
			t.Errorf("spec %s: SchemaDigest=%q, want %q (%v)", s.Name, s.SchemaDigest, digest, err)
		}
	}
	if got, want := strings.Join(names, ","), "alpha,calculator,zeta"; got != want {
		t.Fatalf("spec names = %s, want %s (sorted)", got, want)
	}
	z := specs[2]
	if z.V != 1 || z.TimeoutMS != 2000 || !z.Idempotent || !z.RequiresApproval || z.Description != "z" || string(z.Parameters) != intSchema {
		t.Errorf("zeta spec = %+v", z)
	}
	if a := specs[0]; a.TimeoutMS != harness.DefaultTimeout.Milliseconds() || string(a.Parameters) != `{"type":"object"}` {
		t.Errorf("alpha spec: TimeoutMS=%d Parameters=%s, want the defaults", a.TimeoutMS, a.Parameters)
	}
	if c := specs[1]; c.TimeoutMS != 5000 || !c.Idempotent {
		t.Errorf("calculator spec: TimeoutMS=%d Idempotent=%v, want 5000 true", c.TimeoutMS, c.Idempotent)
	}
	// Specs hands out copies.
	specs[0].Parameters[0] = 'X'
	if string(h.Specs()[0].Parameters) != `{"type":"object"}` {
		t.Fatal("mutating a returned spec changed the harness")
	}
}

func TestToolLookup(t *testing.T) {
	h, _ := newHarness(t, harness.Config{}, harness.Echo())
	if tool, ok := h.Tool("echo"); !ok || tool.Name != "echo" || tool.Run == nil {
		t.Fatalf("Tool(echo) = %+v, %v", tool, ok)
	}
	if _, ok := h.Tool("nope"); ok {
		t.Fatal("Tool(nope) found a tool")
	}
}

func TestExecuteUnknownTool(t *testing.T) {
	h, logs := newHarness(t, harness.Config{}, harness.Echo())
	for _, name := range []string{"nope", "", "bad.name", "Echo", strings.Repeat("x", 65)} {
		t.Run(name, func(t *testing.T) {
			r := h.Execute(t.Context(), harness.Call{Tool: protocol.ToolName(name), Arguments: json.RawMessage(`{"text":"x"}`)})
			if r.Outcome != protocol.OutcomeUnknownTool || r.Output != "" || r.ErrorType != "" {
				t.Fatalf("result = %+v, want unknown_tool and nothing else", r)
			}
		})
	}
	if strings.Contains(logs.String(), "bad.name") {
		t.Error("an invalid tool name was logged verbatim")
	}
}

func TestExecuteInvalidArguments(t *testing.T) {
	var ran atomic.Int32
	tool := harness.Tool{Name: "count", Parameters: json.RawMessage(intSchema),
		Run: func(context.Context, json.RawMessage) (string, error) { ran.Add(1); return "ran", nil }}
	h, _ := newHarness(t, harness.Config{}, tool)
	tests := []struct{ name, args, want string }{
		{"missing required", `{}`, "n"},
		{"extra property", `{"n":1,"x":2}`, "x"},
		{"wrong type", `{"n":"1"}`, "integer"},
		{"bool as integer", `{"n":true}`, "integer"},
		{"fraction as integer", `{"n":1.5}`, "integer"},
		{"not an object", `[1]`, "object"},
		{"null", `null`, "object"},
		{"not JSON", `{"n":`, "JSON"},
		{"empty", ``, "JSON"},
		{"two documents", `{"n":1}{"n":2}`, "JSON"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := h.Execute(t.Context(), harness.Call{Tool: "count", Arguments: json.RawMessage(tt.args)})
			if r.Outcome != protocol.OutcomeInvalidArguments {
				t.Fatalf("Outcome = %q, want invalid_arguments (result %+v)", r.Outcome, r)
			}
			if !strings.Contains(r.Output, tt.want) {
				t.Errorf("Output = %q, want the validator's message mentioning %q", r.Output, tt.want)
			}
		})
	}
	if n := ran.Load(); n != 0 {
		t.Fatalf("tool ran %d times on invalid arguments", n)
	}
	if r := h.Execute(t.Context(), harness.Call{Tool: "count", Arguments: json.RawMessage(`{"n":1.0}`)}); r.Outcome != protocol.OutcomeOK || ran.Load() != 1 {
		t.Fatalf("valid arguments: result %+v, ran %d", r, ran.Load())
	}
}

func TestExecuteTruncation(t *testing.T) {
	out := strings.Repeat("é", 50) + strings.Repeat("😀", 50) // 100 runes, multi-byte
	h, _ := newHarness(t, harness.Config{MaxOutputChars: 40}, constTool("big", out), constTool("small", "short"))
	tests := []struct {
		name      string
		tool      protocol.ToolName
		callMax   int
		wantRunes int
		wantTrunc bool
	}{
		{"config bound", "big", 0, 40, true},
		{"call asks for less", "big", 20, 20, true},
		{"call cannot ask for more", "big", 1000, 40, true},
		{"fits", "small", 0, 5, false},
		{"bound below the marker", "big", 5, 5, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := h.Execute(t.Context(), harness.Call{Tool: tt.tool, Arguments: json.RawMessage(`{}`), MaxOutputChars: tt.callMax})
			if r.Outcome != protocol.OutcomeOK {
				t.Fatalf("Outcome = %q", r.Outcome)
			}
			if n := utf8.RuneCountInString(r.Output); n != tt.wantRunes || r.Truncated != tt.wantTrunc {
				t.Fatalf("runes=%d truncated=%v, want %d %v (output %q)", n, r.Truncated, tt.wantRunes, tt.wantTrunc, r.Output)
			}
			if !utf8.ValidString(r.Output) {
				t.Fatal("output is not valid UTF-8")
			}
			if tt.wantTrunc && tt.wantRunes > len(protocol.TruncationMarker) && !strings.HasSuffix(r.Output, protocol.TruncationMarker) {
				t.Fatalf("truncated output lacks the marker: %q", r.Output)
			}
		})
	}
}

// hangTool ignores its context until release is closed.
func hangTool(name string, started chan<- struct{}, release <-chan struct{}) harness.Tool {
	return harness.Tool{Name: name, Run: func(context.Context, json.RawMessage) (string, error) {
		if started != nil {
			started <- struct{}{}
		}
		<-release
		return "late", nil
	}}
}

func TestExecuteTimeoutAbandonsGoTool(t *testing.T) {
	release := make(chan struct{})
	tool := hangTool("hang", nil, release)
	tool.Timeout = 50 * time.Millisecond
	h, logs := newHarness(t, harness.Config{}, tool)
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
	}()

	start := time.Now()
	r := h.Execute(t.Context(), harness.Call{Tool: "hang", Arguments: json.RawMessage(`{}`)})
	elapsed := time.Since(start)
	if r.Outcome != protocol.OutcomeTimeout || r.Output != "" {
		t.Fatalf("result = %+v, want timeout", r)
	}
	if elapsed > 2*time.Second {
		t.Fatalf("Execute took %v for a 50ms deadline", elapsed)
	}
	if r.Duration < 50*time.Millisecond {
		t.Errorf("Duration = %v, want >= 50ms", r.Duration)
	}
	if got := h.Abandoned(); got != 1 {
		t.Fatalf("Abandoned() = %d, want 1", got)
	}
	close(release)
	testsync.WaitUntil(t, 5*time.Second, "Abandoned() to return to 0", func() bool { return h.Abandoned() == 0 })
	if !strings.Contains(logs.String(), "abandoned") {
		t.Error("abandonment was not logged")
	}
}

func TestExecuteDefaultDeadlineIsToolTimeout(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	tool := hangTool("hang", nil, release)
	tool.Timeout = 30 * time.Millisecond
	h, _ := newHarness(t, harness.Config{}, tool)
	start := time.Now()
	r := h.Execute(t.Context(), harness.Call{Tool: "hang", Arguments: json.RawMessage(`{}`)})
	if r.Outcome != protocol.OutcomeTimeout || time.Since(start) > time.Second {
		t.Fatalf("result = %+v after %v, want timeout near 30ms", r, time.Since(start))
	}
}

func TestExecuteOverloaded(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	var ran atomic.Int32
	counted := harness.Tool{Name: "counted", Run: func(context.Context, json.RawMessage) (string, error) {
		ran.Add(1)
		return "ok", nil
	}}
	hang := hangTool("hang", nil, release)
	hang.Timeout = 20 * time.Millisecond
	h, logs := newHarness(t, harness.Config{MaxAbandoned: 1}, hang, counted)

	r := h.Execute(t.Context(), harness.Call{Tool: "hang", Arguments: json.RawMessage(`{}`)})
	if r.Outcome != protocol.OutcomeTimeout || h.Abandoned() != 1 {
		t.Fatalf("first call: %+v, Abandoned()=%d", r, h.Abandoned())
	}
	r = h.Execute(t.Context(), harness.Call{Tool: "counted", Arguments: json.RawMessage(`{}`)})
	if r.Outcome != protocol.OutcomeFailed || r.ErrorType != harness.ErrorTypeOverloaded {
		t.Fatalf("at the bound: %+v, want failed %s", r, harness.ErrorTypeOverloaded)
	}
	if ran.Load() != 0 {
		t.Fatal("a refused call ran")
	}
	if !strings.Contains(logs.String(), "refused") {
		t.Error("the refusal was not logged")
	}
}

func TestExecuteCooperativeToolTimesOut(t *testing.T) {
	tool := harness.Tool{Name: "wait", Run: func(ctx context.Context, _ json.RawMessage) (string, error) {
		<-ctx.Done()
		return "", ctx.Err()
	}}
	h, _ := newHarness(t, harness.Config{}, tool)
	r := h.Execute(t.Context(), harness.Call{Tool: "wait", Arguments: json.RawMessage(`{}`), Deadline: time.Now().Add(20 * time.Millisecond)})
	if r.Outcome != protocol.OutcomeTimeout || r.ErrorType != "" {
		t.Fatalf("result = %+v, want timeout (not failed with the context's error type)", r)
	}
	testsync.WaitUntil(t, 5*time.Second, "no abandoned goroutine", func() bool { return h.Abandoned() == 0 })
}

func TestExecuteCancel(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	started := make(chan struct{}, 1)
	cooperative := harness.Tool{Name: "wait", Run: func(ctx context.Context, _ json.RawMessage) (string, error) {
		started <- struct{}{}
		<-ctx.Done()
		return "", ctx.Err()
	}}
	for _, tc := range []struct {
		name      string
		tool      harness.Tool
		abandoned int
	}{
		{"cooperative", cooperative, 0},
		{"ignores ctx", hangTool("hang", started, release), 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, _ := newHarness(t, harness.Config{}, tc.tool)
			ctx, cancel := context.WithCancel(t.Context())
			go func() {
				<-started // cancel a running call
				cancel()
			}()
			start := time.Now()
			r := h.Execute(ctx, harness.Call{Tool: protocol.ToolName(tc.tool.Name), Arguments: json.RawMessage(`{}`), Deadline: time.Now().Add(time.Minute)})
			if r.Outcome != protocol.OutcomeCancelled {
				t.Fatalf("result = %+v, want cancelled", r)
			}
			if time.Since(start) > 5*time.Second {
				t.Fatalf("Execute took %v after a cancel", time.Since(start))
			}
			if tc.abandoned == 0 {
				testsync.WaitUntil(t, 5*time.Second, "no abandoned goroutine", func() bool { return h.Abandoned() == 0 })
			} else if got := h.Abandoned(); got != tc.abandoned {
				t.Fatalf("Abandoned() = %d, want %d", got, tc.abandoned)
			}
		})
	}
}

func TestExecuteDoesNotStartLateCalls(t *testing.T) {
	var ran atomic.Int32
	tool := harness.Tool{Name: "t", Run: func(context.Context, json.RawMessage) (string, error) { ran.Add(1); return "", nil }}
	h, _ := newHarness(t, harness.Config{}, tool)

	r := h.Execute(t.Context(), harness.Call{Tool: "t", Arguments: json.RawMessage(`{}`), Deadline: time.Now().Add(-time.Second)})
	if r.Outcome != protocol.OutcomeTimeout {
		t.Errorf("past deadline: %+v, want timeout", r)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	r = h.Execute(ctx, harness.Call{Tool: "t", Arguments: json.RawMessage(`{}`)})
	if r.Outcome != protocol.OutcomeCancelled {
		t.Errorf("cancelled context: %+v, want cancelled", r)
	}
	if ran.Load() != 0 {
		t.Fatal("the tool ran")
	}
}

type secretError struct{ secret string }

func (e *secretError) Error() string { return "failed with " + e.secret }

func TestExecuteFailuresReportTypeOnly(t *testing.T) {
	const canary = "CANARY-5f2a9c-secret"
	tests := []struct {
		name     string
		run      harness.Func
		wantType string
	}{
		{"errors.New", func(context.Context, json.RawMessage) (string, error) { return "", errors.New(canary) }, "*errors.errorString"},
		{"wrapped", func(context.Context, json.RawMessage) (string, error) {
			return "", fmt.Errorf("token %s: %w", canary, fs.ErrNotExist)
		}, "*fmt.wrapError"},
		{"path error", func(context.Context, json.RawMessage) (string, error) {
			return "", &fs.PathError{Op: "open", Path: "/" + canary, Err: fs.ErrPermission}
		}, "*fs.PathError"},
		{"custom type", func(context.Context, json.RawMessage) (string, error) { return canary, &secretError{canary} }, "*harness_test.secretError"},
		{"panic string", func(context.Context, json.RawMessage) (string, error) { panic(canary) }, "panic: string"},
		{"panic error", func(context.Context, json.RawMessage) (string, error) { panic(&secretError{canary}) }, "panic: *harness_test.secretError"},
		{"panic nil", func(context.Context, json.RawMessage) (string, error) { panic(nil) }, "panic: *runtime.PanicNilError"},
		{"runtime error", func(_ context.Context, args json.RawMessage) (string, error) {
			var m map[string]int
			m[canary] = len(args) // nil map write
			return "", nil
		}, "panic: runtime.plainError"},
		{"goexit", func(context.Context, json.RawMessage) (string, error) { runtime.Goexit(); return "", nil }, harness.ErrorTypeGoexit},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, logs := newHarness(t, harness.Config{}, harness.Tool{Name: "t", Run: tt.run})
			r := h.Execute(t.Context(), harness.Call{Tool: "t", Arguments: json.RawMessage(`{"key":"` + canary + `"}`)})
			if r.Outcome != protocol.OutcomeFailed || r.ErrorType != tt.wantType || r.Output != "" {
				t.Fatalf("result = %+v, want failed %q with no output", r, tt.wantType)
			}
			assertNotContains(t, canary, map[string]string{"result": resultText(r), "logs": logs.String()})
			if !strings.Contains(logs.String(), tt.wantType) {
				t.Errorf("logs lack the error type %q:\n%s", tt.wantType, logs)
			}
		})
	}
}

func TestLogsCarryKeysNotValues(t *testing.T) {
	const canaryArg, canaryOut = "CANARY-arg-77e1", "CANARY-out-0b3d"
	h, logs := newHarness(t, harness.Config{}, constTool("t", canaryOut))
	r := h.Execute(t.Context(), harness.Call{Tool: "t", Arguments: json.RawMessage(`{"api_token":"` + canaryArg + `","n":1}`)})
	if r.Outcome != protocol.OutcomeOK || r.Output != canaryOut {
		t.Fatalf("result = %+v", r)
	}
	text := logs.String()
	assertNotContains(t, canaryArg, map[string]string{"logs": text})
	assertNotContains(t, canaryOut, map[string]string{"logs": text})
	for _, want := range []string{`"tool":"t"`, `"outcome":"ok"`, `"arg_keys":["api_token","n"]`, `"output_chars":15`, `"duration_ms"`} {
		if !strings.Contains(text, want) {
			t.Errorf("logs lack %s:\n%s", want, text)
		}
	}
	// Invalid arguments: the validator's message quotes values; it goes to
	// the result (for the model), never to the log.
	h2, logs2 := newHarness(t, harness.Config{}, harness.Tool{Name: "n", Parameters: json.RawMessage(intSchema), Run: constTool("n", "").Run})
	r = h2.Execute(t.Context(), harness.Call{Tool: "n", Arguments: json.RawMessage(`{"n":"` + canaryArg + `"}`)})
	if r.Outcome != protocol.OutcomeInvalidArguments {
		t.Fatalf("result = %+v", r)
	}
	assertNotContains(t, canaryArg, map[string]string{"logs": logs2.String()})
}

func TestExecuteConcurrent(t *testing.T) {
	h, _ := newHarness(t, harness.Config{}, harness.Echo(), harness.Calculator())
	done := make(chan harness.Result, 40)
	for i := range 40 {
		go func() {
			if i%2 == 0 {
				done <- h.Execute(t.Context(), harness.Call{Tool: "echo", Arguments: json.RawMessage(fmt.Sprintf(`{"text":"%d"}`, i))})
			} else {
				done <- h.Execute(t.Context(), harness.Call{Tool: "calculator", Arguments: json.RawMessage(fmt.Sprintf(`{"expression":"%d*2"}`, i))})
			}
		}()
	}
	for range 40 {
		if r := <-done; r.Outcome != protocol.OutcomeOK {
			t.Fatalf("result = %+v", r)
		}
	}
}
