package metrics_test

import (
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/toolfleet/toolfleet/internal/metrics"
	"github.com/toolfleet/toolfleet/internal/metrics/metricstest"
)

// TestShareClientLabelsAreBounded: past MaxClientLabels clients, further
// ones count under OtherClient, so a churn of clients cannot grow the
// series without bound.
func TestShareClientLabelsAreBounded(t *testing.T) {
	reg := prometheus.NewRegistry()
	s := metrics.NewShares(reg)
	for i := range metrics.MaxClientLabels + 10 {
		s.CallHeld("work", fmt.Sprintf("client-%d", i))
	}
	s.CallShareLimited("work", "client-0")
	s.CallHeld("work", "bad client!")
	fams := metricstest.Gather(t, reg)
	const held = "toolfleet_coordinator_calls_held_total"
	if got := len(fams[held].GetMetric()); got != metrics.MaxClientLabels+2 {
		t.Fatalf("%s has %d series, want %d (the first %d clients, %q and %q)", held, got, metrics.MaxClientLabels+2, metrics.MaxClientLabels, metrics.OtherClient, metrics.InvalidLabel)
	}
	if err := fams.Want(held, L("tool", "work", "client", metrics.OtherClient), 10); err != nil {
		t.Fatal(err)
	}
	if err := fams.Want("toolfleet_coordinator_calls_share_limited_total", L("tool", "work", "client", "client-0"), 1); err != nil {
		t.Fatal(err)
	}
}
