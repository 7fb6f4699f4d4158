package harness

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Bounds of the calculator.
const (
	// MaxExpressionLen bounds an expression, in characters (the schema says
	// so too).
	MaxExpressionLen = 1000
	// MaxExpressionDepth bounds the nesting of parentheses, unary signs and
	// powers.
	MaxExpressionDepth = 64
	// MaxMagnitude bounds every literal, intermediate value and result.
	MaxMagnitude = 1e300
)

// calculatorParameters is the calculator's closed schema.
const calculatorParameters = `{"type":"object","properties":{"expression":{"type":"string","maxLength":1000,` +
	`"description":"An arithmetic expression: decimal numbers (with optional fraction and exponent), + - * / % **, unary + and -, parentheses. Example: (2 + 3) * 4 ** 0.5"}},` +
	`"required":["expression"],"additionalProperties":false}`

// Calculator returns the built-in calculator: it evaluates an arithmetic
// expression with Python's operators and precedence (** is right-associative
// and binds tighter than a unary minus on its left: -2**2 is -4; / is float
// division; % takes the sign of the divisor). It is a recursive-descent
// parser over numbers and operators only: there are no names, calls or
// anything else to evaluate. Every failure is an [*EvaluationError], so the
// model sees "Tool 'calculator' failed: *harness.EvaluationError".
//
// Results are printed like Python's floats, except that exact integers below
// 2**53 have no ".0": "7", "3.5", "1e+300".
func Calculator() Tool {
	return Tool{
		Name:        "calculator",
		Description: "Evaluate an arithmetic expression (numbers, + - * / % **, parentheses) and return the result.",
		Parameters:  json.RawMessage(calculatorParameters),
		Timeout:     5 * time.Second,
		Idempotent:  true,
		ReadOnly:    true,
		Run:         calculate,
	}
}

// EvaluationError says that the calculator could not evaluate an expression.
// Only its type reaches the model.
type EvaluationError struct {
	// Reason is a fixed description of what went wrong; it never quotes the
	// expression.
	Reason string
	// Offset is the byte offset in the expression where it went wrong.
	Offset int
}

func (e *EvaluationError) Error() string {
	return fmt.Sprintf("calculator: %s at offset %d", e.Reason, e.Offset)
}

// maxCalculatorArgs bounds the arguments the calculator decodes: 1000
// characters, each escaped as a surrogate pair, fit with room to spare.
const maxCalculatorArgs = 64 << 10

func calculate(_ context.Context, args json.RawMessage) (string, error) {
	if len(args) > maxCalculatorArgs {
		return "", &EvaluationError{Reason: "expression too long"}
	}
	var in struct {
		Expression *string `json:"expression"`
	}
	if err := json.Unmarshal(args, &in); err != nil || in.Expression == nil {
		return "", &EvaluationError{Reason: "arguments must be {\"expression\": string}"}
	}
	v, err := evaluate(*in.Expression)
	if err != nil {
		return "", err
	}
	return formatNumber(v), nil
}

// evaluate parses and evaluates one expression.
func evaluate(expr string) (float64, error) {
	switch {
	case len(expr) > MaxExpressionLen*utf8.UTFMax || utf8.RuneCountInString(expr) > MaxExpressionLen:
		return 0, &EvaluationError{Reason: "expression too long"}
	case strings.TrimSpace(expr) == "":
		return 0, &EvaluationError{Reason: "empty expression"}
	}
	p := &parser{s: expr}
	v, err := p.sum()
	if err != nil {
		return 0, err
	}
	p.skipSpace()
	if p.pos < len(p.s) {
		return 0, p.fail("unexpected character")
	}
	return v, nil
}

// parser is a recursive-descent parser and evaluator for
//
//	sum    = term { ("+" | "-") term }
//	term   = factor { ("*" | "/" | "%") factor }
//	factor = ("+" | "-") factor | power
//	power  = atom [ "**" factor ]
//	atom   = number | "(" sum ")"
//	number = digits [ "." [digits] ] [ exponent ] | "." digits [ exponent ]
//
// which is Python's grammar for these operators.
type parser struct {
	s     string
	pos   int
	depth int
}

func (p *parser) fail(reason string) error {
	return &EvaluationError{Reason: reason, Offset: p.pos}
}

func (p *parser) skipSpace() {
	for p.pos < len(p.s) {
		switch p.s[p.pos] {
		case ' ', '\t', '\n', '\r':
			p.pos++
		default:
			return
		}
	}
}

// peek returns the next non-space byte, or 0 at the end.
func (p *parser) peek() byte {
	p.skipSpace()
	if p.pos < len(p.s) {
		return p.s[p.pos]
	}
	return 0
}

// enter counts one level of nesting; leave undoes it.
func (p *parser) enter() error {
	p.depth++
	if p.depth > MaxExpressionDepth {
		return p.fail("expression nested too deeply")
	}
	return nil
}

func (p *parser) leave() { p.depth-- }

func (p *parser) sum() (float64, error) {
	x, err := p.term()
	if err != nil {
		return 0, err
	}
	for {
		op := p.peek()
		if op != '+' && op != '-' {
			return x, nil
		}
		at := p.pos
		p.pos++
		y, err := p.term()
		if err != nil {
			return 0, err
		}
		if op == '+' {
			x += y
		} else {
			x -= y
		}
		if x, err = checked(x, at); err != nil {
			return 0, err
		}
	}
}

