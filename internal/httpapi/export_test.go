package httpapi

import "bytes"

func bytesReader(b []byte) *bytes.Reader { return bytes.NewReader(b) }

// Routes returns the method and path of every route s serves.
func Routes(s *Server) [][2]string {
	out := make([][2]string, len(s.routes))
	for i, rt := range s.routes {
		out[i] = [2]string{rt.method, rt.path}
	}
	return out
}

// DecodeJSON is decodeJSON for the fuzz target; it returns the error's
// code and status, or "" and 0.
var DecodeJSON = func(data []byte, v any) (string, int) {
	if e := decodeJSON(bytesReader(data), v); e != nil {
		return e.Code, e.Status
	}
	return "", 0
}

// CheckText is checkText's verdict: "" when text passes.
func CheckText(text string) string {
	if e := checkText("reason", text, maxReasonRunes, false); e != nil {
		return e.Code
	}
	return ""
}

// ParseEventID is parseEventID, with the id printed back ("" when it does
// not parse).
func ParseEventID(s string) string {
	id, ok := parseEventID(s)
	switch {
	case !ok:
		return ""
	case s == resultID:
		return resultID
	}
	return id.String()
}

// OpenSessions counts s's open sessions.
func OpenSessions(s *Server) int {
	s.sessions.mu.Lock()
	defer s.sessions.mu.Unlock()
	return len(s.sessions.byID)
}

// OpenAPI returns the served OpenAPI document.
func OpenAPI() []byte { return openAPIDocument }
