// Package scripted is a deterministic [loop.Model] that replays a script: the
// bundled demo of the coordinator, and a model for tests that need exact,
// repeatable — or deliberately hostile — tool calls.
//
// # Script format
//
// A script is a JSON object with one required field, "turns":
//
//	{"turns": [
//	  {"content": "Computing both.",
//	   "tool_calls": [
//	     {"id": "c1", "name": "calculator", "arguments": {"expression": "2+2"}},
//	     {"id": "c2", "name": "calculator", "arguments": "{not json"}
//	   ]},
//	  {"calls": {"name": "echo", "count": 1000, "arguments": {"text": "hi"}, "id_prefix": "e"}},
//	  {"content": "2+2 = {{result \"c1\"}}"}
//	]}
//
// Turn i answers the i-th model call of a run: the position is the number of
// assistant messages already in the request's transcript, so one Model serves
// any number of concurrent runs, and a run's answers depend only on its own
// transcript. When the turns run out the model answers "(script ended)" with
// no tool calls, which ends the run.
//
// Fields of a turn, all optional:
//
//   - "content": the assistant message's text. It is a text/template in
//     which {{result "c1"}} is replaced by the content of the tool message
//     answering call id "c1" in the transcript so far (the latest one, if
//     several), or "(no result)" when there is none. Only that function
//     and string literals are allowed ({{"{{"}} writes a literal "{{"); no
//     data, variables, conditions or other functions.
//   - "tool_calls": calls in order. "name" is required and is sent as
//     written, valid or not. "id" is sent as written, even empty or
//     repeated; when absent it is "call_<turn>_<n>" (both from 1).
//     "arguments" is either a JSON string, sent verbatim (so a script can
//     send "{not json"), or any other JSON value, sent in compact form;
//     absent means {}.
//   - "calls": a generator appending "count" calls to "name" with the same
//     "arguments" after the tool_calls, with ids "<id_prefix>-1" …
//     "<id_prefix>-<count>"; id_prefix defaults to "gen<turn>".
//
// A script may also hold "variants": up to [MaxVariants] objects
// {"system_contains": "TEXT", "turns": [...]}. A run one of whose system
// messages (its instructions) holds a variant's TEXT is answered from the
// first such variant's turns instead of the script's own, so new
// instructions change what the model does (a replay's test):
//
//	{"turns": [...], "variants": [{"system_contains": "careful", "turns": [...]}]}
//
// The finish reason is "tool_calls" for a turn with calls, else "stop".
// Usage is zero.
//
// # Limits
//
// Parsing is strict: unknown fields, trailing data, a missing "turns" or
// "name", a bad template are errors naming the field. A script is at most
// [MaxScriptBytes], with at most [MaxTurns] turns of at most [MaxCallsPerTurn]
// calls each; rendered content is at most [MaxContentBytes].
//
// # In tests
//
// It is the model for testing an agent end to end: with pkg/fleettest,
// one call starts a fleet serving the agent's tools, and a script states
// the exact calls the model makes, so the test asserts on a transcript that
// never changes (see docs/sdk.md, "Test your agent"):
//
//	fleet := fleettest.Start(t, fleettest.Config{Tools: tools})
//	model, _ := scripted.Parse([]byte(`{"turns": [
//		{"tool_calls": [{"id": "c1", "name": "add", "arguments": {"a": 2, "b": 3}}]},
//		{"content": "2 + 3 = {{result \"c1\"}}"}]}`))
//	res, err := fleet.Runner(runner.Config{Model: model}).Run(t.Context(), "2 + 3?")
//
// A script can be as hostile as a real model (bad arguments, unknown or
// malformed tool names, more calls than a round allows) to test what the
// fleet answers them.
//
// # Demo
//
// [Demo] returns the bundled script (demo.json): a two-round calculator run
// that computes "(17 + 25) * 3" and "2 ** 10" in parallel, then their sum,
// and states the three results as the tools returned them.
package scripted
