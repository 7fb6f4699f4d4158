// Package anthropictest is a strict fake of the Anthropic Messages API for
// tests: an httptest server that speaks the wire format (POST /v1/messages,
// x-api-key, the message object, the error envelope) and refuses, with the
// API's status codes and error texts, what the API refuses:
//
//   - a tool_use block not answered by a tool_result in the very next user
//     message ("`tool_use` ids were found without `tool_result` blocks
//     immediately after: …");
//   - a tool_result whose id is not a tool_use of the message before it
//     ("unexpected `tool_use_id` found in `tool_result` blocks: …"), or that
//     answers an id twice;
//   - tool_use ids repeated in a transcript, or not matching the id pattern;
//   - tool_result blocks after other content in a user message;
//   - tool_use or tool_result blocks in a request that defines no tools;
//   - empty or whitespace-only text blocks, a missing max_tokens, no
//     messages;
//   - a tool whose name breaks ^[a-zA-Z0-9_-]{1,64}$, or whose input_schema
//     is not of type object or has oneOf, anyOf or allOf at its top level.
//
// Answers are scripted with a [Handler]; [Reply] can carry hostile answers:
// unknown tools, huge or non-object inputs, repeated ids, any stop_reason
// (max_tokens mid tool call, refusal, pause_turn), 429 and 5xx with
// Retry-After, 529 overloaded_error, a dropped connection or a hang.
package anthropictest
