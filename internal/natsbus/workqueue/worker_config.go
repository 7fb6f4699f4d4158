package workqueue

import (
	"time"
)

const (
	DefaultPollWait = time.Second
)
