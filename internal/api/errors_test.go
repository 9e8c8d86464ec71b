package api_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"

	"github.com/atoll-edge/atoll/internal/api"
	"github.com/atoll-edge/atoll/internal/errs"
)

func TestHTTPStatus(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want int
	}{
		{"malformed", errs.New(errs.Malformed, "bad JSON"), http.StatusBadRequest},
		{"not found", errs.New(errs.NotFound, "no such project"), http.StatusNotFound},
		{"exists", errs.New(errs.Exists, "project exists"), http.StatusConflict},
		{"conflict", errs.New(errs.Conflict, "stale revision"), http.StatusConflict},
		{"too large", errs.New(errs.TooLarge, "too big"), http.StatusRequestEntityTooLarge},
		{"unsupported", errs.New(errs.Unsupported, "wrong content type"), http.StatusUnsupportedMediaType},
		{"invalid", errs.New(errs.Invalid, "bad name"), http.StatusUnprocessableEntity},
		{"unavailable", errs.New(errs.Unavailable, "etcd down"), http.StatusServiceUnavailable},
		{"malformed, wrapped", fmt.Errorf("decode: %w", errs.New(errs.Malformed, "bad JSON")), http.StatusBadRequest},
		{"not found, wrapped", fmt.Errorf("get: %w", errs.New(errs.NotFound, "x")), http.StatusNotFound},
		{"exists, wrapped", fmt.Errorf("create: %w", errs.New(errs.Exists, "x")), http.StatusConflict},
		{"conflict, wrapped", fmt.Errorf("update: %w", errs.New(errs.Conflict, "x")), http.StatusConflict},
		{"too large, wrapped", fmt.Errorf("read: %w", errs.New(errs.TooLarge, "x")), http.StatusRequestEntityTooLarge},
		{"unsupported, wrapped", fmt.Errorf("read: %w", errs.New(errs.Unsupported, "x")), http.StatusUnsupportedMediaType},
		{"invalid, wrapped", fmt.Errorf("check: %w", errs.New(errs.Invalid, "x")), http.StatusUnprocessableEntity},
		{"unavailable, wrapped", fmt.Errorf("list: %w", errs.New(errs.Unavailable, "x")), http.StatusServiceUnavailable},
		{"wrapped twice", fmt.Errorf("a: %w", fmt.Errorf("b: %w", errs.New(errs.Invalid, "x"))), http.StatusUnprocessableEntity},
		{"errs.Wrap of a plain cause", errs.Wrap(errs.NotFound, errors.New("cause"), "missing"), http.StatusNotFound},
		{"the outermost kind wins", errs.Wrap(errs.Invalid, errs.New(errs.NotFound, "inner"), "outer"), http.StatusUnprocessableEntity},
		{"joined with a kind", errors.Join(errors.New("plain"), errs.New(errs.Conflict, "x")), http.StatusConflict},
		{"max bytes", &http.MaxBytesError{Limit: 10}, http.StatusRequestEntityTooLarge},
		{"max bytes, wrapped", fmt.Errorf("read body: %w", &http.MaxBytesError{Limit: 10}), http.StatusRequestEntityTooLarge},
		{"plain error", errors.New("boom"), http.StatusInternalServerError},
		{"plain error, wrapped", fmt.Errorf("x: %w", errors.New("boom")), http.StatusInternalServerError},
		{"unknown kind", errs.New(errs.Kind("made up"), "x"), http.StatusInternalServerError},
		{"deadline exceeded", context.DeadlineExceeded, http.StatusGatewayTimeout},
		{"deadline exceeded, wrapped", fmt.Errorf("read project: %w", context.DeadlineExceeded), http.StatusGatewayTimeout},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := api.HTTPStatus(tc.err); got != tc.want {
				t.Errorf("HTTPStatus(%v): got %d, want %d", tc.err, got, tc.want)
			}
		})
	}
}
