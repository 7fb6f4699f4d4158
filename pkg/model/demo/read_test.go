package demo

import (
	"reflect"
	"strings"
	"testing"
)

func TestRead(t *testing.T) {
	for _, tc := range []struct {
		prompt  string
		exprs   []string
		combine string
	}{
		{"What is 7 times 6?", []string{"7 * 6"}, ""},
		{"What is 7 times 6? And 2 to the power of 10?", []string{"7 * 6", "2 ** 10"}, ""},
		{"What is (17 + 25) * 3, what is 2 ** 10, and what is their sum?", []string{"(17 + 25) * 3", "2 ** 10"}, "+"},
		{"seven times six", []string{"7 * 6"}, ""},
		{"twenty-one divided by 3", []string{"21 / 3"}, ""},
		{"What is 12 squared plus 5 cubed?", []string{"12 ** 2 + 5 ** 3"}, ""},
		{"2 raised to the power of 8, 3 ^ 4 and 10 mod 3", []string{"2 ** 8", "3 ** 4", "10 % 3"}, ""},
		{"1,000 × 3 ÷ 4 − 1", []string{"1000 * 3 / 4 - 1"}, ""},
		{"What is -3.5e2 multiplied by 2?", []string{"-3.5e2 * 2"}, ""},
		{"7 * 6 - and more", []string{"7 * 6"}, ""},
		{"((1 + 2) * 3", []string{"(1 + 2) * 3"}, ""},
		{"1 / 0", []string{"1 / 0"}, ""},
		{"1e308 ** 1e308", []string{"1e308 ** 1e308"}, ""},
		{"Multiply 3 and 4: their product?", nil, "*"},
		{"Hello there, how are you?", nil, ""},
		{"I have 3 apples", nil, ""},
		{"tomorrow the powerful", nil, ""},
	} {
		p := read(tc.prompt)
		if got := p.exprs(); !reflect.DeepEqual(got, tc.exprs) {
			t.Errorf("read(%q) exprs=%q, want %q", tc.prompt, got, tc.exprs)
		}
		if p.combine != tc.combine {
			t.Errorf("read(%q) combine=%q, want %q", tc.prompt, p.combine, tc.combine)
		}
	}
}

func TestReadHostile(t *testing.T) {
	deep := strings.Repeat("(", 10000) + "1" + strings.Repeat(")", 10000)
	p := read(deep)
	for _, e := range p.exprs() {
		if strings.Count(e, "(") > maxDepth {
			t.Errorf("expression nested %d deep", strings.Count(e, "("))
		}
	}
	if p := read(strings.Repeat("1+", MaxPromptBytes)); !p.tooLong {
		t.Error("an oversized prompt is read")
	}
	p = read(strings.Repeat("1+", MaxPromptBytes/2-1) + "(")
	for _, e := range p.exprs() {
		if n := len(strings.Fields(e)); n > maxExprTokens {
			t.Errorf("expression of %d tokens", n)
		}
	}
	for _, e := range read("2\x1b[31m * \x00 3\u202e + 4 \x1b]52;c;aGk=\x07 5 * 5").exprs() {
		if strings.Trim(e, "0123456789.e+-*/%() ") != "" {
			t.Errorf("expression %q carries other characters", e)
		}
	}
}
