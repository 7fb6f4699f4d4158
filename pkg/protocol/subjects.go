package protocol

import (
	"fmt"
	"strings"
)

// DefaultPrefix is the first token of every subject when none is configured.
const DefaultPrefix = "fleet"

// Subjects spells every subject, stream, consumer and bucket name of one
// fleet. Its zero value uses [DefaultPrefix]. Builders refuse tokens that do
// not match [TokenPattern].
//
// A builder's tokens are typed: a [RunID], a [CallKey] or a [ToolName],
// never a [CallID] nor a bare string variable, so the model's own call id
// cannot become a subject token without a conversion the compiler makes
// visible (Subjects.Cancel(run, call.CallID) does not compile). Those types
// are where a token comes from (a decoded message, [ParseRunID],
// [ParseCallKey], [ParseToolName], [NewRunID], [NewCallKey]); the builders
// check every token again, so even a converted string that is not a valid
// token is refused (TestSubjectBuildersRefuseBadTokens).
type Subjects struct {
	// Prefix is the first subject token. Default: "fleet".
	Prefix string
}

// NewSubjects returns the Subjects for prefix, or an error if prefix is not a
// valid token. An empty prefix means [DefaultPrefix].
func NewSubjects(prefix string) (Subjects, error) {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	if !ValidToken(prefix) {
		return Subjects{}, &Error{Code: CodeInvalidField, Field: "prefix", Msg: "must match " + TokenPattern}
	}
	return Subjects{Prefix: prefix}, nil
}

func (s Subjects) p() string {
	if s.Prefix == "" {
		return DefaultPrefix
	}
	return s.Prefix
}

// join is <prefix>.<kind>.<token>[.<token>...], each token checked, built
// in one allocation: both ends of every call build subjects.
func (s Subjects) join(kind string, tokens ...string) (string, error) {
	p := s.p()
	n := len(p) + 1 + len(kind)
	for _, t := range tokens {
		if !ValidToken(t) {
			return "", &Error{Code: CodeInvalidField, Field: kind, Msg: fmt.Sprintf("subject token %q must match %s", clip(t), TokenPattern)}
		}
		n += 1 + len(t)
	}
	var b strings.Builder
	b.Grow(n)
	b.WriteString(p)
	b.WriteByte('.')
	b.WriteString(kind)
	for _, t := range tokens {
		b.WriteByte('.')
		b.WriteString(t)
	}
	return b.String(), nil
}

// Call is the subject a call to tool of a run of client, in class, is
// published on: <prefix>.call.<tool>.<class>.<client>. The calls stream
// caps the calls each such subject holds (max_msgs_per_subject, with
// discard_new_per_subject): that is each client's share of a tool, per
// class, which the server enforces fleet-wide. Each class of a tool has
// its own consumer ([Subjects.ClassConsumer]) filtered on
// [Subjects.CallsOf].
func (s Subjects) Call(tool ToolName, class Class, client string) (string, error) {
	if !class.Valid() {
		return "", &Error{Code: CodeInvalidField, Field: "class", Msg: `must be "interactive" or "batch"`}
	}
	return s.join("call", string(tool), string(class), client)
}

// CallsOf is the wildcard of every call to tool in class, whoever the
// client: <prefix>.call.<tool>.<class>.*, the filter of the class's
// consumer.
func (s Subjects) CallsOf(tool ToolName, class Class) (string, error) {
	if !class.Valid() {
		return "", &Error{Code: CodeInvalidField, Field: "class", Msg: `must be "interactive" or "batch"`}
	}
	subj, err := s.join("call", string(tool), string(class))
	if err != nil {
		return "", err
	}
	return subj + ".*", nil
}

