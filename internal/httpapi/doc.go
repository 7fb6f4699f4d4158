// Package httpapi is the fleet's HTTP API: JSON over net/http, with
// server-sent events for a run's events, for every program that is not
// Go (curl, Python, a browser). It submits, reads, lists and cancels runs,
// streams a run's events, shows, streams and decides approvals and reads
// their audit, shows the tools with their workers and queues and pauses,
// resumes and limits them, and reads the agents. GET /v1/openapi.json is the OpenAPI 3.1 document of every route
// (docs/api.md walks through it with curl).
//
// # Identity
//
// The API has no permission model of its own: NATS's is the only one. A
// person logs in (POST /v1/session) with a NATS user and password; the
// server connects to NATS as that user, with the inbox prefix
// _INBOX_<user> the fleet's users need, and every request of the session
// acts on that connection. What the NATS server refuses the user is a 403
// here. A program sends Authorization: Basic with each request instead;
// such requests share one connection per user and password and set no
// cookie. Credentials are never logged nor echoed, and never read from a
// URL.
//
// # Caveats
//
// A permissions violation reaches a NATS connection asynchronously,
// without saying which request caused it: every request of that session
// in flight when it arrives is answered 403. Progress reports travel on
// core NATS and carry no event id: a stream resumed with Last-Event-ID
// replays the journal's events it missed, never progress reports. A
// client's account reads no journal, so a client's stream is its runs'
// progress and result only.
package httpapi
