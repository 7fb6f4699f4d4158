package demo

import (
	"strings"
	"testing"
)

// FuzzRead holds the prompt reader to its bounds: it never panics, reads at
// most MaxPromptBytes, and every expression it writes is short, made of the
// calculator's characters only, and balanced.
func FuzzRead(f *testing.F) {
	for _, s := range []string{
		"What is 7 times 6? And 2 to the power of 10?",
		"What is (17 + 25) * 3, what is 2 ** 10, and what is their sum?",
		"twenty-one squared minus 1,000.5e-3 ÷ (2 − 1)",
		"((((((1))))))", "1e308 ** 1e308", "1 / 0", "\x1b]52;c;aGk=\x07 1+1",
		"multiply them: 3, 4", "2 raised to the power", ".5 .e5 5e 5e+",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, prompt string) {
		p := read(prompt)
		for _, o := range p.operands {
			e := o.expr
			if e == "" || len(e) > maxExprTokens*(maxNumberLen+4) {
				t.Fatalf("expression of %d bytes", len(e))
			}
			if strings.Trim(e, "0123456789.e+-*/%() ") != "" {
				t.Fatalf("expression %q has other characters", e)
			}
			if strings.Count(e, "(") != strings.Count(e, ")") {
				t.Fatalf("expression %q is unbalanced", e)
			}
		}
	})
}
