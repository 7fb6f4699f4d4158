package discovery

import "github.com/toolfleet/toolfleet/pkg/logkey"

// Log keys, the same as the transport's (natsbus) so that one query finds
// both.
const (
	logTool   = logkey.Tool
	logCode   = "code"
	logBucket = "bucket"
)
