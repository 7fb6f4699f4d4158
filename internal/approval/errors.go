package approval

import "errors"

var (
	// ErrDigestMismatch is a request whose digest is not the digest of its
	// own run id, call key, tool and arguments. It is never published.
	ErrDigestMismatch = errors.New("approval: request digest does not match the call")
	// ErrTooLarge is a request that encodes to more than the configured
	// message limit. It is never published.
	ErrTooLarge = errors.New("approval: request too large")
)
