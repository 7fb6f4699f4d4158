package modeltest

import (
	"encoding/json"
	"net/http"
)

// OpenAIErrorType is the error.type the OpenAI APIs (chat completions and
// Responses) answer a status with.
func OpenAIErrorType(status int) string {
	switch {
	case status == http.StatusTooManyRequests:
		return "rate_limit_exceeded"
	case status < 500:
		return "invalid_request_error"
	}
	return "server_error"
}

// WriteOpenAIError writes the error body of the OpenAI APIs:
// {"error": {"message", "type", "param", "code"}}, param and code null
// when empty.
func WriteOpenAIError(w http.ResponseWriter, status int, typ, code, param, msg string) {
	e := map[string]any{"message": msg, "type": typ, "param": nil, "code": nil}
	if param != "" {
		e["param"] = param
	}
	if code != "" {
		e["code"] = code
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": e})
}
