package demo

import (
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Bounds of reading a prompt. Everything the demo model does is linear in
// the prompt it reads, and it reads at most MaxPromptBytes of it.
const (
	// MaxPromptBytes bounds the prompt the model reads; a longer one gets
	// an answer that says so.
	MaxPromptBytes = 64 << 10
	// MaxExpressions bounds the calculator calls of one round; the
	// expressions past it are counted and named in the answer.
	MaxExpressions = 16
	// maxDepth bounds the nesting of parentheses and unary signs, as the
	// calculator does (harness.MaxExpressionDepth).
	maxDepth = 64
	// maxExprTokens bounds the tokens of one expression, so that reading
	// is linear in the prompt even when every attempt fails late.
	maxExprTokens = 128
	// maxNumberLen bounds one number's text.
	maxNumberLen = 64
)

// tokenKind is the kind of one token of a prompt.
type tokenKind uint8

const (
	tBreak  tokenKind = iota // anything that is not arithmetic: a word, punctuation
	tNum                     // a number, its text in calculator syntax
	tOp                      // a binary operator: + - * / % **
	tLParen                  // (
	tRParen                  // )
	tPost                    // "squared" or "cubed": text is the exponent
)

type token struct {
	kind tokenKind
	text string
}

// operand is one piece of arithmetic found in a prompt: an expression with
// at least one operator, or a bare number.
type operand struct {
	expr    string
	literal bool
}

// plan is what the model reads out of a prompt.
type plan struct {
	// operands are the expressions and bare numbers, in prompt order.
	operands []operand
	// combine is the operator that joins the results ("+" for "their
	// sum", "*" for "their product"), or "".
	combine string
	// tooLong says the prompt was longer than MaxPromptBytes.
	tooLong bool
}

// exprs returns the expressions (not the bare numbers) of p, in order.
func (p plan) exprs() []string {
	var out []string
	for _, o := range p.operands {
		if !o.literal {
			out = append(out, o.expr)
		}
	}
	return out
}

// combined returns the operands the combining step joins: the expressions
// when there are at least two, else every operand. ok is false when there
// is nothing to combine.
func (p plan) combined() (ops []operand, ok bool) {
	if p.combine == "" {
		return nil, false
	}
	var exprs []operand
	for _, o := range p.operands {
		if !o.literal {
			exprs = append(exprs, o)
		}
	}
	if len(exprs) >= 2 {
		return exprs, true
	}
	if len(p.operands) >= 2 {
		return p.operands, true
	}
	return nil, false
}

var (
	sumRe     = regexp.MustCompile(`\b(?:(?:their|the)\s+(?:sum|total)|(?:add|sum)\s+(?:them|these|those|both|the results)|add(?:ed)?\s+(?:them\s+)?together|in\s+total)\b`)
	productRe = regexp.MustCompile(`\b(?:(?:their|the)\s+product|multiply\s+(?:them|these|those|both|the results)|multiplied\s+together)\b`)
)

// read reads the arithmetic out of a prompt. It never fails: a prompt with
// no arithmetic gives a plan without operands.
func read(prompt string) plan {
	if len(prompt) > MaxPromptBytes {
		return plan{tooLong: true}
	}
	lower := strings.ToLower(prompt)
	toks := lex(lower)
	var p plan
	for i := 0; i < len(toks); {
		switch toks[i].kind {
		case tNum, tLParen, tOp:
		default:
			i++
			continue
		}
		e := exprParser{toks: toks, pos: i}
		s, ok := e.expr()
		if !ok {
			i++
			continue
		}
		p.operands = append(p.operands, operand{expr: s, literal: e.ops == 0})
		i = e.pos
	}
	switch {
	case sumRe.MatchString(lower):
		p.combine = "+"
	case productRe.MatchString(lower):
		p.combine = "*"
	}
	return p
}

// exprParser checks one expression's structure and writes it in the
// calculator's syntax; the calculator evaluates it. Its grammar:
//
//	expr    = unary { op unary }
//	unary   = { "+" | "-" } primary { postfix }
//	primary = number | "(" expr ")"
type exprParser struct {
	toks  []token
	pos   int
	start int
	depth int
	ops   int // binary operators and postfixes
	b     strings.Builder
}

func (p *exprParser) peek() token {
	if p.pos < len(p.toks) && p.pos-p.start < maxExprTokens {
		return p.toks[p.pos]
	}
	return token{kind: tBreak}
}

func (p *exprParser) expr() (string, bool) {
	p.start = p.pos
	if !p.sum() {
		return "", false
	}
	return p.b.String(), true
}

func (p *exprParser) sum() bool {
	if !p.unary() {
		return false
	}
	for p.peek().kind == tOp {
		// An operator not followed by an operand ends the expression
		// before it: "7 * 6 -" reads as 7 * 6.
		save, n := p.pos, p.b.Len()
		op := p.peek().text
		p.pos++
		p.b.WriteString(" " + op + " ")
		if !p.unary() {
			p.pos = save
			truncate(&p.b, n)
			return true
		}
		p.ops++
	}
	return true
}

func (p *exprParser) unary() bool {
	signs := 0
	for t := p.peek(); t.kind == tOp && (t.text == "+" || t.text == "-"); t = p.peek() {
		if signs++; signs+p.depth > maxDepth {
			return false
		}
		p.b.WriteString(t.text)
		p.pos++
	}
	if !p.primary() {
		return false
	}
	for p.peek().kind == tPost {
		p.b.WriteString(" ** " + p.peek().text)
		p.pos++
		p.ops++
	}
	return true
}

func (p *exprParser) primary() bool {
	switch t := p.peek(); t.kind {
	case tNum:
		p.b.WriteString(t.text)
		p.pos++
		return true
	case tLParen:
		if p.depth++; p.depth > maxDepth {
			return false
		}
		p.pos++
		p.b.WriteString("(")
		if !p.sum() || p.peek().kind != tRParen {
			return false
		}
		p.pos++
		p.b.WriteString(")")
		p.depth--
		return true
	}
	return false
}

// truncate cuts b back to its first n bytes.
func truncate(b *strings.Builder, n int) {
	s := b.String()[:n]
	b.Reset()
	b.WriteString(s)
}

// words maps the words (and phrases) the model reads to tokens.
var words = map[string]token{
	"plus": {tOp, "+"}, "minus": {tOp, "-"}, "times": {tOp, "*"}, "x": {tOp, "*"},
	"over": {tOp, "/"}, "mod": {tOp, "%"}, "modulo": {tOp, "%"},
	"multiplied by": {tOp, "*"}, "divided by": {tOp, "/"},
	"to the power of": {tOp, "**"}, "raised to the power of": {tOp, "**"}, "raised to": {tOp, "**"},
	"squared": {tPost, "2"}, "cubed": {tPost, "3"},
}

// phrases are the multi-word entries of words, longest first.
var phrases = []string{"raised to the power of", "to the power of", "multiplied by", "divided by", "raised to"}

var numberWords = map[string]int{
	"zero": 0, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
	"eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "thirteen": 13, "fourteen": 14,
	"fifteen": 15, "sixteen": 16, "seventeen": 17, "eighteen": 18, "nineteen": 19,
	"twenty": 20, "thirty": 30, "forty": 40, "fifty": 50, "sixty": 60, "seventy": 70,
	"eighty": 80, "ninety": 90, "hundred": 100, "thousand": 1000,
}

// lex splits a lowercased prompt into tokens. Adjacent breaks collapse.
func lex(s string) []token {
	var toks []token
	add := func(t token) {
		if t.kind == tBreak && len(toks) > 0 && toks[len(toks)-1].kind == tBreak {
			return
		}
		toks = append(toks, t)
	}
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == ' ' || r == '\t' || r == '\n' || r == '\r':
			i += size
		case isDigit(s[i]) || (s[i] == '.' && i+1 < len(s) && isDigit(s[i+1])):
			text, n := lexNumber(s[i:])
			i += n
			if len(text) > maxNumberLen {
				add(token{kind: tBreak})
				continue
			}
			add(token{tNum, text})
		case unicode.IsLetter(r):
			if w, n, ok := lexPhrase(s[i:]); ok {
				add(w)
				i += n
				continue
			}
			word, n := lexWord(s[i:])
			i += n
			if t, ok := words[word]; ok {
				add(t)
			} else if v, ok := compoundNumber(word); ok {
				add(token{tNum, itoa(v)})
			} else {
				add(token{kind: tBreak})
			}
		default:
			i += size
			switch r {
			case '+':
				add(token{tOp, "+"})
			case '-', '−':
				add(token{tOp, "-"})
			case '*':
				if i < len(s) && s[i] == '*' {
					i++
					add(token{tOp, "**"})
				} else {
					add(token{tOp, "*"})
				}
			case '×':
				add(token{tOp, "*"})
			case '/', '÷':
				add(token{tOp, "/"})
			case '%':
				add(token{tOp, "%"})
			case '^':
				add(token{tOp, "**"})
			case '(':
				add(token{kind: tLParen})
			case ')':
				add(token{kind: tRParen})
			default:
				add(token{kind: tBreak})
			}
		}
	}
	return toks
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// lexNumber reads a decimal number at the start of s: digits with optional
// thousands separators ("1,000"), a fraction and an exponent. It returns
// the number in calculator syntax and the bytes it read.
func lexNumber(s string) (string, int) {
	var b strings.Builder
	i := 0
	digits := func() {
		for i < len(s) {
			switch {
			case isDigit(s[i]):
				b.WriteByte(s[i])
				i++
			case s[i] == ',' && i+3 < len(s) && isDigit(s[i+1]) && isDigit(s[i+2]) && isDigit(s[i+3]) && (i+4 >= len(s) || !isDigit(s[i+4])) && b.Len() > 0:
				i++ // a thousands separator: "1,000"
			default:
				return
			}
		}
	}
	digits()
	if i+1 < len(s) && s[i] == '.' && isDigit(s[i+1]) {
		b.WriteByte('.')
		i++
		for i < len(s) && isDigit(s[i]) {
			b.WriteByte(s[i])
			i++
		}
	}
	if i < len(s) && s[i] == 'e' {
		j := i + 1
		if j < len(s) && (s[j] == '+' || s[j] == '-') {
			j++
		}
		if j < len(s) && isDigit(s[j]) {
			b.WriteString(s[i:j])
			i = j
			for i < len(s) && isDigit(s[i]) {
				b.WriteByte(s[i])
				i++
			}
		}
	}
	return b.String(), i
}

