// Package fleettest starts a whole toolfleet inside a test: an embedded
// JetStream server (its store in a temporary directory, no TCP listener
// unless asked), the fleet's streams, and workers serving the given tools.
// [Start] takes the test and stops everything when it ends (t.Cleanup);
// [New] starts the same from an Example or a main, and [Fleet.Close]
// stops it. [Fleet.Workers] are the workers it started and
// [Fleet.Client] a pkg/client.Client of the fleet.
//
//	func TestAgent(t *testing.T) {
//		fleet := fleettest.Start(t, fleettest.Config{Tools: []harness.Tool{add}})
//		model, _ := scripted.Parse([]byte(`{"turns": [
//			{"tool_calls": [{"id": "c1", "name": "add", "arguments": {"a": 2, "b": 3}}]},
//			{"content": "The sum is {{result \"c1\"}}."}]}`))
//		res, err := fleet.Runner(runner.Config{Model: model}).Run(t.Context(), "2 + 3?")
//		...
//	}
//
// # A deterministic model
//
// The scripted model (pkg/model/scripted) is the model for such tests: a
// script of turns, each with the tool calls the model makes, and a final
// answer that may quote the observations ({{result "c1"}}). The same script
// gives the same run every time, so a test asserts on the exact transcript;
// a script can also send what a hostile model would (bad arguments, unknown
// tools, a thousand calls) to test the guarantees.
//
// # Accounts and roles
//
// The server has the accounts and users of deploy/nats-server.conf, each
// with its role's permissions there and a password drawn at start, and
// each connection the fleet hands out is the user that does its job:
// [Fleet.Conn] and [Fleet.Connect] the coordinator (what a runner needs),
// the fleet's workers and [Fleet.ConnectWorker] a worker,
// [Fleet.ConnectOperator] the operator (the only user that decides
// approvals), all in account FLEET; [Fleet.ConnectClient] the client, in
// an account of its own, for pkg/client. [Fleet.Prefix] is the fleet's
// subject prefix; Config.Listen gives a URL, with the worker's
// credentials, for a worker in another process.
package fleettest
