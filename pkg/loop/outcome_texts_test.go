package loop

import (
	"go/ast"
	"go/parser"
	gotoken "go/token"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// observationSamples writes each observation text with sample values: a
// tool name the loop must clip and escape, durations, counts, messages.
var observationSamples = map[string]func() string{
	"obsCapRejected":         func() string { return obsCapRejected(40, 32) },
	"obsBudgetRejected":      func() string { return obsBudgetRejected(9, 2) },
	"obsDropped":             func() string { return obsCapRejected(40, 32) + obsDropped(3) },
	"obsRepeatRejected":      func() string { return obsRepeatRejected("call'1") },
	"obsUnknownTool":         func() string { return obsUnknownTool("rm -rf\n/") },
	"obsArgumentError":       func() string { return obsArgumentError("echo", "missing property 'text'") },
	"obsDenied":              func() string { return obsDenied("echo", "not today") },
	"obsApprovalExpired":     func() string { return obsApprovalExpired("echo", 2*time.Minute) },
	"obsApprovalUnavailable": func() string { return obsApprovalUnavailable("echo") },
	"obsWorkerRefused":       func() string { return obsWorkerRefused("echo") },
	"obsRecordUnwritten":     func() string { return obsRecordUnwritten("echo") },
	"obsDispatchFailed":      func() string { return obsDispatchFailed("echo") },
	"obsFailed":              func() string { return obsFailed("echo", "*fs.PathError") },
	"obsTimeout":             func() string { return obsTimeout("echo", 1500*time.Millisecond) },
	"obsWithdrawn":           func() string { return obsWithdrawn("echo", 30*time.Second) },
	"obsOutcomeUnknown":      func() string { return obsOutcomeUnknown("charge_card") },
	"obsRateLimited":         func() string { return obsRateLimited("echo", 1200*time.Millisecond) },
	"obsCancelled":           func() string { return obsCancelled("echo") },
	"obsInputUnanswered":     func() string { return obsInputUnanswered("charge_card") },
	"obsSimulated":           func() string { return obsSimulated("charge_card", []string{"amount", "to"}, "5d41402abc4b2a76") },
	"obsNotReplayed":         func() string { return obsNotReplayed("charge_card") },
	"obsInterrupted":         func() string { return obsInterrupted("charge_card") },
}

// capTexts are the observation texts the loop sends through a variable
// rather than at an answer site: the calls past the round's cap
// (capRejected, sent by record.go), answered rejected.
var capTexts = map[string]bool{"obsCapRejected": true, "obsBudgetRejected": true, "obsDropped": true}

// TestOutcomeTextsAreWhatTheLoopSends holds OutcomeTexts and the loop to
// each other. It reads the loop's source for every place an observation
// text is sent — an answer(call, protocol.OutcomeX, obsY(...)) or a tool
// Message{Content: obsY(...), Outcome: protocol.OutcomeX} — and checks
// that the text obsY writes (with sample values) is a row of OutcomeTexts
// for outcome X; that every row is a text the loop sends; and that an
// answer with any other content is an ok (the tool's output) or the replay
// of a journaled answer. A new wording, or an old one sent for another
// outcome, fails here until the table says so.
func TestOutcomeTextsAreWhatTheLoopSends(t *testing.T) {
	outcomes := map[string]protocol.Outcome{} // "OutcomeOK" -> "ok"
	for _, o := range protocol.Outcomes {
		outcomes[outcomeConst(t, o)] = o
	}
	sites := map[string]map[protocol.Outcome]bool{} // obs func -> outcomes it is sent with
	addSite := func(fn string, o protocol.Outcome) {
		if sites[fn] == nil {
			sites[fn] = map[protocol.Outcome]bool{}
		}
		sites[fn][o] = true
	}
	fset := gotoken.NewFileSet()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		src, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		f, err := parser.ParseFile(fset, path, src, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		placed := map[*ast.CallExpr]bool{} // obs calls found at a site
		ast.Inspect(f, func(n ast.Node) bool {
			switch x := n.(type) {
			case *ast.CallExpr:
				sel, ok := x.Fun.(*ast.SelectorExpr)
				if !ok || sel.Sel.Name != "answer" || len(x.Args) != 3 {
					return true
				}
				oc, isConst := outcomeOf(x.Args[1], outcomes)
				if call, fn := obsCall(x.Args[2]); call != nil {
					if !isConst {
						t.Errorf("%s: %s sent with an outcome that is not a protocol constant", fset.Position(x.Pos()), fn)
					}
					placed[call] = true
					addSite(fn, oc)
				} else if isConst && oc != protocol.OutcomeOK {
					t.Errorf("%s: a %s answer whose text is no observation function of answer.go", fset.Position(x.Pos()), oc)
				}
			case *ast.CompositeLit:
				var content, outcome ast.Expr
				for _, el := range x.Elts {
					if kv, ok := el.(*ast.KeyValueExpr); ok {
						switch key, _ := kv.Key.(*ast.Ident); {
						case key == nil:
						case key.Name == "Content":
							content = kv.Value
						case key.Name == "Outcome":
							outcome = kv.Value
						}
					}
				}
				if call, fn := obsCall(content); call != nil {
					oc, ok := outcomeOf(outcome, outcomes)
					if !ok {
						t.Errorf("%s: %s sent without a protocol outcome constant", fset.Position(x.Pos()), fn)
					}
					placed[call] = true
					addSite(fn, oc)
				}
			}
			return true
		})
		ast.Inspect(f, func(n ast.Node) bool {
			if call, fn := obsCall(n); call != nil && !placed[call] {
				if capTexts[fn] {
					addSite(fn, protocol.OutcomeRejected)
				} else {
					t.Errorf("%s: %s is sent where this test cannot tell its outcome", fset.Position(call.Pos()), fn)
				}
			}
			return true
		})
	}
	if len(sites) < 10 {
		t.Fatalf("found %d observation functions sent, want every one: %v", len(sites), sites)
	}

	rows := make([]*regexp.Regexp, len(OutcomeTexts))
	for i, row := range OutcomeTexts {
		rows[i] = textPattern(row.Text)
		if row.When == "" {
			t.Errorf("row %d (%s) does not say when it is sent", i, row.Outcome)
		}
	}
	used := make([]bool, len(OutcomeTexts))
	for fn, ocs := range sites {
		sample, ok := observationSamples[fn]
		if !ok {
			t.Errorf("%s is sent, but this test has no sample of it: add one", fn)
			continue
		}
		text := sample()
		for o := range ocs {
			found := false
			for i, row := range OutcomeTexts {
				if row.Outcome == o && rows[i].MatchString(text) {
					found, used[i] = true, true
				}
			}
			if !found {
				t.Errorf("%s sends %q as %s: no row of OutcomeTexts for it", fn, text, o)
			}
		}
	}
	for i, row := range OutcomeTexts {
		if !used[i] && row.Outcome != protocol.OutcomeOK {
			t.Errorf("OutcomeTexts row %q (%s) is no text the loop sends", row.Text, row.Outcome)
		}
	}
	for _, o := range protocol.Outcomes {
		found := false
		for _, row := range OutcomeTexts {
			found = found || row.Outcome == o
		}
		if !found {
			t.Errorf("outcome %s has no row in OutcomeTexts", o)
		}
	}
}

// TestTextPattern: a row's placeholders match any text and a bracketed
// part may be left out; the fixed words must be there, exactly.
func TestTextPattern(t *testing.T) {
	p := textPattern("Tool '<name>' blocked by approval[: <reason>]")
	for s, want := range map[string]bool{
		"Tool 'echo' blocked by approval":          true,
		"Tool 'a\\'b' blocked by approval: no way": true,
		"Tool 'echo' blocked by approvals":         false,
		"Tool 'echo' was blocked by approval":      false,
		"tool 'echo' blocked by approval":          false,
	} {
		if got := p.MatchString(s); got != want {
			t.Errorf("%q: match %v, want %v", s, got, want)
		}
	}
}

// textPattern is the regular expression of a row's Text: each <placeholder>
// any text, each [part] optional, the rest literal.
func textPattern(text string) *regexp.Regexp {
	var b strings.Builder
	b.WriteString(`^(?s)`)
	for i := 0; i < len(text); i++ {
		switch c := text[i]; c {
		case '<':
			end := strings.IndexByte(text[i:], '>')
			b.WriteString(`.*?`)
			i += end
		case '[':
			b.WriteString(`(?:`)
		case ']':
			b.WriteString(`)?`)
		default:
			b.WriteString(regexp.QuoteMeta(string(c)))
		}
	}
	b.WriteString(`$`)
	return regexp.MustCompile(b.String())
}

// obsCall returns n as a call of an observation function (obsX(...)) and
// its name, or nil.
func obsCall(n ast.Node) (*ast.CallExpr, string) {
	call, ok := n.(*ast.CallExpr)
	if !ok {
		return nil, ""
	}
	id, ok := call.Fun.(*ast.Ident)
	if !ok || !strings.HasPrefix(id.Name, "obs") || len(id.Name) < 4 || id.Name[3] < 'A' || id.Name[3] > 'Z' {
		return nil, ""
	}
	return call, id.Name
}

// outcomeOf resolves protocol.OutcomeX, and reports false for anything
// else.
func outcomeOf(e ast.Expr, outcomes map[string]protocol.Outcome) (protocol.Outcome, bool) {
	sel, ok := e.(*ast.SelectorExpr)
	if !ok {
		return "", false
	}
	if pkg, ok := sel.X.(*ast.Ident); !ok || pkg.Name != "protocol" {
		return "", false
	}
	o, ok := outcomes[sel.Sel.Name]
	return o, ok
}

// outcomeConst is the name of o's constant in pkg/protocol, read from its
// source (outcome.go).
func outcomeConst(t *testing.T, o protocol.Outcome) string {
	t.Helper()
	consts := protocolOutcomeConsts(t)
	for name, v := range consts {
		if v == string(o) {
			return name
		}
	}
	t.Fatalf("outcome %q has no constant in pkg/protocol/outcome.go", o)
	return ""
}

var outcomeConsts map[string]string

func protocolOutcomeConsts(t *testing.T) map[string]string {
	if outcomeConsts != nil {
		return outcomeConsts
	}
	f, err := parser.ParseFile(gotoken.NewFileSet(), "../protocol/outcome.go", nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	outcomeConsts = map[string]string{}
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != gotoken.CONST {
			continue
		}
		for _, s := range g.Specs {
			vs := s.(*ast.ValueSpec)
			for i, n := range vs.Names {
				if i < len(vs.Values) {
					if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == gotoken.STRING {
						outcomeConsts[n.Name] = strings.Trim(lit.Value, `"`)
					}
				}
			}
		}
	}
	return outcomeConsts
}
