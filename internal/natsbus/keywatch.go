package natsbus

import (
	"time"
)

const (
	DefaultKeyWatchMake = 5 * time.Second
)
