package agent

import (
	"errors"
	"fmt"

	"github.com/toolfleet/toolfleet/pkg/loop"
)

// ErrModelMismatch is returned by [Model.Match] for a model client that
// names another provider or model than the definition's.
var ErrModelMismatch = errors.New("agent: the model is not the agent's")

// Match checks that client is a client of m. A client that names its
// provider and model ([loop.Describer], as the clients of the shipped
// providers do) must name m's provider (openai-responses names itself
// openai, as OpenTelemetry's gen_ai.provider.name does) and m's model
// name; otherwise the error wraps [ErrModelMismatch] and names both
// (names only, never a key). A client that does not describe itself (a
// test's fake, a scripted model) cannot be told apart and is accepted.
func (m Model) Match(client loop.Model) error {
	d, ok := client.(loop.Describer)
	if !ok {
		return nil
	}
	provider, name := d.Describe()
	want := m.Provider
	if want == "openai-responses" {
		want = "openai"
	}
	if provider != want || name != m.Name {
		return fmt.Errorf("%w: the client is %s %q, the agent's model is %s %q", ErrModelMismatch, provider, name, m.Provider, m.Name)
	}
	return nil
}
