package protocol

// Header names. NATS headers are case-sensitive: use these constants.
const (
	// HeaderMsgID is JetStream's dedup header: the same call or result is
	// never stored twice within the stream's duplicate window.
	HeaderMsgID = "Nats-Msg-Id"
	// HeaderReplyTo names the subject a call's result must be published on.
	// JetStream does not keep a publisher's reply subject, so it travels here.
	HeaderReplyTo = "Fleet-Reply-To"
	// HeaderDeadline is the call's absolute deadline, RFC 3339 with
	// nanoseconds, so a worker can refuse an expired call before decoding it.
	HeaderDeadline = "Fleet-Deadline"
	// HeaderVersion is the protocol version of the body.
	HeaderVersion = "Fleet-Version"
	// HeaderStartedNotice says on a call which started notices the
	// coordinator needs: [StartedNoticeNone] for none (it withdraws a
	// non-idempotent call no worker claimed at its deadline, which tells
	// it whether the call started), [StartedNoticeNonIdempotent] for only
	// a non-idempotent call's (the only ones that decide an outcome),
	// absent or any other value for every call's, as before the header
	// existed.
	HeaderStartedNotice = "Fleet-Started-Notice"
	// HeaderResultBatch on a call says that its coordinator reads a
	// [ResultBatch] and how large ([ResultBatchHeader]): only then may a
	// worker answer the call in one. On a message of the results stream,
	// "1" says that the body is a ResultBatch rather than one [Result].
	HeaderResultBatch = "Fleet-Result-Batch"
	// HeaderAtMostOnce, "1" on a call, says that its coordinator's catalog
	// marks the tool not idempotent: a worker then claims the call before
	// running it even if its own manifest says the tool is idempotent (a
	// stale or misconfigured worker), so that the stricter of the two
	// holds and a withdrawal at the deadline never removes a call that is
	// running.
	HeaderAtMostOnce = "Fleet-At-Most-Once"
	// HeaderAgent names, on a run's submission, the agent the run is for:
	// the same as the <agent> token of its subject
	// ([Subjects.RunSubmission]), which the runs stream does not keep
	// ([Subjects.QueuedRuns]). A submission stored without it, or with a
	// value that is not a subject token, is refused (invalid_field naming
	// the header), never run on another agent.
	HeaderAgent = "Fleet-Agent"
)

// StartedNoticeNonIdempotent is the [HeaderStartedNotice] value asking a
// worker to send a started notice only when its own manifest says the
// tool is not idempotent.
const StartedNoticeNonIdempotent = "non-idempotent"

// StartedNoticeNone is the [HeaderStartedNotice] value asking a worker to
// send no started notice: the coordinator learns whether a non-idempotent
// call started by withdrawing it from the calls stream at its deadline,
// which fails only when a worker claimed it.
const StartedNoticeNone = "none"

// CallMsgID is the dedup id of a call: one per call key, whatever the
// attempt, so a call published again (a resumed run, a retried publish)
// is stored once within the calls stream's duplicate window.
func CallMsgID(key CallKey) string { return "call-" + string(key) }

// ResultMsgID is the dedup id of a call's result, so a redelivered call that
// runs again cannot store a second result. The tool is part of it: a
// worker of another tool cannot take the id of a call it was never given.
func ResultMsgID(tool ToolName, key CallKey) string {
	return "result-" + string(key) + "." + string(tool)
}
