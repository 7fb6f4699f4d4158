// Package runner runs the ReAct loop over a toolfleet from any Go program:
// the model's tool calls are published to the fleet's workers, their
// results gathered, every call answered exactly once.
//
//	r, err := runner.New(ctx, nc, runner.Config{Model: model})
//	if err != nil { ... }
//	defer r.Close()
//	res, err := r.Run(ctx, "What is 2 ** 10?")
//
// Any [loop.Model] will do: the providers in pkg/model, or the scripted
// model (pkg/model/scripted), which makes a run deterministic in tests.
//
// # Guarantees
//
//   - Calls are checked before they leave (name, arguments against the
//     catalog's schema, the per-round cap), published with their deadline
//     and gathered against it; a call nobody answers is answered
//     "timeout".
//   - A call of a tool that requires approval (in its spec or in
//     Config.Loop.RequireApproval) waits for an operator's decision on the
//     fleet's approval subjects, and fails closed: an error or an expiry
//     denies.
//   - No call is published while the fleet's streams differ from their
//     expected configuration; New refuses to start when they do.
//   - [Runner.RunDurable] journals every step of the run in the fleet's
//     journal stream, so [Runner.Resume] in another process continues it
//     where it stopped: no model response asked again, no answered call run
//     again.
//
// Metrics come through Config.Registerer (Prometheus) or
// Config.Loop.Observer, traces through Config.Loop.TracerProvider.
//
// [Runner.Fleet] hands out what the loop runs calls on (catalog,
// dispatcher, approval gate, loop settings), for a front end that runs
// calls without the runner's model, as "coordinator mcp" does.
package runner
