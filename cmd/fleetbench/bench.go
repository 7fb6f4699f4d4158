package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"runtime"
	"time"

	"github.com/rs/zerolog"

	"github.com/toolfleet/toolfleet/internal/embedded"
)

// row is one line of the table.
type row struct {
	name  string
	s     summary
	cpu   time.Duration // process CPU time per call or message
	msgs  float64       // the server's messages per call or message
	rate  string
	ratio string
	// floor is the row's ratio to the durable floor's row of the same
	// shape, measured in the same run.
	floor string
	note  string
}

type bench struct {
	p        plan
	log      zerolog.Logger
	out      io.Writer
	progress io.Writer
	short    bool
	rows     []row
	// loadStart is the load average when the run started.
	loadStart string
	// bl and floorRig are the baselines' settings and the floor's
	// requester, open for the whole run once a phase needs it.
	bl       baselines
	floorRig *floorRig

	// The figures other rows and the targets are measured against.
	baseJS, baseFan         summary
	floorSingle, floorRound summary
	// fastRound is the floor with a round's calls as one fast batch
	// (floor_fast.go).
	fastRound summary
	// checkedRound and checkedSustained are the floor with the fleet's
	// checks (floor_checks.go); claimedRound adds the claim of each call
	// before it runs (floor_claims.go).
	checkedRound, claimedRound  summary
	loopSingle, loopRound       summary
	journalSingle, journalRound summary
	onceRound                   summary
	floorSustained              map[int]*window // by worker count
	checkedSustained            map[int]*window
	sustainedLoop               map[int]*window
	mem                         *memReport
}

func (b *bench) want(phase string) bool { return len(b.p.only) == 0 || b.p.only[phase] }

func (b *bench) step(format string, a ...any) {
	fmt.Fprintf(b.progress, "fleetbench: "+format+"\n", a...)
}

func (b *bench) add(r row) { b.rows = append(b.rows, r) }

func (b *bench) run(ctx context.Context) error {
	dir, err := os.MkdirTemp("", "fleetbench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	srv, err := embedded.Start(embedded.Config{StoreDir: dir, Listen: true})
	if err != nil {
		return err
	}
	defer srv.Shutdown()
	// After the server starts: it sets the blocking profile's rate itself.
	if b.p.mutexProfile != "" {
		runtime.SetMutexProfileFraction(5)
	}
	if b.p.blockProfile != "" {
		runtime.SetBlockProfileRate(int(10 * time.Microsecond))
	}
	serverMsgs = func() int64 {
		v, err := srv.NATSServer().Varz(nil)
		if err != nil {
			return 0
		}
		return v.InMsgs + v.OutMsgs
	}
	defer func() { serverMsgs = nil }()
	url := srv.ClientURL()
	b.bl = baselines{url: url, timeout: callTimeout}
	if b.short {
		b.bl.timeout = shortCallTimeout
	}
	defer func() {
		if b.floorRig != nil {
			b.floorRig.close()
		}
	}()

	if b.want("baseline") {
		if err := b.baselines(ctx, url); err != nil {
			return fmt.Errorf("baselines: %w", err)
		}
	}
	f, err := openFleet(ctx, url, b.log, b.short, 1)
	if err != nil {
		return fmt.Errorf("fleet: %w", err)
	}
	defer f.close()
	if b.want("single") || b.want("round") {
		if err := b.latency(ctx, f); err != nil {
			return err
		}
	}
	if b.want("sustained") {
		if err := b.sustained(ctx, f); err != nil {
			return fmt.Errorf("sustained: %w", err)
		}
	}
	if b.want("sleep") {
		if err := b.sleepRounds(ctx, f); err != nil {
			return fmt.Errorf("20 ms rounds: %w", err)
		}
	}
	if b.want("runs") {
		if err := b.heldRuns(ctx, f); err != nil {
			return fmt.Errorf("concurrent runs: %w", err)
		}
	}
	if b.want("mcp") {
		if err := b.mcp(ctx, f); err != nil {
			return fmt.Errorf("mcp: %w", err)
		}
	}
	if b.want("sync") {
		if err := b.synced(ctx, dir); err != nil {
			return fmt.Errorf("sync always: %w", err)
		}
	}
	if b.p.cluster > 0 {
		if err := b.replicated(ctx, dir); err != nil {
			return fmt.Errorf("cluster: %w", err)
		}
	}
	b.print(url)
	return nil
}
