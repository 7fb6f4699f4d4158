package deploy

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// TestConfRunProgress walks a call's progress under the shipped
// permissions: a worker publishes it on the call's subject, the coordinator
// reads it and passes it on to the run's client, who reads it, as do the
// operator and the viewer (the console's run page); the worker may not
// read a run's progress, the viewer only a client's runs', no one but
// the coordinator may publish it, and the client may neither forge it
// nor read another client's.
func TestConfRunProgress(t *testing.T) {
	t.Parallel()
	s := startFromConf(t)
	coord := connectAs(t, s, "coordinator")
	worker := connectAs(t, s, "worker")
	op := connectAs(t, s, "operator")
	cli := connectAs(t, s, "client")
	viewer := connectAs(t, s, "viewer")
	subjects := protocol.Subjects{}
	const run, key = "run1", "key1"
	callSubj, _ := subjects.Progress(run, key)
	callsOf, _ := subjects.ProgressOf(run)
	clientSubj, _ := subjects.ClientRunProgress("client", run)

	fromWorker, err := coord.nc.SubscribeSync(callsOf)
	if err != nil || violated(t, coord, "Subscription", callsOf) {
		t.Fatalf("coordinator subscribing to %s: %v", callsOf, err)
	}
	toClient, err := cli.nc.SubscribeSync("fleet.run.progress.client.>")
	if err != nil || violated(t, cli, "Subscription", "fleet.run.progress.client.>") {
		t.Fatalf("client subscribing to its runs' progress: %v", err)
	}
	// the operator and the viewer follow every client's runs (the
	// console's run page)
	byOperator, err := op.nc.SubscribeSync("fleet.run.progress.>")
	if err != nil || violated(t, op, "Subscription", "fleet.run.progress.>") {
		t.Fatalf("operator subscribing to every run's progress: %v", err)
	}
	byViewer, err := viewer.nc.SubscribeSync("fleet.run.progress.*.*")
	if err != nil || violated(t, viewer, "Subscription", "fleet.run.progress.*.*") {
		t.Fatalf("viewer subscribing to every client's runs' progress: %v", err)
	}
	if err := cli.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := worker.nc.Publish(callSubj, []byte(`{"v":1}`)); err != nil || violated(t, worker, "Publish", callSubj) {
		t.Fatalf("worker publishing %s: %v", callSubj, err)
	}
	if _, err := fromWorker.NextMsg(5 * time.Second); err != nil {
		t.Fatalf("coordinator did not get the worker's progress: %v", err)
	}
	if err := coord.nc.Publish(clientSubj, []byte(`{"v":1}`)); err != nil || violated(t, coord, "Publish", clientSubj) {
		t.Fatalf("coordinator publishing %s: %v", clientSubj, err)
	}
	if m, err := toClient.NextMsg(5 * time.Second); err != nil || m.Subject != clientSubj {
		t.Fatalf("client did not get its run's progress: %v", err)
	}
	for name, sub := range map[string]*nats.Subscription{"operator": byOperator, "viewer": byViewer} {
		if m, err := sub.NextMsg(5 * time.Second); err != nil || m.Subject != clientSubj {
			t.Fatalf("%s did not get the client's run's progress: %v", name, err)
		}
	}

	for _, subj := range []string{clientSubj, "fleet.run.progress.>"} {
		if !refusedSub(t, worker, subj) {
			t.Errorf("worker subscribe on %s not refused", subj)
		}
	}
	for _, subj := range []string{"fleet.run.progress.>", "fleet.run.progress.run1", callsOf} {
		if !refusedSub(t, viewer, subj) {
			t.Errorf("viewer subscribe on %s not refused", subj)
		}
	}
	if !refusedPub(t, viewer, clientSubj) || !refusedPub(t, op, clientSubj) {
		t.Errorf("viewer or operator publish on %s not refused", clientSubj)
	}
	for _, subj := range []string{"fleet.run.progress.bob.run2", "fleet.run.progress.bob.>", "fleet.run.progress.*", "fleet.run.progress.>", "fleet.run.progress.run1", callsOf} {
		if !refusedSub(t, cli, subj) {
			t.Errorf("client subscribe on %s not refused", subj)
		}
	}
	for _, subj := range []string{clientSubj, callSubj} {
		if !refusedPub(t, cli, subj) {
			t.Errorf("client publish on %s not refused", subj)
		}
	}
	if !refusedPub(t, worker, clientSubj) {
		t.Errorf("worker publish on %s not refused", clientSubj)
	}
}