// ParseCall splits a call subject ([Subjects.Call]) into its tool, class
// and client tokens.
func (s Subjects) ParseCall(subject string) (tool ToolName, class Class, client string, ok bool) {
	rest, ok := strings.CutPrefix(subject, s.p())
	if !ok {
		return "", "", "", false
	}
	if rest, ok = strings.CutPrefix(rest, ".call."); !ok {
		return "", "", "", false
	}
	// Three tokens: a client token holds no '.', so a fourth is refused.
	t, rest, ok := strings.Cut(rest, ".")
	c, client, ok2 := strings.Cut(rest, ".")
	if !ok || !ok2 || !ValidToken(t) || !Class(c).Valid() || !ValidToken(client) {
		return "", "", "", false
	}
	return ToolName(t), Class(c), client, true
}

// Calls is the wildcard covering every call subject.
func (s Subjects) Calls() string { return s.p() + ".call.>" }

// ToolInfo is the core-NATS subject on which every worker serving tool
// answers a request with its spec: <prefix>.tool.<tool>. It is discovery
// only; calls travel on [Subjects.Call].
func (s Subjects) ToolInfo(tool ToolName) (string, error) { return s.join("tool", string(tool)) }

// ToolInfos is the wildcard covering every tool-info subject.
func (s Subjects) ToolInfos() string { return s.p() + ".tool.>" }

// Result is the subject the results of a run's calls to tool are
// published on: <prefix>.result.<run>.<tool>. The tool token lets a
// deployment allow only a tool's workers to answer its calls, and the
// coordinator takes a result only on the subject of its call's tool.
func (s Subjects) Result(run RunID, tool ToolName) (string, error) {
	return s.join("result", string(run), string(tool))
}

// ResultsOf is the wildcard covering every result of run:
// <prefix>.result.<run>.>.
func (s Subjects) ResultsOf(run RunID) (string, error) {
	subj, err := s.join("result", string(run))
	if err != nil {
		return "", err
	}
	return subj + ".>", nil
}

// Results is the wildcard covering every result subject.
func (s Subjects) Results() string { return s.p() + ".result.>" }

// Started is the core-NATS subject on which workers say they started a
// run's call ([Started]): <prefix>.progress.<run>. The token keeps its
// first name, "progress", so deployed permissions stay valid.
func (s Subjects) Started(run RunID) (string, error) { return s.join("progress", string(run)) }

// Cancel is the core-NATS subject that cancels one call:
// <prefix>.cancel.<run>.<key>.
func (s Subjects) Cancel(run RunID, key CallKey) (string, error) {
	return s.join("cancel", string(run), string(key))
}

// Cancels is the wildcard covering every cancel subject.
func (s Subjects) Cancels() string { return s.p() + ".cancel.>" }

// ApprovalRequest is the subject an approval request is published on:
// <prefix>.approval.request.<run>.<key>.
func (s Subjects) ApprovalRequest(run RunID, key CallKey) (string, error) {
	return s.join("approval.request", string(run), string(key))
}

// ApprovalRequests is the wildcard operators watch for pending requests.
func (s Subjects) ApprovalRequests() string { return s.p() + ".approval.request.>" }

// ApprovalDecision is the subject an operator answers one request on:
// <prefix>.approval.decision.<run>.<key>.
func (s Subjects) ApprovalDecision(run RunID, key CallKey) (string, error) {
	return s.join("approval.decision", string(run), string(key))
}

// ApprovalDecisions is the wildcard covering every decision subject.
func (s Subjects) ApprovalDecisions() string { return s.p() + ".approval.decision.>" }

// ApprovalOutcome is the subject on which the coordinator records, for audit,
// how it settled one approval request (approved, denied, expired, cancelled):
// <prefix>.approval.outcome.<run>.<key>. Only coordinators publish here.
func (s Subjects) ApprovalOutcome(run RunID, key CallKey) (string, error) {
	return s.join("approval.outcome", string(run), string(key))
}

// ApprovalOutcomes is the wildcard covering every outcome subject.
func (s Subjects) ApprovalOutcomes() string { return s.p() + ".approval.outcome.>" }

// Approvals is the wildcard covering requests, decisions and outcomes.
func (s Subjects) Approvals() string { return s.p() + ".approval.>" }

func (s Subjects) upper() string { return strings.ToUpper(strings.ReplaceAll(s.p(), "-", "_")) }

