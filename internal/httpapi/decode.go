package httpapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"unicode"
	"unicode/utf8"
)

// maxReasonRunes bounds a reason (a denial's, a pause's, a cancel's).
const maxReasonRunes = 500

// decodeBody decodes r's JSON body, at most max bytes, into v: a body
// that is too large, not JSON, not one object, or that has a field v does
// not name is a clear 400 (413 for the size).
func decodeBody(w http.ResponseWriter, r *http.Request, max int64, v any) *apiError {
	if ct := r.Header.Get("Content-Type"); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || mt != "application/json" {
			return errorf(http.StatusUnsupportedMediaType, CodeBadRequest, "the body must be application/json")
		}
	}
	body := http.MaxBytesReader(w, r.Body, max)
	return decodeJSON(body, v)
}

// decodeJSON decodes exactly one JSON object from body into v, refusing
// unknown fields.
func decodeJSON(body io.Reader, v any) *apiError {
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var mbe *http.MaxBytesError
		var ute *json.UnmarshalTypeError
		switch {
		case errors.As(err, &mbe):
			return errorf(http.StatusRequestEntityTooLarge, CodeTooLarge, fmt.Sprintf("the body is larger than %d bytes", mbe.Limit))
		case errors.Is(err, io.EOF):
			return errorf(http.StatusBadRequest, CodeBadRequest, "the body is empty; it must be a JSON object")
		case errors.As(err, &ute):
			return badField(ute.Field, fmt.Sprintf("field %q must be a JSON %s", ute.Field, ute.Type))
		}
		var se *json.SyntaxError
		if errors.As(err, &se) {
			return errorf(http.StatusBadRequest, CodeBadRequest, fmt.Sprintf("the body is not valid JSON (at byte %d)", se.Offset))
		}
		if f, ok := unknownField(err); ok {
			return badField(f, fmt.Sprintf("unknown field %q", f))
		}
		return errorf(http.StatusBadRequest, CodeBadRequest, "the body is not a JSON object of the documented shape")
	}
	if dec.More() {
		return errorf(http.StatusBadRequest, CodeBadRequest, "the body holds more than one JSON value")
	}
	var extra json.RawMessage
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return errorf(http.StatusRequestEntityTooLarge, CodeTooLarge, fmt.Sprintf("the body is larger than %d bytes", mbe.Limit))
		}
		return errorf(http.StatusBadRequest, CodeBadRequest, "the body holds more than one JSON value")
	}
	return nil
}

// unknownField returns the field encoding/json names in its unknown-field
// error (it has no type for it).
func unknownField(err error) (string, bool) {
	var f string
	if n, _ := fmt.Sscanf(err.Error(), "json: unknown field %q", &f); n == 1 && utf8.ValidString(f) && len(f) <= 100 {
		return f, true
	}
	return "", false
}

// checkText refuses, as field, text that is not valid UTF-8, holds a
// control character (a newline, an escape sequence: what would forge a
// log line or repaint a terminal) or is longer than max runes. required
// refuses an empty one.
func checkText(field, text string, max int, required bool) *apiError {
	switch {
	case text == "" && required:
		return badField(field, fmt.Sprintf("%s is required", field))
	case !utf8.ValidString(text):
		return badField(field, fmt.Sprintf("%s must be valid UTF-8", field))
	case utf8.RuneCountInString(text) > max:
		return badField(field, fmt.Sprintf("%s must be at most %d characters", field, max))
	}
	for _, c := range text {
		if unicode.IsControl(c) || unicode.Is(unicode.Cf, c) {
			return badField(field, fmt.Sprintf("%s must not hold control or format characters", field))
		}
	}
	return nil
}
