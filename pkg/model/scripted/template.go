package scripted

import (
	"errors"
	"fmt"
	"strings"
	"text/template"
	"text/template/parse"

	"github.com/toolfleet/toolfleet/pkg/loop"
)

// funcs declares the one function a script may call. Its body here is never
// run: render binds it to the transcript.
var funcs = template.FuncMap{"result": func(string) string { return "" }}

// parseContent parses a turn's content. It returns nil for plain text, and
// an error for a template that uses anything but {{result "id"}} and string
// literals.
func parseContent(content string) (*template.Template, error) {
	if !strings.Contains(content, "{{") {
		return nil, nil
	}
	tmpl, err := template.New("content").Funcs(funcs).Option("missingkey=error").Parse(content)
	if err != nil {
		return nil, err
	}
	for _, n := range tmpl.Tree.Root.Nodes {
		if err := checkNode(n); err != nil {
			return nil, err
		}
	}
	if len(tmpl.Templates()) > 1 {
		return nil, errors.New("template definitions are not allowed")
	}
	return tmpl, nil
}

func checkNode(n parse.Node) error {
	switch n := n.(type) {
	case *parse.TextNode:
		return nil
	case *parse.ActionNode:
		p := n.Pipe
		if p == nil || len(p.Decl) > 0 || len(p.Cmds) != 1 {
			return fmt.Errorf("%s: only {{result \"id\"}} is allowed", n)
		}
		args := p.Cmds[0].Args
		if len(args) == 1 {
			if _, ok := args[0].(*parse.StringNode); ok {
				return nil
			}
		}
		if len(args) == 2 {
			id, isIdent := args[0].(*parse.IdentifierNode)
			_, isString := args[1].(*parse.StringNode)
			if isIdent && id.Ident == "result" && isString {
				return nil
			}
		}
		return fmt.Errorf("%s: only {{result \"id\"}} is allowed", n)
	default:
		return fmt.Errorf("%s: only {{result \"id\"}} is allowed", n)
	}
}

// render executes a content template against a run's transcript.
func render(tmpl *template.Template, msgs []loop.Message) (string, error) {
	results := make(map[string]string)
	for _, m := range msgs {
		if m.Role == "tool" {
			results[m.ToolCallID] = m.Content
		}
	}
	t, err := tmpl.Clone()
	if err != nil {
		return "", err
	}
	t.Funcs(template.FuncMap{"result": func(id string) string {
		if r, ok := results[id]; ok {
			return r
		}
		return NoResult
	}})
	var w limitedWriter
	w.limit = MaxContentBytes
	if err := t.Execute(&w, nil); err != nil {
		return "", err
	}
	return w.b.String(), nil
}

var errContentTooLarge = fmt.Errorf("rendered content over %d bytes", MaxContentBytes)

type limitedWriter struct {
	b     strings.Builder
	limit int
}

func (w *limitedWriter) Write(p []byte) (int, error) {
	if w.b.Len()+len(p) > w.limit {
		return 0, errContentTooLarge
	}
	return w.b.Write(p)
}
