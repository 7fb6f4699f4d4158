// Package modelhttp holds what the HTTP model providers share: the retry
// policy (which failures are retried, jittered exponential backoff that
// honours Retry-After), the bound on response bodies, and error values that
// never carry the key, the URL, the request or the response body.
//
// Packages openai, anthropic and responses all use it. An attempt has its
// own timeout; HTTP 429, every 5xx (Anthropic's 529 overloaded_error
// included), transport errors and attempt timeouts are retried; nothing else
// is. A server asking,
// with Retry-After or Retry-After-Ms, for a wait longer than the maximum delay
// gets no retry.
package modelhttp
