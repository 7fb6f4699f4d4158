package main

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/toolfleet/toolfleet/internal/embedded"
	"github.com/toolfleet/toolfleet/pkg/harness"
)

// replicated measures the loop on a JetStream cluster of p.cluster nodes
// in this process, every stream with one replica on each node (R3), beside
// the single server's R1 rows of the same run: a one-call round, a
// 32-call round, and sustained calls with two workers. The fleet's clients
// connect to the cluster's URLs; which node each picks is the client's.
func (b *bench) replicated(ctx context.Context, dir string) error {
	b.step("cluster: starting %d nodes", b.p.cluster)
	c, err := embedded.StartCluster(embedded.ClusterConfig{Nodes: b.p.cluster, StoreDir: filepath.Join(dir, "cluster")})
	if err != nil {
		return err
	}
	defer c.Shutdown()
	f, err := openFleet(ctx, c.URLs(), b.log, b.short, b.p.cluster)
	if err != nil {
		return err
	}
	defer f.close()
	label := fmt.Sprintf("R%d on a %d-node cluster", b.p.cluster, b.p.cluster)

	ws, err := f.startWorkers(ctx, b.p.latencyWorkers, 0, harness.Echo())
	if err != nil {
		return err
	}
	b.step("cluster: loop rounds")
	single, err := f.loopLatency(ctx, b.p.loopSingle, 1, echoTool, echoArgs, echoText)
	if err == nil {
		b.add(row{name: "fleet: 1 echo call, full loop round, " + label, s: single,
			ratio: ratio(single.p50, b.loopSingle.p50) + " R1"})
		var round summary
		if round, err = f.loopLatency(ctx, b.p.loopRound, fanout, echoTool, echoArgs, echoText); err == nil {
			b.add(row{name: fmt.Sprintf("fleet: %d echo calls, full loop round, %s", fanout, label), s: round,
				ratio: ratio(round.p50, b.loopRound.p50) + " R1"})
		}
	}
	ws.stop()
	if err != nil {
		return err
	}

	const workers = 2
	ws, err = f.startWorkers(ctx, workers, 0, harness.Echo())
	if err != nil {
		return err
	}
	defer ws.stop()
	b.step("cluster: sustained echo calls, %d workers", workers)
	w, err := f.loopSustained(ctx, b.p.sustainConc, fanout, echoTool, echoArgs, echoText, b.p.warm, b.p.duration, false)
	if err != nil {
		return err
	}
	b.add(row{name: fmt.Sprintf("fleet: sustained echo calls, full loop, %d runs × %d-call rounds, %d workers, %s", b.p.sustainConc, fanout, workers, label),
		rate: w.rate(), cpu: w.cpuPerCall(), msgs: w.msgsPerCall(), note: fmt.Sprintf("%d calls in %v%s", w.calls.Load(), b.p.duration, r1Rate(b.sustainedLoop[workers]))})
	return nil
}

// r1Rate is the single server's rate with the same workers, for a note, or
// "" when the sustained phase did not run.
func r1Rate(w *window) string {
	if w == nil {
		return ""
	}
	return "; R1: " + w.rate()
}
