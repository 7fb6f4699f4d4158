package admission

import (
	"time"
)

const (
	// RunProgressRate bounds the reports a coordinator passes on per run
	// and second.
	RunProgressRate = 50

	// ProgressPending bounds the reports a coordinator's subscription
	// holds before its callback takes them (a slow consumer drops more).
	ProgressPending = 1024
)

// RateBucket is a token bucket: rate tokens a second, at most rate at once.
type RateBucket struct {
	rate   float64
	tokens float64
	last   time.Time
}

// NewRateBucket returns a bucket of rate tokens a second, full at now.
func NewRateBucket(rate int, now time.Time) RateBucket {
	return RateBucket{rate: float64(rate), tokens: float64(rate), last: now}
}

// Take reports whether a token was there, and takes it.
func (b *RateBucket) Take(now time.Time) bool {
	b.tokens = min(b.rate, b.tokens+now.Sub(b.last).Seconds()*b.rate)
	b.last = now
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}