// CallsStream names the work-queue stream of calls (FLEET_CALLS by default).
func (s Subjects) CallsStream() string { return s.upper() + "_CALLS" }

// ResultsStream names the stream that keeps results (FLEET_RESULTS).
func (s Subjects) ResultsStream() string { return s.upper() + "_RESULTS" }

// ApprovalsStream names the audit stream of approvals (FLEET_APPROVALS).
func (s Subjects) ApprovalsStream() string { return s.upper() + "_APPROVALS" }

// CatalogBucket names the KV bucket of tool specs (fleet_tools).
func (s Subjects) CatalogBucket() string { return strings.ReplaceAll(s.p(), "-", "_") + "_tools" }

// Consumer names the durable pull consumer shared by every worker serving
// tool, of its interactive calls (see [Subjects.ClassConsumer]). The tool
// must be a valid token.
func (s Subjects) Consumer(tool ToolName) (string, error) {
	if !tool.Valid() {
		return "", &Error{Code: CodeInvalidField, Field: "tool", Msg: "must match " + TokenPattern}
	}
	return "tool_" + string(tool), nil
}

// ClassConsumer names the durable pull consumer of tool's calls in
// class: [Subjects.Consumer] for interactive calls (the name every tool's
// consumer had before classes existed), batch_<tool> for batch calls.
func (s Subjects) ClassConsumer(tool ToolName, class Class) (string, error) {
	if class == ClassBatch {
		if !tool.Valid() {
			return "", &Error{Code: CodeInvalidField, Field: "tool", Msg: "must match " + TokenPattern}
		}
		return "batch_" + string(tool), nil
	}
	if !class.Valid() {
		return "", &Error{Code: CodeInvalidField, Field: "class", Msg: `must be "interactive" or "batch"`}
	}
	return s.Consumer(tool)
}

// ClientRunResult is the subject a client's run result is announced on:
// <prefix>.run.result.<client>.<run>, or [Subjects.RunResult] without a
// client.
func (s Subjects) ClientRunResult(client string, run RunID) (string, error) {
	if client == "" {
		return s.RunResult(run)
	}
	return s.join("run.result", client, string(run))
}

// CoordinatorsGroup is the queue group in which serving coordinators
// handle the runs stream's max-deliveries advisories, so each is handled
// by one of them.
func (s Subjects) CoordinatorsGroup() string { return "coordinators" }

// RunResult is the core-NATS subject a run's result is announced on:
// <prefix>.run.result.<run>.
func (s Subjects) RunResult(run RunID) (string, error) { return s.join("run.result", string(run)) }

// RunResults is the wildcard covering every run result announcement.
func (s Subjects) RunResults() string { return s.p() + ".run.result.>" }

// RunsStream names the work-queue stream of queued run requests
// (FLEET_RUNS).
func (s Subjects) RunsStream() string { return s.upper() + "_RUNS" }

// RunsConsumer names the durable pull consumer of the runs stream, shared
// by every coordinator that serves runs.
func (s Subjects) RunsConsumer() string { return "coordinators" }

// RunsMaxDeliveries is the subject of the server's advisory that a run
// request was delivered as often as the runs consumer allows and will not
// be delivered again.
func (s Subjects) RunsMaxDeliveries() string {
	return "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES." + s.RunsStream() + "." + s.RunsConsumer()
}

// RunsBucket names the KV bucket of run results, keyed by run id
// (fleet_runs).
func (s Subjects) RunsBucket() string { return strings.ReplaceAll(s.p(), "-", "_") + "_runs" }

// AgentsBucket names the KV bucket of agent definitions, keyed by agent
// name (fleet_agents); a key's revision is the agent's version.
func (s Subjects) AgentsBucket() string { return strings.ReplaceAll(s.p(), "-", "_") + "_agents" }

// RunKey is the key of a run's result in the runs bucket: <client>.<run>,
// or the run id alone without a client. A deployment lets each client
// read the keys under its own name only.
func RunKey(client string, run RunID) string {
	if client == "" {
		return string(run)
	}
	return client + "." + string(run)
}

