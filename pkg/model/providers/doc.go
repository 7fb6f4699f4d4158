// Package providers builds the model client an agent definition names
// ([agent.Model]) from the providers this module ships: openai,
// openai-responses, anthropic and scripted. [Models.Model] is the hook a
// serving coordinator (pkg/serve) and a runner (pkg/runner) take to run
// agents; a program that imports neither this package nor a provider's
// does not link any provider's SDK.
//
// # Keys
//
// A key is read from the environment, by the variable the definition names
// (or the provider's usual one), when a client is made; it is never in a
// definition, a cache key, a journal, a log or a span. It is sent only to
// the provider's own host or one agent.EnvKeyHosts allows for its
// variable ([agent.Definition.CheckKeyHosts]): a client for another host
// is refused.
package providers
