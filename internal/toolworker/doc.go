// Package toolworker loads the tools the binaries serve from their
// command lines: a tool manifest (its exec tools and its MCP servers) and
// the names of built-in tools, as [worker.Config]'s Tools and MCPServers.
// cmd/toolworker and the coordinator's in-process workers (both on
// pkg/worker) use it; it parses no flags.
package toolworker
