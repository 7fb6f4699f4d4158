package protocol

// RunResumeRequest is an operator's request to resume a parked run,
// published (core NATS, not stored) on [Subjects.JournalResume]: a serving
// coordinator that reads the run's journal parked submits the run again
// (docs/serving.md, "Park and resume"). Its fields and their rules are a
// [RunCancelRequest]'s: the run, who asks (required) and why.
type RunResumeRequest = RunCancelRequest

// DecodeRunResumeRequest decodes and validates a [RunResumeRequest]
// published for run: its run_id must be run.
func DecodeRunResumeRequest(data []byte, run RunID, limit int) (RunResumeRequest, error) {
	return DecodeRunCancelRequest(data, run, limit)
}
