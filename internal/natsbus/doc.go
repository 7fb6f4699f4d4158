// Package natsbus is toolfleet's NATS transport, and this package is its
// base: the connection ([Connect]), the fleet's streams and buckets
// ([FleetStreams]), their lifecycle ([Provision], [EnsureStreams],
// [StreamGuard]), what every process asks the server (retries, leader
// gets, probes) and what only shows the fleet, read without a consumer
// ([DirectReader]). Its subpackages each serve one audience:
//
//   - admission: what decides whether a call may go now — rate limits per
//     tool, fair shares per client, pause, priority between classes;
//   - stores: what the fleet keeps — start and claim records, run
//     journals, agents, approvals, the catalog, runs;
//   - workqueue: a pull consumer that never holds more messages than it
//     has free slots;
//   - dispatch: the coordinator's transport (Dispatcher,
//     Inbox): calls published, results read back;
//   - workerbus: the toolworker's transport (Worker);
//   - bustest: a test fleet (server, streams, workers, dispatchers) for
//     the subpackages' tests.
//
// pkg/loop and pkg/harness stay transport-free.
//
// # The JetStream boundary
//
// natsbus and its subpackages are the only packages of the
// module that import nats.go/jetstream, apart from worker discovery
// (internal/discovery, over nats.go/micro, which reads the catalog
// bucket), the embedded server (internal/embedded), the test helpers
// (internal/natstest) and fleetbench's direct-JetStream baselines
// (cmd/fleetbench). Other packages hold a [JetStream] context and hand it
// back to natsbus, never calling it.
//
// "Import" means a direct import by a package's non-test files, as "go
// list -json" reports it in Imports. Every package that uses natsbus has
// jetstream among its transitive dependencies (what "go list -deps"
// shows): that is the boundary working, not a leak.
// TestOnlyTheBoundaryImportsJetStream keeps this true. Tests may use
// JetStream directly to set up or inspect a server.
//
// # Streams
//
// [FleetStreams] is the single list of the fleet's streams and buckets
// with their expected configuration. [Provision] (coordinator provision,
// run by the one identity a deployment lets change streams) creates or
// restores them; [EnsureStreams] does the same for coordinators' and
// workers' streams where the process is its own admin (the embedded server,
// tests). Every other process only creates a missing stream when the
// server lets it ([CreateMissingStreams]) and checks the configuration it
// finds with a [StreamGuard], at start and periodically, refusing to serve
// while a stream differs. The streams:
//
//   - the calls stream (work queue, <prefix>.call.>): one durable pull
//     consumer per tool, shared by every worker serving it; a bounded queue
//     that refuses new calls when full, so publishers feel back-pressure;
//   - the results stream (<prefix>.result.<run>.<tool>), so results outlive a
//     coordinator's disconnection or restart and a redelivered call cannot
//     store two results alone (a batch may repeat one, which readers
//     drop); a dispatch.Dispatcher reads the results of all its runs
//     from this stream, not from core NATS, through one ordered consumer
//     of <prefix>.result.> that hands each to its run's dispatch.Inbox by the
//     subject's run token, so a result stored while the coordinator was
//     reconnecting is still delivered; a resumed run reads those stored
//     before its inbox opened with Inbox.CaughtUp; a message holds one
//     result or a batch of them (see the worker invariants), whose
//     results the inbox checks and delivers one by one;
//   - the approvals stream (<prefix>.approval.>), an audit log that refuses
//     deletes and purges;
//   - the catalog bucket of tool specs;
//   - for coordinator serve, the runs stream and the runs bucket.
package natsbus
