// Package conformance holds the tests that run the loop's guarantees against
// every model provider — chat completions, Anthropic Messages, the Responses
// API stateless and chained — each through its official SDK against its
// strict fake, as one table of providers. It has no non-test code.
package conformance