// clip bounds untrusted text quoted in an error message.
func clip(s string) string {
	const max = 64
	if len(s) <= max {
		return s
	}
	return s[:max] + "…"
}

// Journal is the subject of a run's journal entries, in the journal
// stream: <prefix>.journal.run.<run>. The owner of a run appends to it with
// Nats-Expected-Last-Subject-Sequence, which fences any other writer.
func (s Subjects) Journal(run RunID) (string, error) { return s.join("journal.run", string(run)) }

// Journals is the wildcard covering every run's journal.
func (s Subjects) Journals() string { return s.p() + ".journal.run.*" }

// JournalCancel is the subject an operator's request to cancel a run is
// stored on, in the cancels stream (not the journal stream, which only a
// run's coordinator writes): <prefix>.journal.cancel.<run>.
func (s Subjects) JournalCancel(run RunID) (string, error) {
	return s.join("journal.cancel", string(run))
}

// JournalCancels is the wildcard covering every cancel request.
func (s Subjects) JournalCancels() string { return s.p() + ".journal.cancel.*" }

// JournalResume is the core-NATS subject of an operator's request to
// resume a parked run ([RunResumeRequest]): <prefix>.journal.resume.<run>,
// which serving coordinators answer in a queue group. No stream stores it.
func (s Subjects) JournalResume(run RunID) (string, error) {
	return s.join("journal.resume", string(run))
}

// JournalResumes is the wildcard covering every resume request.
func (s Subjects) JournalResumes() string { return s.p() + ".journal.resume.*" }

// JournalSubjects is the wildcard of every journal subject: the journals
// (the journal stream) and the cancel requests (the cancels stream).
func (s Subjects) JournalSubjects() string { return s.p() + ".journal.>" }

// CancelsStream names the stream of cancel requests (FLEET_CANCELS).
func (s Subjects) CancelsStream() string { return s.upper() + "_CANCELS" }

// Claim is the subject of the execution record of an approved call,
// <prefix>.claim.<tool>.<run>.<key>: written once, by the worker about to
// run the call, in the claims stream.
func (s Subjects) Claim(tool ToolName, run RunID, key CallKey) (string, error) {
	return s.join("claim", string(tool), string(run), string(key))
}

// Claims is the wildcard of the claims stream.
func (s Subjects) Claims() string { return s.p() + ".claim.>" }

// ClaimsStream names the stream of execution records (FLEET_CLAIMS).
func (s Subjects) ClaimsStream() string { return s.upper() + "_CLAIMS" }

// Start is the subject of a non-idempotent call's start record,
// <prefix>.start.<tool>.<run>.<key>: the stream keeps one record per call,
// the first written — the claim of the worker about to run the call, or
// its coordinator's withdrawal — and refuses every later one.
func (s Subjects) Start(tool ToolName, run RunID, key CallKey) (string, error) {
	return s.join("start", string(tool), string(run), string(key))
}

// Starts is the wildcard of the starts stream.
func (s Subjects) Starts() string { return s.p() + ".start.>" }

// StartsStream names the stream of start records (FLEET_STARTS).
func (s Subjects) StartsStream() string { return s.upper() + "_STARTS" }

// A tool with workers of its own keeps its execution and start records
// in streams of its own, so that what its workers may write fills only
// their tool's streams: <prefix>.own.<tool>.claim.<run>.<key> in
// <PREFIX>_CLAIMS_<tool> and <prefix>.own.<tool>.start.<run>.<key> in
// <PREFIX>_STARTS_<tool> (created by provisioning; natsbus routes a tool's
// records to them when they exist).

// OwnClaim is the subject of an approved call's execution record for a
// tool with streams of its own: <prefix>.own.<tool>.claim.<run>.<key>.
func (s Subjects) OwnClaim(tool ToolName, run RunID, key CallKey) (string, error) {
	return s.own(tool, "claim", run, key)
}

