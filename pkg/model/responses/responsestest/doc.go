// Package responsestest is a strict fake of the OpenAI Responses API for
// tests: an httptest server that speaks the wire format (POST /v1/responses,
// input items, output items, the error envelope) and refuses, with the API's
// status codes and error texts, what the API refuses:
//
//   - a function_call without a function_call_output for its call_id
//     ("No tool output found for function call call_…."), counting the
//     calls of the previous response when previous_response_id is set;
//   - a function_call_output with no function_call before it ("No tool call
//     found for function call output with call_id …."), or a second output
//     for one call_id;
//   - a previous_response_id it does not know or did not store;
//   - a tool in the chat-completions shape, or whose name breaks
//     ^[a-zA-Z0-9_-]{1,64}$.
//
// It remembers every response created with store (the default) so that
// previous_response_id continues its conversation. Answers are scripted with
// a [Handler]; [Reply] can carry hostile answers: unknown tools, huge or
// invalid arguments, repeated call ids, incomplete or failed statuses,
// refusals, 429 and 5xx with Retry-After, a dropped connection or a hang.
package responsestest
