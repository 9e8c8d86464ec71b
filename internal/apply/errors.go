package apply

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/atoll-edge/atoll/internal/errs"
)

// IsUnreachable reports whether err says that the cluster did not answer, or
// answered that it cannot serve now (429, 5xx, refused credentials): the object
// may be fine; retry the cluster's work with backoff.
func IsUnreachable(err error) bool { return errors.Is(err, errs.E(errs.Unavailable)) }

// IsRejected reports whether err says that the API server refused the object
// itself (invalid, forbidden, a kind the cluster does not serve): applying the
// same object again fails the same way, so mark it Failed.
func IsRejected(err error) bool { return errors.Is(err, errs.E(errs.Invalid)) }

// classify wraps err, from operation op on ref, in an *errs.Error whose Kind says
// what the caller should do (see the package documentation). For a Secret the
// server's message is replaced by its reason and field paths.
func classify(op string, ref ObjectRef, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.Canceled) {
		// The caller gave up; that says nothing of the cluster or the object.
		return fmt.Errorf("%s %s: %w", op, ref, err)
	}
	if ref.isSecret() {
		err = redact(err)
	}
	kind, what := judge(err)
	return errs.Wrap(kind, err, "%s %s: %s", op, ref, what)
}

// judge returns the Kind of err and a short explanation for a person.
func judge(err error) (errs.Kind, string) {
	if meta.IsNoMatchError(err) {
		return errs.Invalid, "the cluster does not serve this kind (is its CRD installed?)"
	}
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		if errors.Is(err, context.DeadlineExceeded) {
			return errs.Unavailable, "the cluster did not answer in time; retry later"
		}
		// Transport errors (refused, reset, DNS, TLS, timeouts) come as *url.Error;
		// anything else that is not an API status is treated alike: retrying is
		// safer than failing an object for a reason that is not its own.
		return errs.Unavailable, "the cluster is unreachable; retry later"
	}
	s := status.Status()
	switch code := int(s.Code); {
	case code == http.StatusUnauthorized:
		return errs.Unavailable, "the cluster refused the hub's credentials; check its kubeconfig"
	case code == http.StatusTooManyRequests || code >= 500:
		return errs.Unavailable, fmt.Sprintf("the cluster cannot serve it now (%d %s); retry later", code, s.Reason)
	case code == http.StatusForbidden && hasCause(s, corev1.NamespaceTerminatingCause):
		return errs.Conflict, "its namespace is being deleted; retry once it is gone"
	case code == http.StatusNotFound:
		return errs.NotFound, "not found"
	case code == http.StatusConflict || code == http.StatusGone:
		return errs.Conflict, fmt.Sprintf("conflict (%d %s); retry", code, s.Reason)
	case code >= 400:
		return errs.Invalid, fmt.Sprintf("rejected by the API server (%d %s)", code, s.Reason)
	default:
		return errs.Unavailable, fmt.Sprintf("unexpected answer (%d %s); retry later", code, s.Reason)
	}
}

func hasCause(s metav1.Status, t metav1.CauseType) bool {
	if s.Details == nil {
		return false
	}
	for _, c := range s.Details.Causes {
		if c.Type == t {
			return true
		}
	}
	return false
}

// redact returns err without anything an API server might have quoted from a
// Secret: an API status keeps its code, reason, kind, name and the types and
// fields of its causes; the message lists only those. Other errors (transport
// errors, which name the URL but carry no body) are returned as they are.
func redact(err error) error {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return err
	}
	s := status.Status()
	out := metav1.Status{Status: s.Status, Code: s.Code, Reason: s.Reason}
	msg := fmt.Sprintf("%d %s", s.Code, s.Reason)
	if d := s.Details; d != nil {
		out.Details = &metav1.StatusDetails{Group: d.Group, Kind: d.Kind, Name: d.Name, UID: d.UID}
		var fields []string
		for _, c := range d.Causes {
			out.Details.Causes = append(out.Details.Causes, metav1.StatusCause{Type: c.Type, Field: c.Field})
			if c.Field != "" {
				fields = append(fields, fmt.Sprintf("%s (%s)", c.Field, c.Type))
			}
		}
		if len(fields) > 0 {
			msg += " in " + strings.Join(fields, ", ")
		}
	}
	out.Message = msg + " (the server's message is withheld for Secrets)"
	return &apierrors.StatusError{ErrStatus: out}
}
