package harness

import "time"

// SetRunnerIdle sets the time between a runner's idle checks in h (a
// runner exits after one to two of them idle), before h's first call.
func SetRunnerIdle(h *Harness, d time.Duration) { h.runners.idleFor = d }