// lexWord reads a word at the start of s: letters, and hyphens between
// letters ("twenty-one").
func lexWord(s string) (string, int) {
	i := 0
	for i < len(s) {
		r, size := utf8.DecodeRuneInString(s[i:])
		if unicode.IsLetter(r) {
			i += size
			continue
		}
		if r == '-' && i+1 < len(s) {
			if next, _ := utf8.DecodeRuneInString(s[i+1:]); unicode.IsLetter(next) {
				i++
				continue
			}
		}
		break
	}
	return s[:i], i
}

// lexPhrase reads a multi-word operator at the start of s.
func lexPhrase(s string) (token, int, bool) {
	for _, ph := range phrases {
		i, ok := 0, true
		for k, w := range strings.Fields(ph) {
			j := i
			for j < len(s) && (s[j] == ' ' || s[j] == '\t' || s[j] == '\n' || s[j] == '\r') {
				j++
			}
			if (k > 0 && j == i) || !strings.HasPrefix(s[j:], w) || (j+len(w) < len(s) && isLetterAt(s, j+len(w))) {
				ok = false
				break
			}
			i = j + len(w)
		}
		if ok {
			return words[ph], i, true
		}
	}
	return token{}, 0, false
}

func isLetterAt(s string, i int) bool {
	r, _ := utf8.DecodeRuneInString(s[i:])
	return unicode.IsLetter(r)
}

// compoundNumber reads a number word, or two joined by a hyphen
// ("twenty-one").
func compoundNumber(w string) (int, bool) {
	if v, ok := numberWords[w]; ok {
		return v, true
	}
	tens, units, found := strings.Cut(w, "-")
	if !found {
		return 0, false
	}
	t, ok1 := numberWords[tens]
	u, ok2 := numberWords[units]
	if !ok1 || !ok2 || t < 20 || t > 90 || t%10 != 0 || u < 1 || u > 9 {
		return 0, false
	}
	return t + u, true
}

func itoa(v int) string {
	const digits = "0123456789"
	if v < 10 {
		return digits[v : v+1]
	}
	return itoa(v/10) + digits[v%10:v%10+1]
}