// OwnStart is the subject of a non-idempotent call's start record for a
// tool with streams of its own: <prefix>.own.<tool>.start.<run>.<key>.
func (s Subjects) OwnStart(tool ToolName, run RunID, key CallKey) (string, error) {
	return s.own(tool, "start", run, key)
}

func (s Subjects) own(tool ToolName, kind string, run RunID, key CallKey) (string, error) {
	return s.join("own", string(tool), kind, string(run), string(key))
}

// OwnClaims is the wildcard of a tool's own claims stream.
func (s Subjects) OwnClaims(tool ToolName) string { return s.p() + ".own." + string(tool) + ".claim.>" }

// OwnStarts is the wildcard of a tool's own starts stream.
func (s Subjects) OwnStarts(tool ToolName) string { return s.p() + ".own." + string(tool) + ".start.>" }

// OwnClaimsStream names a tool's own claims stream (FLEET_CLAIMS_<tool>).
func (s Subjects) OwnClaimsStream(tool ToolName) string { return s.ClaimsStream() + "_" + string(tool) }

// OwnStartsStream names a tool's own starts stream (FLEET_STARTS_<tool>).
func (s Subjects) OwnStartsStream(tool ToolName) string { return s.StartsStream() + "_" + string(tool) }

// JournalStream names the stream of run journals (FLEET_JOURNAL).
func (s Subjects) JournalStream() string { return s.upper() + "_JOURNAL" }

// Progress is the core-NATS subject of one call's progress reports
// ([Progress]): <prefix>.progress.<run>.<key>, under the run's started
// subject, so the permissions that let workers publish started notices
// cover it.
func (s Subjects) Progress(run RunID, key CallKey) (string, error) {
	return s.join("progress", string(run), string(key))
}

// ProgressOf is the wildcard of every call's progress subject of a run:
// <prefix>.progress.<run>.*.
func (s Subjects) ProgressOf(run RunID) (string, error) {
	subj, err := s.join("progress", string(run))
	if err != nil {
		return "", err
	}
	return subj + ".*", nil
}

// ClientRunProgress is the subject a serving coordinator passes a run's
// progress on to its client: <prefix>.run.progress.<client>.<run>. A
// deployment lets each client subscribe to its own only.
func (s Subjects) ClientRunProgress(client string, run RunID) (string, error) {
	if client == "" {
		return s.join("run.progress", string(run))
	}
	return s.join("run.progress", client, string(run))
}

// DefaultAgent is the agent token of a submission that names none.
const DefaultAgent = "default"

// RunSubmission is the subject a client submits a run on, in the runs
// stream: <prefix>.run.submit.<client>.<agent>.<submission>. The client
// publishes it with [SubmissionMsgID] as Nats-Msg-Id and the agent's name,
// the same as the subject's <agent> token, in [HeaderAgent]; the server's
// acknowledgement of the stored message is the run's acceptance. A
// deployment lets each client publish under its own <client> token only,
// so the coordinator learns the submitter from the subject, never from the
// body, and keeps the result where only that client may read it
// ([Subjects.ClientRunResult], [RunKey] of [SubmissionRunID]). The stream
// stores the submission under [Subjects.QueuedRuns], which keeps only the
// client: the stored run's agent is its [HeaderAgent], and which clients
// may run an agent is the agent's definition's to say, not the subject's.
func (s Subjects) RunSubmission(client, agent, submission string) (string, error) {
	return s.join("run.submit", client, agent, submission)
}

// RunSubmissions is the wildcard covering every submission:
// <prefix>.run.submit.*.*.*, the runs stream's subjects.
func (s Subjects) RunSubmissions() string { return s.p() + ".run.submit.*.*.*" }

// QueuedRuns is the subject transform's destination under which the runs
// stream stores a submission: <prefix>.run.queued.<client>, without the
// agent (which its [HeaderAgent] carries) and the submission id (which its
// [SubmissionMsgID] carries), so the stream's max_msgs_per_subject bounds
// what one client queues, whatever agents it names.
func (s Subjects) QueuedRuns() string { return s.p() + ".run.queued.{{wildcard(1)}}" }

