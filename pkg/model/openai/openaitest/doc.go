// Package openaitest provides an in-process chat-completions server that
// speaks the OpenAI wire format, for testing anything that talks to a model
// over HTTP: [pkg/model/openai] itself, and whole coordinators pointed at it
// with a base URL.
//
// The server checks each request the way the real API does where it matters
// to toolfleet: an assistant message with tool_calls must be followed by tool
// messages answering every tool_call_id, and a tool message must answer a
// call of the assistant message before it. A transcript that breaks either
// rule gets HTTP 400 with the API's error body, so a test that drives a run
// through this server proves that no call id was left unanswered.
//
// # Caveats
//
// The server is stricter than the API in one way: a tool_call_id answered
// twice is also refused, because toolfleet promises exactly one answer per
// id. It is not a model: what it replies is whatever the test's [Handler]
// says.
package openaitest
