package demo

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/toolfleet/toolfleet/internal/termsafe"
	"github.com/toolfleet/toolfleet/pkg/loop"
)

// Tool is the one tool the demo model calls.
const Tool = "calculator"

// Help is the answer to a prompt the demo model cannot read.
const Help = "I am toolfleet's demo model, not a language model: I read arithmetic out of a prompt " +
	"(numbers, + - * / % ** and parentheses, or words such as plus, minus, times, divided by, squared, " +
	"cubed and to the power of), evaluate it with the fleet's calculator tool and answer with the results " +
	"(\"What is 7 times 6? And 2 to the power of 10?\"). I found no arithmetic in this prompt. " +
	"For anything else, point --model at a real provider: --model openai:MODEL (key in OPENAI_API_KEY), " +
	"--model openai-responses:MODEL or --model anthropic:MODEL (key in ANTHROPIC_API_KEY); see docs/models.md."

// maxQuoted bounds the part of a failed observation an answer quotes.
const maxQuoted = 200

// Model is the demo model. Its zero value is ready to use; it holds no
// state, so one Model serves any number of concurrent runs.
type Model struct{}

var _ loop.Model = Model{}

// New returns the demo model.
func New() Model { return Model{} }

// Complete answers the run's last user message: the first call of a turn
// asks the calculator for every expression at once, a second one (for
// "their sum" or "their product") combines the results, and the last
// answers with them. It fails only when ctx is done.
func (Model) Complete(ctx context.Context, req loop.Request) (*loop.Response, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	turn, prompt, pos, results := position(req.Messages)
	if !hasTool(req.Tools) {
		return answer("I am toolfleet's demo model: I answer arithmetic with the fleet's " + Tool +
			" tool, and this fleet does not serve it (start the workers with --builtin calculator). " +
			"For anything else, point --model at a real provider; see docs/models.md."), nil
	}
	p := read(prompt)
	if p.tooLong {
		return answer(fmt.Sprintf("I am toolfleet's demo model: I read prompts of at most %d bytes, and this one is longer. "+
			"For long prompts, point --model at a real provider; see docs/models.md.", MaxPromptBytes)), nil
	}
	exprs := p.exprs()
	ops, combine := p.combined()
	if len(exprs) == 0 && !combine {
		return answer(Help), nil
	}
	skipped := 0
	if len(exprs) > MaxExpressions {
		skipped = len(exprs) - MaxExpressions
		exprs = exprs[:MaxExpressions]
		combine = false
	}
	first := make([]call, len(exprs))
	for i, e := range exprs {
		first[i] = call{id: fmt.Sprintf("demo_%d_1_%d", turn, i+1), expr: e}
	}
	if len(first) == 0 {
		// Only bare numbers to combine: one call does it.
		first = []call{{id: fmt.Sprintf("demo_%d_1_1", turn), expr: join(ops, p.combine, nil)}}
		combine = false
	}
	var second *call
	if combine && pos >= 1 && allNumbers(first, results) {
		second = &call{id: fmt.Sprintf("demo_%d_2_1", turn), expr: join(ops, p.combine, resultsOf(first, results))}
	}
	switch {
	case pos == 0:
		what := "this expression"
		if len(first) > 1 {
			what = fmt.Sprintf("these %d expressions in parallel", len(first))
		}
		return calls("Demo model: asking the "+Tool+" for "+what+".", first), nil
	case pos == 1 && second != nil:
		return calls("Demo model: now their "+combineWord(p.combine)+".", []call{*second}), nil
	}
	return answer(finalAnswer(first, second, p.combine, results, skipped)), nil
}

// call is one calculator call the model makes.
type call struct{ id, expr string }

// position reads a transcript: the number of user messages, the last one's
// content, how many assistant messages follow it, and the tool results by
// call id.
func position(msgs []loop.Message) (turn int, prompt string, pos int, results map[string]string) {
	results = map[string]string{}
	for _, m := range msgs {
		switch m.Role {
		case "user":
			turn++
			prompt, pos = m.Content, 0
			clear(results)
		case "assistant":
			pos++
		case "tool":
			results[m.ToolCallID] = m.Content
		}
	}
	return turn, prompt, pos, results
}

