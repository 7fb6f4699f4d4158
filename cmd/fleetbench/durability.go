package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/toolfleet/toolfleet/internal/embedded"
	"github.com/toolfleet/toolfleet/pkg/harness"
)

// syncAlwaysConfig makes a server fsync every write to its store before it
// acknowledges it (nats-server's sync_interval: always), as a database
// fsyncs each commit. By default the server writes without an fsync per
// message and syncs every two minutes: a stored message survives the
// process's crash, not the machine's.
const syncAlwaysConfig = "jetstream { sync_interval: always }"

// synced measures, on a second server of this process that fsyncs every
// write, the rows whose durability a reader weighs: the durable floor's
// one-call and 32-call rounds and the fleet's, plain and journaled, each
// fleet row against the floor of its size. Each row's ratio is to the same
// row on the default server.
// Each of the fleet's rows notes the messages it stored per call, by
// stream: on this server each is fsynced before it is acknowledged, and so
// is the tombstone the calls stream (a work queue) writes when a call's
// acknowledgement removes it.
func (b *bench) synced(ctx context.Context, dir string) error {
	b.step("sync always: starting a server that fsyncs every write")
	srv, err := embedded.Start(embedded.Config{StoreDir: filepath.Join(dir, "sync"), Listen: true, ConfigText: syncAlwaysConfig})
	if err != nil {
		return err
	}
	defer srv.Shutdown()
	if js := srv.NATSServer().JetStreamConfig(); js == nil || !js.SyncAlways {
		return errors.New("the server did not take sync_interval: always")
	}
	// The rows' messages per call are this server's.
	defaultMsgs := serverMsgs
	serverMsgs = func() int64 {
		v, err := srv.NATSServer().Varz(nil)
		if err != nil {
			return 0
		}
		return v.InMsgs + v.OutMsgs
	}
	defer func() { serverMsgs = defaultMsgs }()
	url := srv.ClientURL()
	const label = "sync always (an fsync per write)"

	fr, err := (baselines{url: url, timeout: b.bl.timeout}).openFloor(ctx, b.log)
	if err != nil {
		return err
	}
	defer fr.close()
	fws, err := fr.startWorkers(ctx, b.p.latencyWorkers)
	if err != nil {
		return err
	}
	b.step("sync always: durable floor rounds")
	floorSingle, err := fr.latency(b.p.loopSingle, 1, floorMode{})
	var floor summary
	if err == nil {
		floor, err = fr.latency(b.p.round, fanout, floorMode{})
	}
	fws.stop()
	if err != nil {
		return fmt.Errorf("durable floor: %w", err)
	}
	b.add(row{name: "floor: 1 call, 256 B, " + label, s: floorSingle,
		ratio: ratio(floorSingle.p50, b.floorSingle.p50) + " default sync"})
	b.add(row{name: fmt.Sprintf("floor: %d calls, 256 B, one async batch, %s", fanout, label), s: floor,
		ratio: ratio(floor.p50, b.floorRound.p50) + " default sync"})

	f, err := openFleet(ctx, url, b.log, b.short, 1)
	if err != nil {
		return err
	}
	defer f.close()
	ws, err := f.startWorkers(ctx, b.p.latencyWorkers, 0, harness.Echo())
	if err != nil {
		return err
	}
	defer ws.stop()
	for _, m := range []struct {
		name      string
		calls     int
		journaled bool
		against   summary
	}{
		{"1 echo call, full loop round", 1, false, b.loopSingle},
		{"1 echo call, full loop round, journaled", 1, true, b.journalSingle},
		{fmt.Sprintf("%d echo calls, full loop round", fanout), fanout, false, b.loopRound},
		{fmt.Sprintf("%d echo calls, full loop round, journaled", fanout), fanout, true, b.journalRound},
	} {
		b.step("sync always: %s", m.name)
		n, measure := b.p.loopSingle, f.loopLatency
		if m.calls > 1 {
			n = b.p.loopRound
		}
		if m.journaled {
			measure = f.loopLatencyJournaled
		}
		before, err := f.stored(ctx)
		if err != nil {
			return err
		}
		s, err := measure(ctx, n, m.calls, echoTool, echoArgs, echoText)
		if err != nil {
			return fmt.Errorf("%s: %w", m.name, err)
		}
		against := floor
		if m.calls == 1 {
			against = floorSingle
		}
		r := row{name: "fleet: " + m.name + ", " + label, s: s, floor: vsFloor(s, against),
			note: f.storedPerCall(ctx, before, int64(s.calls), withWarmup)}
		if m.against.n > 0 {
			r.ratio = ratio(s.p50, m.against.p50) + " default sync"
		}
		b.add(r)
	}
	return nil
}
