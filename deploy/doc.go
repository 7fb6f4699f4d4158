// Package deploy holds toolfleet's deployment files. nats-server.conf is the
// server configuration: JetStream, and the coordinator, worker and operator
// users with the permissions that make approvals trustworthy (only operators
// may publish decisions). The package's tests start a real server from that
// file and check each permission with real connections.
package deploy