func hasTool(tools []loop.ToolDef) bool {
	for _, t := range tools {
		if t.Name == Tool {
			return true
		}
	}
	return false
}

// number is the text of a calculator result the model reuses in an
// expression.
var number = regexp.MustCompile(`^-?[0-9]+(\.[0-9]+)?(e[+-]?[0-9]+)?$`)

func isNumber(s string) bool { return len(s) <= maxNumberLen && number.MatchString(s) }

func allNumbers(cs []call, results map[string]string) bool {
	for _, c := range cs {
		if !isNumber(results[c.id]) {
			return false
		}
	}
	return true
}

// resultsOf maps each expression of cs to its result.
func resultsOf(cs []call, results map[string]string) map[string]string {
	m := make(map[string]string, len(cs))
	for _, c := range cs {
		m[c.expr] = results[c.id]
	}
	return m
}

// join writes the combining expression: each operand (its result, when it
// has one) joined by op.
func join(ops []operand, op string, values map[string]string) string {
	parts := make([]string, len(ops))
	for i, o := range ops {
		v := o.expr
		if r, ok := values[o.expr]; ok && !o.literal {
			v = r
		}
		if strings.HasPrefix(v, "-") || (o.literal && strings.ContainsAny(v, " ")) {
			v = "(" + v + ")"
		}
		parts[i] = v
	}
	return strings.Join(parts, " "+op+" ")
}

func combineWord(op string) string {
	if op == "*" {
		return "product"
	}
	return "sum"
}

func finalAnswer(first []call, second *call, op string, results map[string]string, skipped int) string {
	var parts []string
	for _, c := range first {
		parts = append(parts, describe(c.expr, results[c.id], c.id, results))
	}
	if second != nil {
		r, ok := results[second.id]
		switch {
		case ok && isNumber(r):
			parts = append(parts, "their "+combineWord(op)+" is "+r)
		default:
			parts = append(parts, "their "+combineWord(op)+" ("+second.expr+") could not be computed: "+quote(r, ok))
		}
	}
	s := sentence(parts)
	if skipped > 0 {
		s += fmt.Sprintf(" (The demo model evaluates at most %d expressions per prompt; %d more were not evaluated.)", MaxExpressions, skipped)
	}
	return s
}

func describe(expr, result, id string, results map[string]string) string {
	_, ok := results[id]
	if ok && isNumber(result) {
		return expr + " = " + result
	}
	return expr + " could not be evaluated: " + quote(result, ok)
}

func quote(observation string, ok bool) string {
	if !ok {
		return "no result"
	}
	return strconv.Quote(termsafe.Line(observation, maxQuoted))
}

// sentence joins parts as "a, b, and c." (or "a." and "a and b.").
func sentence(parts []string) string {
	switch len(parts) {
	case 0:
		return ""
	case 1:
		return parts[0] + "."
	case 2:
		return parts[0] + " and " + parts[1] + "."
	}
	return strings.Join(parts[:len(parts)-1], ", ") + ", and " + parts[len(parts)-1] + "."
}

func answer(text string) *loop.Response {
	return &loop.Response{Message: loop.Message{Role: "assistant", Content: text}, FinishReason: "stop"}
}

func calls(content string, cs []call) *loop.Response {
	resp := &loop.Response{Message: loop.Message{Role: "assistant", Content: content}, FinishReason: "tool_calls"}
	for _, c := range cs {
		args, _ := json.Marshal(map[string]string{"expression": c.expr}) // a map of strings always marshals
		resp.Message.ToolCalls = append(resp.Message.ToolCalls, loop.ToolCall{
			ID: c.id, Type: "function", Function: loop.FunctionCall{Name: Tool, Arguments: string(args)},
		})
	}
	return resp
}
