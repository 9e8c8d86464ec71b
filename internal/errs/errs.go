// Package errs defines the kinds of error that Atoll's API maps to HTTP status codes.
//
// Packages that do I/O or validation return *Error values (or wrap them with %w);
// the API layer looks at the Kind with errors.Is or KindOf, never at the message.
package errs

import (
	"errors"
	"fmt"
)

// Kind classifies an error; the API layer maps each Kind to one HTTP status code.
type Kind string

// The kinds of error, with the HTTP status code the API answers for each.
const (
	Malformed   Kind = "malformed"   // 400: the input cannot be parsed
	NotFound    Kind = "not found"   // 404: the object or its parent is missing
	Exists      Kind = "exists"      // 409: an object of that name exists
	Conflict    Kind = "conflict"    // 409: stale revision, has children, is referenced
	TooLarge    Kind = "too large"   // 413
	Unsupported Kind = "unsupported" // 415: wrong content type
	Invalid     Kind = "invalid"     // 422: parsed, but unacceptable
	Unavailable Kind = "unavailable" // 503: a dependency (etcd) does not answer
)

// Error is an error of a Kind with a message meant for a person.
type Error struct {
	Kind Kind
	Msg  string
	Err  error // optional cause
}

// Error returns the message, followed by the cause's message if there is one.
func (e *Error) Error() string {
	if e.Err != nil {
		return e.Msg + ": " + e.Err.Error()
	}
	return e.Msg
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// Is reports whether target is a bare sentinel (see E) of the same Kind, so that
// errors.Is(err, errs.E(errs.NotFound)) works through any chain of wrapping.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Msg == "" && t.Err == nil && t.Kind == e.Kind
}

// New returns an error of kind k with a formatted message (fmt.Sprintf semantics;
// %w is not interpreted: use Wrap to keep a cause).
func New(k Kind, format string, args ...any) error {
	return &Error{Kind: k, Msg: fmt.Sprintf(format, args...)}
}

// Wrap returns an error of kind k with a message and a cause.
func Wrap(k Kind, err error, format string, args ...any) error {
	return &Error{Kind: k, Msg: fmt.Sprintf(format, args...), Err: err}
}

// E returns a bare sentinel of kind k for errors.Is comparisons.
func E(k Kind) error { return &Error{Kind: k} }

// KindOf returns the Kind of the first *Error in err's chain, or "" if there is none.
func KindOf(err error) Kind {
	var e *Error
	if errors.As(err, &e) {
		return e.Kind
	}
	return ""
}
