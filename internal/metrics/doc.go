// Package metrics exposes a toolfleet process to Prometheus: per-process
// registries (never the global default one), the worker's and the
// coordinator's metrics fed through the observer hooks of natsbus and
// pkg/loop, the NATS connection state, and an HTTP server for /metrics,
// /healthz and /readyz.
//
// # Metrics
//
// Every name starts with "toolfleet_". Worker side (fed by
// natsbus.WorkerObserver):
//
//	toolfleet_worker_calls_total{tool,outcome}             calls run to an answer
//	toolfleet_worker_call_duration_seconds{tool}           how long tools ran
//	toolfleet_worker_calls_in_flight{tool}                 calls running now
//	toolfleet_worker_redeliveries_total{tool}              deliveries after the first
//	toolfleet_worker_exec_escapes_total                    exec tool processes that left their group, killed
//	toolfleet_worker_calls_terminated_total{tool,reason}   malformed, expired, unapproved or rate_limited, not run
//	toolfleet_worker_result_failures_total{tool}           results that could not be published
//
// A toolworker's MCP servers (read from the servers at each scrape, see
// RegisterMCPServers):
//
//	toolfleet_mcp_server_up{server}                        1 connected, 0 restarting
//	toolfleet_mcp_server_restarts_total{server}            restarts
//	toolfleet_mcp_server_cancels_total{server,result}      cancels answered within the grace or not
//	toolfleet_mcp_server_kills_total{server}               kills for a cancel left unanswered
//
// Coordinator side (fed by loop.Observer and discovery.SchemaObserver):
//
//	toolfleet_coordinator_runs_total{reason}               runs by termination reason
//	toolfleet_coordinator_runs_in_flight                   runs going on
//	toolfleet_coordinator_calls_total{tool,outcome}        answered call ids
//	toolfleet_coordinator_call_duration_seconds{tool}      handling time of a call
//	toolfleet_coordinator_rejected_calls_total             calls answered "rejected"
//	toolfleet_coordinator_calls_held_total{tool,client}    calls over their client's share, held (fed by natsbus.ShareObserver)
//	toolfleet_coordinator_calls_share_limited_total{tool,client} held calls answered rate_limited
//	toolfleet_coordinator_approvals_total{result}          approved, denied, expired, unavailable, cancelled
//	toolfleet_coordinator_refused_messages_total{kind}     cancel_request, run_result, agent_revision, progress: refused, not acted on
//	toolfleet_model_call_duration_seconds{result}          model latency (ok or error)
//	toolfleet_model_tokens_total{kind}                     prompt and completion tokens
//	toolfleet_schema_conflicts_total{tool}                 conflicts found (new or changed)
//	toolfleet_catalog_anomalies_total{kind}                approval_conflict, oversized, full
//	toolfleet_schema_conflicted_tools                      tools in conflict at the last check
//
// Both: toolfleet_nats_connected (1 connected, 0 not), and the Go runtime
// and process collectors.
//
// # Labels
//
// Label values come from closed vocabularies (outcomes, termination
// reasons, approval results) or from tool names of the catalog or the
// worker's own harness — never from run ids, call ids or anything the
// model wrote. A tool the model named but the catalog does not list is
// labelled "_unknown"; an outcome outside the protocol's vocabulary
// "_invalid"; and once MaxToolLabels distinct tools have been seen, further
// ones are labelled "_other", so a churning catalog cannot grow the series
// without bound. The client label takes the first MaxClientLabels
// clients seen, then "_other".
//
// # Health
//
// /healthz answers 200 while the process runs and its NATS connection is
// up, 503 otherwise. /readyz answers 200 when, in addition, the streams and
// consumers the process needs answer (cached for a couple of seconds), 503
// otherwise. Both bodies are one short line naming the reason, never a
// payload or a credential.
//
// # Caveats
//
// /healthz fails while NATS is unreachable; a liveness probe built on it
// restarts processes during a NATS outage unless its failure threshold
// covers the outage. Readiness is the probe to route or scale on.
package metrics
