package mcpserve

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"net/http"

	"github.com/modelcontextprotocol/go-sdk/auth"
)

// tokenVerifier accepts the given static bearer tokens, compared in
// constant time (of their digests, so the length leaks nothing either).
func tokenVerifier(tokens []string) auth.TokenVerifier {
	digests := make([][32]byte, 0, len(tokens))
	for _, t := range tokens {
		if t != "" {
			digests = append(digests, sha256.Sum256([]byte(t)))
		}
	}
	return func(_ context.Context, token string, _ *http.Request) (*auth.TokenInfo, error) {
		d := sha256.Sum256([]byte(token))
		ok := 0
		for _, w := range digests {
			ok |= subtle.ConstantTimeCompare(d[:], w[:])
		}
		if ok != 1 {
			return nil, auth.ErrInvalidToken
		}
		return &auth.TokenInfo{}, nil
	}
}
