package loop_test

import (
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/loop/looptest"
)

// BenchmarkSixteenHostileRuns runs 16 runs at once against models that
// answer 70,000 calls every round (8 rounds), the default serve
// concurrency, and reports the peak of the Go heap in use (sampled every
// 5ms) and of the memory the Go runtime took from the OS: the memory
// budget of 16 hostile runs, documented in docs/security.md.
//
//	go test ./pkg/loop -run '^$' -bench SixteenHostileRuns -benchtime 1x
func BenchmarkSixteenHostileRuns(b *testing.B) {
	const runs = 16
	cfg := fastConfig()
	cfg.Logger = zerolog.Nop()
	for range b.N {
		runtime.GC()
		var base runtime.MemStats
		runtime.ReadMemStats(&base)
		stop := make(chan struct{})
		var peakInuse, peakSys uint64
		var sampler sync.WaitGroup
		sampler.Go(func() {
			t := time.NewTicker(5 * time.Millisecond)
			defer t.Stop()
			for {
				var ms runtime.MemStats
				runtime.ReadMemStats(&ms)
				peakInuse = max(peakInuse, ms.HeapInuse)
				peakSys = max(peakSys, ms.Sys)
				select {
				case <-stop:
					return
				case <-t.C:
				}
			}
		})
		var wg sync.WaitGroup
		for range runs {
			wg.Go(func() {
				r, err := loop.New(cfg, &hostileModel{calls: 70_000}, looptest.NewCatalog(specs()...), looptest.New(handler), nil)
				if err != nil {
					b.Error(err)
					return
				}
				if _, err := r.Run(b.Context(), "go"); err != nil {
					b.Error(err)
				}
			})
		}
		wg.Wait()
		close(stop)
		sampler.Wait()
		b.ReportMetric(float64(peakInuse-base.HeapInuse)/(1<<20), "peak-heap-MiB")
		b.ReportMetric(float64(peakSys)/(1<<20), "peak-sys-MiB")
	}
}
