// Package openai is a [loop.Model] over the OpenAI chat-completions API with
// tools, built on the official SDK (github.com/openai/openai-go/v3). It talks
// to any compatible server — OpenAI, vLLM, Ollama, llama.cpp — given its base
// URL.
//
// A [loop.Request] becomes one chat-completions request: system, user,
// assistant (with tool_calls) and tool (with tool_call_id) messages in order,
// and each tool as a function definition whose parameters are the tool's JSON
// Schema, byte for byte. The first choice of the response becomes a
// [loop.Response]: the assistant message with its content and every tool call
// the server returned, each with its id, name and arguments exactly as sent —
// arguments that are not valid JSON are passed through untouched, and the
// loop answers them with an invalid_arguments observation. Token usage and
// the finish reason are kept.
//
// # Retries and timeouts
//
// Each attempt has its own timeout (Config.RequestTimeout). An attempt that
// fails with HTTP 429, any 5xx, a transport error or a timeout is retried up
// to Config.MaxRetries times, after a jittered exponential backoff or the wait
// the server asked for with Retry-After; a server asking for more than
// Config.MaxRetryDelay gets no retry. Any other status fails at once. The
// SDK's own retry loop is switched off: it also retries 408 and 409, obeys an
// x-should-retry header and does not retry an attempt that timed out. A
// call's worst case is therefore (MaxRetries+1) × RequestTimeout plus the
// waits, and the caller's context deadline cuts it short.
//
// # Secrets
//
// The key is sent only as a bearer token. Errors are those every HTTP
// provider shares (package modelhttp: [*APIError], [*TransportError] and the
// Err values are aliases of its own) and carry the status
// code, never the key, the request, the URL or the response body; the
// server's error message is kept apart in APIError.Message, because servers
// may quote the request (or the key) in it. Logs carry the model name,
// attempt numbers, statuses, durations, counts and token usage only.
// Response bodies are read up to Config.MaxResponseBytes.
//
// Only OPENAI_BASE_URL and OPENAI_API_KEY are read from the environment, and
// only when the matching Config field is empty; the SDK's other environment
// settings (organization, project, custom headers) are not applied.
//
// # Caveats
//
// Only the first choice is used, and MaxTokens is sent as
// max_completion_tokens, which OpenAI requires for its reasoning models;
// an old server that knows only max_tokens ignores it. A tool call of type
// "custom" (only returned when a custom tool was offered, which this package
// never does) is mapped to a function call so that its id is still answered.
// The package does not bound the number of tool calls in a response: the
// loop caps calls per round.
//
// Package openaitest, beside this one, is a fake server that speaks the wire
// format and refuses, as the API does, a transcript that leaves a tool call
// unanswered.
package openai
