package deploy

import (
	"testing"
	"time"

	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// TestConfRunProgress walks a call's progress under the shipped
// permissions: a worker publishes it on the call's subject, the coordinator
// reads it and passes it on to the run's client, who reads it; no other
// user may read a run's progress, and the client may neither forge it nor
// read another client's.
func TestConfRunProgress(t *testing.T) {
	t.Parallel()
	s := startFromConf(t)
	coord := connectAs(t, s, "coordinator")
	worker := connectAs(t, s, "worker")
	op := connectAs(t, s, "operator")
	cli := connectAs(t, s, "client")
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

	for name, c := range map[string]client{"worker": worker, "operator": op} {
		for _, subj := range []string{clientSubj, "fleet.run.progress.>"} {
			if !refusedSub(t, c, subj) {
				t.Errorf("%s subscribe on %s not refused", name, subj)
			}
		}
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