func (p *parser) term() (float64, error) {
	x, err := p.factor()
	if err != nil {
		return 0, err
	}
	for {
		op := p.peek()
		if op != '*' && op != '/' && op != '%' {
			return x, nil
		}
		if op == '/' && strings.HasPrefix(p.s[p.pos:], "//") {
			return 0, p.fail("floor division is not supported")
		}
		at := p.pos
		p.pos++
		y, err := p.factor()
		if err != nil {
			return 0, err
		}
		switch op {
		case '*':
			x *= y
		case '/':
			if y == 0 {
				return 0, &EvaluationError{Reason: "division by zero", Offset: at}
			}
			x /= y
		case '%':
			if y == 0 {
				return 0, &EvaluationError{Reason: "modulo by zero", Offset: at}
			}
			x = pyMod(x, y)
		}
		if x, err = checked(x, at); err != nil {
			return 0, err
		}
	}
}

func (p *parser) factor() (float64, error) {
	switch op := p.peek(); op {
	case '+', '-':
		if err := p.enter(); err != nil {
			return 0, err
		}
		defer p.leave()
		p.pos++
		x, err := p.factor()
		if err != nil {
			return 0, err
		}
		if op == '-' {
			x = -x
		}
		return x, nil
	}
	return p.power()
}

func (p *parser) power() (float64, error) {
	x, err := p.atom()
	if err != nil {
		return 0, err
	}
	if p.peek() != '*' || !strings.HasPrefix(p.s[p.pos:], "**") {
		return x, nil
	}
	at := p.pos
	p.pos += 2
	if err := p.enter(); err != nil {
		return 0, err
	}
	defer p.leave()
	y, err := p.factor()
	if err != nil {
		return 0, err
	}
	return pow(x, y, at)
}

func (p *parser) atom() (float64, error) {
	c := p.peek()
	switch {
	case c == '(':
		if err := p.enter(); err != nil {
			return 0, err
		}
		defer p.leave()
		p.pos++
		x, err := p.sum()
		if err != nil {
			return 0, err
		}
		if p.peek() != ')' {
			return 0, p.fail("missing closing parenthesis")
		}
		p.pos++
		return x, nil
	case c == '.' || isDigit(c):
		return p.number()
	case c == 0:
		return 0, p.fail("unexpected end of expression")
	default:
		return 0, p.fail("unexpected character")
	}
}

func (p *parser) number() (float64, error) {
	start := p.pos
	digits := p.digits()
	if p.pos < len(p.s) && p.s[p.pos] == '.' {
		p.pos++
		digits += p.digits()
	}
	if digits == 0 {
		return 0, p.fail("malformed number")
	}
	if p.pos < len(p.s) && (p.s[p.pos] == 'e' || p.s[p.pos] == 'E') {
		p.pos++
		if p.pos < len(p.s) && (p.s[p.pos] == '+' || p.s[p.pos] == '-') {
			p.pos++
		}
		if p.digits() == 0 {
			return 0, p.fail("malformed number")
		}
	}
	v, err := strconv.ParseFloat(p.s[start:p.pos], 64)
	if err != nil && v != 0 { // an underflow to 0 is fine, as in Python
		return 0, &EvaluationError{Reason: "number out of range", Offset: start}
	}
	return checked(v, start)
}

func (p *parser) digits() int {
	n := 0
	for p.pos < len(p.s) && isDigit(p.s[p.pos]) {
		p.pos++
		n++
	}
	return n
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// checked refuses NaN, infinities and magnitudes over MaxMagnitude.
func checked(x float64, at int) (float64, error) {
	if math.IsNaN(x) || math.IsInf(x, 0) || math.Abs(x) > MaxMagnitude {
		return 0, &EvaluationError{Reason: "result out of range", Offset: at}
	}
	return x, nil
}

// pyMod is Python's %: the result has the sign of the divisor.
func pyMod(x, y float64) float64 {
	r := math.Mod(x, y)
	if r != 0 && (r < 0) != (y < 0) {
		r += y
	}
	return r
}

// pow is x**y with Python's errors, refusing results out of range before
// computing them.
func pow(x, y float64, at int) (float64, error) {
	switch {
	case x == 0 && y < 0:
		return 0, &EvaluationError{Reason: "zero to a negative power", Offset: at}
	case x < 0 && y != math.Trunc(y):
		return 0, &EvaluationError{Reason: "fractional power of a negative number", Offset: at}
	}
	if ax := math.Abs(x); ax != 0 && ax != 1 {
		// log10|x**y| = y*log10|x|; finite, since |y| <= 1e300 and
		// |log10|x|| < 310.
		if y*math.Log10(ax) > 301 {
			return 0, &EvaluationError{Reason: "result out of range", Offset: at}
		}
	}
	return checked(math.Pow(x, y), at)
}

// formatNumber prints x like Python's repr of a float, but exact integers
// below 2**53 without ".0".
func formatNumber(x float64) string {
	if x == 0 {
		return "0"
	}
	if x == math.Trunc(x) && math.Abs(x) < 1<<53 {
		return strconv.FormatInt(int64(x), 10)
	}
	e := strconv.FormatFloat(x, 'e', -1, 64) // shortest digits, d.ddde±XX
	exp, _ := strconv.Atoi(e[strings.LastIndexByte(e, 'e')+1:])
	if exp < -4 || exp >= 16 {
		return e
	}
	s := strconv.FormatFloat(x, 'f', -1, 64)
	if !strings.Contains(s, ".") {
		s += ".0"
	}
	return s
}
