package harness

import (
	"strings"
	"testing"
)

func BenchmarkEvaluate(b *testing.B) {
	for _, bc := range []struct{ name, expr string }{
		{"small", "(17 + 25) * 3"},
		{"mixed", "2 ** 10 / 4 - 7 % 3 + .5e1 * -(1.25 - 3)"},
		{"long-sum", strings.TrimSuffix(strings.Repeat("123.5 + ", 100), " + ")},
		{"nested", strings.Repeat("(", 50) + "1" + strings.Repeat(" + 1)", 50)},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := evaluate(bc.expr); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
