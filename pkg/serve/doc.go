// Package serve is the serving coordinator: it serves the runs clients
// submit (pkg/client) from a connection the program owns, sharing the work
// with every other serving coordinator of the fleet. "coordinator serve" is
// this package plus flags; a Go service serves its own agents with it.
//
//	srv, err := serve.New(ctx, nc, serve.Config{
//		Models: (&providers.Models{}).Model, // the shipped providers (pkg/model/providers)
//	})
//	if err != nil { ... }
//	defer srv.Close()
//	err = srv.Serve(ctx) // until ctx ends; runs in flight are handed off
//
// # Serving runs
//
//   - Submitters store a [protocol.RunRequest] in the runs stream (a work
//     queue) on <prefix>.run.submit.<client>.<agent>.<submission_id>
//     (pkg/client), with a per-client Nats-Msg-Id and the agent in
//     Fleet-Agent ([protocol.HeaderAgent]): the server's acknowledgement is
//     the acceptance, whether or not a coordinator runs. A run of an agent
//     whose definition's clients do not name its client is refused.
//     The run id is derived from the client and the submission id
//     ([protocol.SubmissionRunID]), so a retry names the same run. No
//     coordinator answers a submission; the one that takes it checks it,
//     and a refused request gets a result saying why.
//   - Coordinators take stored requests from the stream's one durable pull
//     consumer, each only when it has a free run slot
//     (Config.MaxConcurrentRuns), and heartbeat while a run lasts. A request
//     whose coordinator dies is taken again after Config.AckWait, at most
//     Config.MaxDeliver times, and the run resumed from its journal (the
//     journal stream, one subject per run; see RunDurable in pkg/loop). On
//     shutdown runs are handed off at their next step boundary, not
//     cancelled.
//   - Each run runs as its agent (docs/agents.md): the newest valid
//     revision of the definition stored in the agents bucket, pinned in the
//     run's journal, with its instructions, its model (built by
//     Config.Models), only its tools, its limits under the coordinator's
//     ceilings, its approvals, budget and priority class. The default agent
//     ("default"), when the fleet stores none, runs on Config.Model with
//     every tool.
//   - A client's calls go out under its name: each client holds at most its
//     share of a tool's queue, and batch-class calls start only when no
//     interactive call of the same tool waits. A call's progress reports
//     reach the run's client on its progress subject.
//   - Each result, a [protocol.RunResult], is created once in the runs
//     bucket under <client>.<run_id> (a second coordinator's result for the
//     same run is dropped; a submission whose run has a result is
//     acknowledged without running) and then announced on
//     <prefix>.run.result.<client>.<run_id>.
//
// # Limits
//
// Config.Loop's limits are ceilings. A request may lower max_rounds,
// max_tool_calls_per_round, max_observation_chars and the tool timeout, and
// add tools that need approval; a value above a ceiling is clamped to it,
// and the result lists the limits applied and which were clamped. Model,
// approval timeout and argument tracing are the operator's alone.
//
// # Dependencies
//
// The package links no model provider's SDK, no embedded NATS server and
// no OpenTelemetry SDK or exporter: a program chooses its providers
// (pkg/model/providers, or its own [loop.Model]s through Config.Models) and
// installs its own tracer provider.
//
// # Caveats
//
// A request is delivered at least once, and resumed, not started over: a
// journaled model response is not asked again and a journaled call is not
// published again (its derived call key deduplicates it within the calls
// stream's window). A request delivered MaxDeliver times without a result
// gets an "abandoned" error result (from the server's max-deliveries
// advisory). A queued request nobody takes within QueuedRunMaxAge is
// dropped without a result. Results expire after ResultTTL.
package serve
