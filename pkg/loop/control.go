package loop

import "github.com/toolfleet/toolfleet/pkg/schema"

// Run control (docs/design.md, "Run control"): a replay answers a round's
// calls from a recorded run's journal, a dry run answers the calls of
// tools not declared read-only with what would have run. Both enter the
// round at two named points, through one small interface, and a plain run's
// is [noControl], which answers nothing.

// control answers calls of a round in place of the fleet. Only the round's
// goroutine calls it.
type control interface {
	// beforeApprove answers, after validation, the calls that must reach
	// neither the gate nor the fleet (a replay answers every valid call).
	beforeApprove(ru *run, round int, calls []roundCall)
	// beforeDispatch answers, after the gate, the calls that must not be
	// published (a dry run's simulated calls).
	beforeDispatch(ru *run, round int, calls []roundCall)
}

// noControl is a plain run's [control].
type noControl struct{}

func (noControl) beforeApprove(*run, int, []roundCall)  {}
func (noControl) beforeDispatch(*run, int, []roundCall) {}

// dryRun is a dry run's [control]: a call of a tool not declared read-only
// (protocol.ToolSpec.ReadOnly) is answered simulated once the gate let it
// through; a read-only tool's call runs.
type dryRun struct{}

func (dryRun) beforeApprove(*run, int, []roundCall) {}

func (dryRun) beforeDispatch(ru *run, _ int, calls []roundCall) {
	for i := range calls {
		c := &calls[i]
		if c.done || c.entry == nil || c.entry.spec.ReadOnly {
			continue
		}
		ru.answerSimulated(c)
	}
}

var (
	_ control = noControl{}
	_ control = dryRun{}
)

// controlOf is the control of a run configured by c.
func controlOf(c *Config) control {
	if c.DryRun {
		return dryRun{}
	}
	return noControl{}
}

// canonicalArgKeys returns the keys of canonical arguments (an object), as
// a trace line gives them; none when they are not an object.
func canonicalArgKeys(args []byte) []string {
	obj, err := schema.ParseObject(args)
	if err != nil {
		return nil
	}
	return argKeys(obj)
}
