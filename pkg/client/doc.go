// Package client talks to a serving fleet ("coordinator serve") from a Go
// program: it submits runs and waits for their results, and waits for and
// answers the approvals they ask for.
//
// A run is submitted by storing it in the fleet's runs stream on the
// client's own subject, <prefix>.run.submit.<client>.<agent>.<submission>,
// with a submission id as its dedup id and the agent's name, the same as
// the subject's, in its Fleet-Agent header (protocol.HeaderAgent, which
// the stream keeps where it does not keep the subject's agent): the
// server's acknowledgement is the
// acceptance, whether or not a coordinator runs at that moment. Submitting
// the same submission id again never creates a second run, so [Client.Submit]
// retries by itself until its context ends. The result is kept in the runs
// bucket under <client>.<run> ([Run.Key]), where [Client.Wait] and
// [Client.Result] read it with a direct get: on the shipped configuration
// each client is an account of its own, which imports its submissions, that
// direct get of its own keys and its runs' announcements and progress, and
// no other JetStream request. [LoopResult] reads a result's calls by
// tool_call_id.
//
// # Waiting without polling
//
// [Client.WaitApproval] and [Client.WatchApprovals] deliver approval
// requests as they are stored, filtered by run, tool or agent, and
// [Client.WatchRun] a run's events as they happen: each is one consumer,
// read once, never a loop that reads a stream again.
//
// # Roles
//
// [Client.Catalog], the approvals, [Client.ListRuns], [Client.ShowRun],
// [Client.WatchRun] and [Client.CancelRun] need the fleet's roles (an
// operator's credentials, or a coordinator's): a client's account imports
// none of their subjects. [Client.ResumeRun], which resumes a run parked
// because its model kept failing (status "parked"), needs the operator's.
package client