// RunsQueued is the wildcard covering every stored submission of
// [Subjects.QueuedRuns], and of the layout before it,
// <prefix>.run.queued.<client>.<agent>: <prefix>.run.queued.>.
func (s Subjects) RunsQueued() string { return s.p() + ".run.queued.>" }

// StoredSubmission is a submission read back from the runs stream
// ([Subjects.ParseStoredSubmission]).
type StoredSubmission struct {
	// Client and Submission, the submitting client and its submission id,
	// name the run ([SubmissionRunID]).
	Client, Submission string
	// Agent is the agent the run is for.
	Agent string
}

// ParseStoredSubmission reads a submission as the runs stream stored it,
// in any of the stream's three layouts:
//
//   - <prefix>.run.queued.<client> ([Subjects.QueuedRuns]): the client
//     from the subject, the submission id from msgID, its Nats-Msg-Id,
//     which must be [SubmissionMsgID] of that client or
//     [ResubmissionMsgID] of it, and the agent from agent, its
//     [HeaderAgent], which must be a valid token;
//   - <prefix>.run.queued.<client>.<agent>, as the stream stored it before
//     the agent moved to the header: the agent from the subject (agent is
//     not read), the rest as above;
//   - <prefix>.run.submit.<client>.<agent>.<submission>, as stored before
//     the stream transformed subjects ([Subjects.RunSubmission]): all
//     from the subject.
//
// A message that names no run (no valid client, or no submission id of
// that client) returns a zero StoredSubmission and an error. A run whose
// header names no agent (missing, or not a token) returns its Client and
// Submission, an empty Agent and a [CodeInvalidField] error naming
// [HeaderAgent]: the run is known, and is refused with that error rather
// than run on an agent guessed.
func (s Subjects) ParseStoredSubmission(subject, msgID, agent string) (StoredSubmission, error) {
	if client, agent, submission, ok := s.ParseRunSubmission(subject); ok {
		return StoredSubmission{Client: client, Agent: agent, Submission: submission}, nil
	}
	rest, ok := strings.CutPrefix(subject, s.p()+".run.queued.")
	if !ok {
		return StoredSubmission{}, invalid("subject", "not a submission of the runs stream")
	}
	client, fromSubject, former := strings.Cut(rest, ".")
	if !ValidToken(client) || former && !ValidToken(fromSubject) {
		return StoredSubmission{}, invalid("subject", "not a submission of the runs stream")
	}
	rest, ok = strings.CutPrefix(msgID, SubmissionMsgID(client, ""))
	if !ok {
		return StoredSubmission{}, invalid(HeaderMsgID, "not a submission id of the subject's client")
	}
	submission, again, resubmitted := strings.Cut(rest, resubmissionMark)
	if !ValidToken(submission) || resubmitted && !digits(again) {
		return StoredSubmission{}, invalid(HeaderMsgID, "not a submission id of the subject's client")
	}
	sub := StoredSubmission{Client: client, Submission: submission, Agent: fromSubject}
	if former {
		return sub, nil
	}
	if agent == "" {
		return sub, invalid(HeaderAgent, "the submission names no agent: set the "+HeaderAgent+" header to the agent's name, as in its subject")
	}
	if !ValidToken(agent) {
		return sub, invalid(HeaderAgent, "must match "+TokenPattern)
	}
	sub.Agent = agent
	return sub, nil
}

// ParseRunSubmission splits a submission subject ([Subjects.RunSubmission])
// into its client, agent and submission id tokens.
func (s Subjects) ParseRunSubmission(subject string) (client, agent, submission string, ok bool) {
	rest, ok := strings.CutPrefix(subject, s.p()+".run.submit.")
	if !ok {
		return "", "", "", false
	}
	parts := strings.Split(rest, ".")
	if len(parts) != 3 || !ValidToken(parts[0]) || !ValidToken(parts[1]) || !ValidToken(parts[2]) {
		return "", "", "", false
	}
	return parts[0], parts[1], parts[2], true
}
