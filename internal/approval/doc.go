// Package approval is toolfleet's human approval gate on NATS and the
// operator's view of the approvals stream.
//
// The [Gate] implements loop.Gate. For each call that needs a human it
// publishes a protocol.ApprovalRequest into the approvals stream on
// <prefix>.approval.request.<run>.<key> and waits for the first valid
// protocol.ApprovalDecision on <prefix>.approval.decision.<run>.<key>. When it
// stops waiting it records how it settled the request (a [protocol.ApprovalNote]) on
// <prefix>.approval.outcome.<run>.<key>. Requests, decisions and notes are all
// kept by the approvals stream, which refuses deletes and purges: the stream
// is the audit log.
//
// [List] and [Lookup] read the approvals stream as an operator sees it —
// what is pending, including the exact arguments that will run, made safe
// to print — for "coordinator approvals list|approve|deny" (cmd/coordinator),
// which publishes decisions bound to a request's digest; [Pending] and
// [Decide] do the same for pkg/client.
//
// # Invariants
//
//   - Fail closed. A decision counts only if it decodes strictly, echoes the
//     request's digest and arrives before the request's deadline; the first
//     such decision wins and later ones change nothing. Anything else is
//     ignored and logged with the run id, call key and a reason code — never
//     its payload. No decision in time is Expired, never a human's denial. A
//     gate that cannot publish, subscribe or wait returns an error, which the
//     loop turns into a denial.
//   - The digest binds a decision to one call: run id, call key, tool and the
//     canonical arguments. An approval of another call, or of the same call
//     key with other arguments, does not match.
//   - Several calls wait concurrently; each has its own subscription.
//
// # Caveats
//
// Who may publish a decision is enforced by the NATS server's permissions
// (deploy/nats-server.conf gives it to the operator user only), not here: a
// well-formed decision with the right digest from anyone allowed to publish
// on the subject is accepted. The approver field is what the operator typed.
//
// Decisions travel on core NATS. A decision published while the gate's
// connection is down is kept by the stream for audit but is not seen by the
// gate; the request then expires and the call does not run.
package approval
