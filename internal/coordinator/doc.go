// Package coordinator wires a coordinator process together: it connects to
// NATS (or starts an embedded JetStream server with in-process toolworkers),
// makes sure the fleet's streams exist, reads the tool catalog, and runs the
// ReAct loop of pkg/loop over the NATS dispatcher and approval gate.
//
// cmd/coordinator is a thin main over this package; e2e tests and
// benchmarks use it directly.
//
// # Serving runs
//
// [Coordinator.Run] runs one prompt. [Coordinator.Serve] serves runs
// submitted by others, sharing the work with every other serving
// coordinator:
//
//   - Submitters store a [protocol.RunRequest] in the runs stream (work
//     queue) on <prefix>.run.submit.<client>.<agent>.<submission_id>
//     (pkg/client, [Submit], or "nats req"), with a per-client
//     Nats-Msg-Id: the server's acknowledgement is the acceptance, whether
//     or not a coordinator runs. The run id is derived from the client and
//     the submission id ([protocol.SubmissionRunID]), so a retry names the
//     same run. No coordinator answers a submission; the one that takes it
//     checks it, and a refused request gets a result saying why.
//   - Coordinators take stored requests from the stream's one durable pull
//     consumer, each only when it has a free run slot, and heartbeat while a
//     run lasts. A request whose coordinator dies is taken again after
//     AckWait, at most MaxDeliver times, and the run resumed from its
//     journal (the journal stream, one subject per run; see RunDurable in
//     pkg/loop and natsbus.Journal). On shutdown runs are handed off at
//     their next step boundary, not cancelled.
//   - Each result, a [protocol.RunResult], is created once in the runs
//     bucket under <client>.<run_id> (a second coordinator's result for the
//     same run is dropped; a submission whose run has a result is
//     acknowledged without running) and then announced on
//     <prefix>.run.result.<client>.<run_id>.
//     [WaitResult] reads it, whenever it was stored.
//
// # Limits
//
// The Coordinator's loop limits are ceilings. A request may lower
// max_rounds, max_tool_calls_per_round, max_observation_chars and the tool
// timeout, and add tools that need approval; a value above a ceiling is
// clamped to it, and the result lists the limits applied and which were
// clamped. Model, approval timeout and argument tracing are the operator's
// alone.
//
// # Caveats
//
// A request is delivered at least once, and resumed, not started over: a
// journaled model response is not asked again and a journaled call is not
// published again (its derived call key deduplicates it within the calls
// stream's window). A request delivered MaxDeliver times without a result gets an
// "abandoned" error result (from the server's max-deliveries advisory). A
// queued request nobody takes within QueuedRunMaxAge is dropped without a
// result. Results expire after ResultTTL.
package coordinator
