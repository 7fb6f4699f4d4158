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
//   - Submitters send a [protocol.RunRequest] as a NATS request on
//     <prefix>.run.submit ([Submit], or "nats req"). One coordinator of the
//     queue group checks it and answers at once: refused with a coded error,
//     or accepted with a new run id once the request is stored in the runs
//     stream (work queue, <prefix>.run.queue.<run_id>). The stream does not
//     keep a request's reply subject, which is why submission is core
//     request-reply in front of the stream rather than a publish into it.
//   - Coordinators take stored requests from the stream's one durable pull
//     consumer, each only when it has a free run slot, and heartbeat while a
//     run lasts. A request whose coordinator dies is taken again after
//     AckWait, at most MaxDeliver times, and the run resumed from its
//     journal (the journal stream, one subject per run; see RunDurable in
//     pkg/loop and natsbus.Journal). On shutdown runs are handed off at
//     their next step boundary, not cancelled.
//   - Each result, a [protocol.RunResult], is created once in the runs
//     bucket under its run id (a second coordinator's result for the same
//     run is dropped) and then announced on <prefix>.run.result.<run_id>.
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
