package discovery

// Log keys, the same as the transport's (natsbus) so that one query finds
// both.
const (
	logTool   = "tool"
	logCode   = "code"
	logBucket = "bucket"
)
