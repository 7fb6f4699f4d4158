// Package console is the fleet's web console: HTML pages, a little plain
// JavaScript and CSS, embedded in the binary, on the HTTP API of package
// httpapi. It serves the pages and their assets and passes every /v1/
// request to the API it is given; the pages' scripts do everything
// through that API (fetch, EventSource) as the logged-in user.
//
// Pages: login, the fleet at a glance (/), runs (/runs) and a run
// (/runs/{id}) with its live timeline, approvals (/approvals) and tools
// (/tools). docs/console.md shows each.
//
// # Security
//
// Every page is sent with a Content-Security-Policy that allows only the
// console's own scripts, styles and connections (default-src 'self', no
// inline script or style, no framing), so text from a run, a tool or a
// worker can never run as script; the scripts also insert all such text
// as text, never as HTML. The console has no permission model: a button
// a role may not use is still offered, and the API's refusal (NATS's) is
// shown as it comes.
//
// # Caveats
//
// A run's timeline is drawn from its event stream: a call's start on a
// worker is known when the worker reports progress; without a report the
// call's bar runs from its dispatch to its answer.
package console
