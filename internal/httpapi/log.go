package httpapi

// Log keys of the API's lines (besides pkg/logkey's): never a body, a
// query, a header or a credential.
const (
	keyMethod = "method" // the request's method
	keyRoute  = "route"  // the route's pattern, not the request's path
	keyStatus = "status" // the answer's HTTP status
	keyCode   = "code"   // the answer's error code
	keyUser   = "user"   // the NATS user of a login (a subject token)
)
