package api

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"

	"github.com/atoll-edge/atoll/internal/errs"
)

// statusOf is the one place where kinds of error become HTTP status codes.
var statusOf = map[errs.Kind]int{
	errs.Malformed:   http.StatusBadRequest,
	errs.NotFound:    http.StatusNotFound,
	errs.Exists:      http.StatusConflict,
	errs.Conflict:    http.StatusConflict,
	errs.TooLarge:    http.StatusRequestEntityTooLarge,
	errs.Unsupported: http.StatusUnsupportedMediaType,
	errs.Invalid:     http.StatusUnprocessableEntity,
	errs.Unavailable: http.StatusServiceUnavailable,
}

// statusClientClosed is logged (never seen by the client) when the client went away.
const statusClientClosed = 499

// Error is the JSON body of every error answer.
type Error struct {
	// Code repeats the HTTP status code.
	Code int `json:"code"`
	// Reason is the kind of error ("not found", "conflict", ...).
	Reason string `json:"reason"`
	// Message says, for a person, what was wrong and what to do.
	Message string `json:"message"`
}

// HTTPStatus returns the status code an error is answered with.
func HTTPStatus(err error) int {
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		return http.StatusRequestEntityTooLarge
	case errors.Is(err, context.DeadlineExceeded):
		return http.StatusGatewayTimeout
	case errors.Is(err, context.Canceled):
		return statusClientClosed
	}
	if code, ok := statusOf[errs.KindOf(err)]; ok {
		return code
	}
	return http.StatusInternalServerError
}

// writeError answers err as JSON. Errors without a kind are internal: their text
// goes to the log, and the client gets a generic message.
func writeError(w http.ResponseWriter, r *http.Request, log *slog.Logger, err error) {
	code := HTTPStatus(err)
	body := Error{Code: code, Reason: string(errs.KindOf(err)), Message: err.Error()}
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		body.Reason = string(errs.TooLarge)
		body.Message = "the request body is larger than the limit for this route"
	}
	switch code {
	case http.StatusGatewayTimeout:
		body.Reason = "timeout"
	case statusClientClosed:
		body.Reason = "canceled"
		log.Debug("client went away", "method", r.Method, "path", r.URL.Path)
		writeJSON(w, code, body)
		return
	}
	if code >= 500 {
		log.Error("request failed", "method", r.Method, "path", r.URL.Path, "error", err.Error())
		if code == http.StatusInternalServerError {
			body.Reason = "internal"
			body.Message = "internal error; the hub's log has the details"
		}
	}
	writeJSON(w, code, body)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	if v != nil {
		enc := json.NewEncoder(w)
		enc.SetEscapeHTML(false)
		_ = enc.Encode(v)
	}
}
