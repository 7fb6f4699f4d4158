package harness_test

import (
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/toolfleet/toolfleet/pkg/harness"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

func calcArgs(expr string) json.RawMessage {
	b, _ := json.Marshal(map[string]string{"expression": expr})
	return b
}

func TestCalculator(t *testing.T) {
	h, _ := newHarness(t, harness.Config{}, harness.Calculator())
	tests := []struct{ expr, want string }{
		{"1+2", "3"},
		{"2*3+4", "10"},
		{"2*(3+4)", "14"},
		{"7/2", "3.5"},
		{"10/2", "5"},
		{"7%3", "1"},
		{"-7%3", "2"},
		{"7%-3", "-2"},
		{"-7.5%2", "0.5"},
		{"7.0%2.5", "2"},
		{"2**10", "1024"},
		{"2**3**2", "512"}, // right-associative
		{"-2**2", "-4"},    // ** binds tighter than a unary minus on its left
		{"(-2)**2", "4"},
		{"2**-1", "0.5"},
		{"-2**-2", "-0.25"},
		{"(-8)**3", "-512"},
		{"4**0.5", "2"},
		{"2**0.5", "1.4142135623730951"},
		{"0**0", "1"},
		{"+-+1", "-1"},
		{"--1", "1"},
		{"3-2-1", "0"}, // left-associative
		{"2/4/2", "0.25"},
		{"1e3", "1000"},
		{"1.5e-3", "0.0015"},
		{"1E+2", "100"},
		{".5+.5", "1"},
		{"5.", "5"},
		{"0.1+0.2", "0.30000000000000004"},
		{"1/3", "0.3333333333333333"},
		{"100*1.1", "110.00000000000001"},
		{"1e-5", "1e-05"},
		{"0.0001", "0.0001"},
		{"123456.789", "123456.789"},
		{"1234567.5", "1234567.5"},
		{"10**15", "1000000000000000"},
		{"10**16", "1e+16"},
		{"2**53", "9007199254740992.0"},
		{"1e300", "1e+300"},
		{"-1e300", "-1e+300"},
		{"1e-400", "0"}, // underflow is 0, as in Python
		{"-0.0", "0"},
		{"(((1)))", "1"},
		{"  1 +\t2\n", "3"},
	}
	for _, tt := range tests {
		t.Run(tt.expr, func(t *testing.T) {
			r := h.Execute(t.Context(), harness.Call{Tool: "calculator", Arguments: calcArgs(tt.expr)})
			if r.Outcome != protocol.OutcomeOK || r.Output != tt.want {
				t.Fatalf("%q = %+v, want ok %q", tt.expr, r, tt.want)
			}
		})
	}
}

func TestCalculatorRefusesHostileInput(t *testing.T) {
	tool := harness.Calculator()
	tests := []struct{ name, expr string }{
		{"python import", "__import__('os').system('id')"},
		{"identifier", "x+1"},
		{"call", "abs(1)"},
		{"attribute", "(1).real"},
		{"tower of powers", "2**2**2**2**2"},
		{"nine to the nine to the nine", "9**9**9"},
		{"overflowing literal", "1e309"},
		{"over the magnitude bound", "1e301"},
		{"overflowing product", "1e200*1e200"},
		{"division by zero", "1/0"},
		{"modulo by zero", "1%0"},
		{"zero to a negative power", "0**-1"},
		{"fractional power of a negative", "(-8)**(1/3)"},
		{"floor division", "7//2"},
		{"empty", ""},
		{"blank", "   "},
		{"unbalanced open", "(1+2"},
		{"unbalanced close", "1+2)"},
		{"dangling operator", "1+"},
		{"two numbers", "1 2"},
		{"bad exponent", "1e"},
		{"lone dot", "."},
		{"double dot", "1.2.3"},
		{"unicode digit", "١+1"},
		{"nested 100 parentheses", strings.Repeat("(", 100) + "1" + strings.Repeat(")", 100)},
		{"100 unary minuses", strings.Repeat("-", 100) + "1"},
		{"10,000 nested parentheses", strings.Repeat("(", 10_000) + "1" + strings.Repeat(")", 10_000)},
		{"1 MB of digits", strings.Repeat("9", 1<<20)},
		{"1001 characters", strings.Repeat("1", 1001)},
		{"1001 multi-byte characters", strings.Repeat("١", 1001)},
		{"exponentiation chain", strings.Repeat("9**", 300) + "9"},
		{"NUL", "1\x00"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := calcArgs(tt.expr)
			start := time.Now()
			out, err := tool.Run(t.Context(), args)
			if el := time.Since(start); el > time.Second {
				t.Fatalf("took %v, want well under a second", el)
			}
			var ee *harness.EvaluationError
			if !errors.As(err, &ee) {
				t.Fatalf("Run = %q, %v; want an *EvaluationError", out, err)
			}
			if out != "" {
				t.Fatalf("output %q alongside an error", out)
			}
		})
	}
}

