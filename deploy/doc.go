// Package deploy holds toolfleet's deployment files. nats-server.conf is the
// server configuration: JetStream, and one user per role — admin (the only
// one that may create or change streams), coordinator, worker, a worker of
// one tool, operator (the only one that may publish approval decisions) and
// client — each reading replies on its own inbox prefix only. The package's
// tests start a real server from that file and check each permission, and
// each attack of docs/security.md, with real connections.
package deploy
