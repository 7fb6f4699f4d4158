// Package traffic is the operator's "coordinator tools" command: the kill
// switch of a tool (pause, resume) and its fleet-wide rate limit, each
// change recorded in the approvals stream (the audit log) before it takes
// effect. The JetStream side is natsbus.ToolTraffic.
package traffic