func TestCalculatorLongestExpression(t *testing.T) {
	// 1000 characters is allowed, even when every one is escaped in JSON.
	expr := "1" + strings.Repeat("\u0020", 999)
	args := json.RawMessage(`{"expression":"` + expr + `"}`)
	out, err := harness.Calculator().Run(t.Context(), args)
	if err != nil || out != "1" {
		t.Fatalf("Run = %q, %v; want \"1\"", out, err)
	}
}

func TestCalculatorThroughExecute(t *testing.T) {
	h, _ := newHarness(t, harness.Config{}, harness.Calculator())
	tests := []struct {
		name, args  string
		wantOutcome protocol.Outcome
		wantType    string
	}{
		{"evaluation error", string(calcArgs("1/0")), protocol.OutcomeFailed, "*harness.EvaluationError"},
		{"over the schema's length", string(calcArgs(strings.Repeat("1", 1001))), protocol.OutcomeInvalidArguments, ""},
		{"extra property", `{"expression":"1","x":1}`, protocol.OutcomeInvalidArguments, ""},
		{"missing expression", `{}`, protocol.OutcomeInvalidArguments, ""},
		{"number instead of string", `{"expression":12}`, protocol.OutcomeInvalidArguments, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := h.Execute(t.Context(), harness.Call{Tool: "calculator", Arguments: json.RawMessage(tt.args)})
			if r.Outcome != tt.wantOutcome || r.ErrorType != tt.wantType {
				t.Fatalf("result = %+v, want %s %q", r, tt.wantOutcome, tt.wantType)
			}
		})
	}
}

func TestEcho(t *testing.T) {
	h, _ := newHarness(t, harness.Config{}, harness.Echo())
	text := "héllo\n\"world\" 😀"
	args, _ := json.Marshal(map[string]string{"text": text})
	if r := h.Execute(t.Context(), harness.Call{Tool: "echo", Arguments: args}); r.Outcome != protocol.OutcomeOK || r.Output != text {
		t.Fatalf("result = %+v, want %q", r, text)
	}
	for _, bad := range []string{`{}`, `{"text":1}`, `{"text":"a","more":1}`} {
		if r := h.Execute(t.Context(), harness.Call{Tool: "echo", Arguments: json.RawMessage(bad)}); r.Outcome != protocol.OutcomeInvalidArguments {
			t.Errorf("%s: result = %+v, want invalid_arguments", bad, r)
		}
	}
}

func TestBuiltins(t *testing.T) {
	tools, err := harness.Builtins([]string{"calculator", " echo ", ""})
	if err != nil || len(tools) != 2 || tools[0].Name != "calculator" || tools[1].Name != "echo" {
		t.Fatalf("Builtins = %v, %v", tools, err)
	}
	for _, s := range []string{`"additionalProperties":false`, `"required":[`} {
		for _, tool := range tools {
			if !strings.Contains(string(tool.Parameters), s) {
				t.Errorf("%s schema lacks %s: closed schemas are required", tool.Name, s)
			}
		}
	}
	if _, err := harness.Builtins([]string{"calculator", "shell"}); err == nil || !strings.Contains(err.Error(), `"shell"`) {
		t.Fatalf("unknown builtin: err = %v", err)
	}
	if _, err := harness.Builtins([]string{"echo", "echo"}); err == nil {
		t.Fatal("a repeated builtin was accepted")
	}
}

func FuzzCalculator(f *testing.F) {
	for _, seed := range []string{
		"1+2", "-2**2", "2**3**2", "(1+2)*3/4%5", "1e308*10", "9**9**9", "((((1))))", ".5e-3", "1/0",
		"__import__('os')", "", "1 2", "--+-1", "2**-1074", "1e-320/1e300", strings.Repeat("(", 70) + "1",
	} {
		f.Add(seed)
	}
	tool := harness.Calculator()
	f.Fuzz(func(t *testing.T, expr string) {
		out, err := tool.Run(t.Context(), calcArgs(expr))
		if err != nil {
			var ee *harness.EvaluationError
			if !errors.As(err, &ee) {
				t.Fatalf("error of type %T, want *harness.EvaluationError", err)
			}
			if strings.Contains(err.Error(), expr) && len(expr) > 8 {
				t.Fatalf("error message quotes the expression: %v", err)
			}
			return
		}
		v, perr := strconv.ParseFloat(out, 64)
		if perr != nil {
			t.Fatalf("output %q is not a number: %v", out, perr)
		}
		if v > harness.MaxMagnitude || v < -harness.MaxMagnitude {
			t.Fatalf("output %q exceeds the magnitude bound", out)
		}
	})
}
