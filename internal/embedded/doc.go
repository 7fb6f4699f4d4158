// Package embedded runs a JetStream-enabled nats-server inside the current
// process, for the coordinator's stand-alone mode and for tests.
//
// The server listens on loopback TCP (a random port unless one is given) so
// the nats CLI and toolworkers in other processes can connect, and it also
// accepts in-process connections ([Server.InProcess]) that skip the network.
//
// # Caveats
//
// The server never installs signal handlers and logs nothing unless a logger
// is configured; protocol tracing, which would log message payloads, is never
// enabled. An empty StoreDir means a temporary directory that Shutdown
// removes: such a server keeps nothing across restarts.
package embedded
