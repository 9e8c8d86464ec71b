package apply

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"syscall"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/atoll-edge/atoll/internal/errs"
)

func TestClassify(t *testing.T) {
	cm := ObjectRef{APIVersion: "v1", Kind: "ConfigMap", Namespace: "ns", Name: "cm"}
	gr := schema.GroupResource{Resource: "configmaps"}
	refused := &url.Error{Op: "Patch", URL: "https://127.0.0.1:1/api/v1/namespaces/ns/configmaps/cm",
		Err: &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}}
	terminating := apierrors.NewForbidden(gr, "cm", errors.New("unable to create new content in namespace ns because it is being terminated"))
	terminating.ErrStatus.Details.Causes = []metav1.StatusCause{{Type: corev1.NamespaceTerminatingCause, Message: "namespace ns is being terminated", Field: "metadata.namespace"}}

	tests := []struct {
		name            string
		err             error
		wantKind        errs.Kind
		wantUnreachable bool
		wantRejected    bool
	}{
		{"connection refused", refused, errs.Unavailable, true, false},
		{"request timeout", fmt.Errorf("patch: %w", context.DeadlineExceeded), errs.Unavailable, true, false},
		{"unauthorized", apierrors.NewUnauthorized("bad certificate"), errs.Unavailable, true, false},
		{"too many requests", apierrors.NewTooManyRequests("slow down", 1), errs.Unavailable, true, false},
		{"internal error (a failing webhook)", apierrors.NewInternalError(errors.New("failed calling webhook")), errs.Unavailable, true, false},
		{"service unavailable", apierrors.NewServiceUnavailable("etcd is down"), errs.Unavailable, true, false},
		{"invalid", apierrors.NewInvalid(schema.GroupKind{Kind: "ConfigMap"}, "cm", field.ErrorList{field.Required(field.NewPath("data"), "")}), errs.Invalid, false, true},
		{"bad request", apierrors.NewBadRequest("cannot decode"), errs.Invalid, false, true},
		{"forbidden", apierrors.NewForbidden(gr, "cm", errors.New("RBAC says no")), errs.Invalid, false, true},
		{"no kind match", &meta.NoKindMatchError{GroupKind: schema.GroupKind{Group: "x.dev", Kind: "X"}, SearchedVersions: []string{"v1"}}, errs.Invalid, false, true},
		{"terminating namespace", terminating, errs.Conflict, false, false},
		{"conflict", apierrors.NewConflict(gr, "cm", errors.New("changed")), errs.Conflict, false, false},
		{"not found", apierrors.NewNotFound(gr, "cm"), errs.NotFound, false, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := classify("apply", cm, tc.err)
			if got := errs.KindOf(err); got != tc.wantKind {
				t.Errorf("kind = %q, want %q", got, tc.wantKind)
			}
			if got := IsUnreachable(err); got != tc.wantUnreachable {
				t.Errorf("IsUnreachable = %t, want %t", got, tc.wantUnreachable)
			}
			if got := IsRejected(err); got != tc.wantRejected {
				t.Errorf("IsRejected = %t, want %t", got, tc.wantRejected)
			}
			if !errors.Is(err, tc.err) {
				t.Errorf("the cause is not in the chain of %v", err)
			}
			if !strings.HasPrefix(err.Error(), "apply v1 ConfigMap ns/cm: ") {
				t.Errorf("message %q does not start by naming the operation and the object", err)
			}
		})
	}

	t.Run("caller cancelled", func(t *testing.T) {
		err := classify("apply", cm, fmt.Errorf("patch: %w", context.Canceled))
		if errs.KindOf(err) != "" || IsUnreachable(err) || IsRejected(err) || !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v (kind %q), want context.Canceled without a kind", err, errs.KindOf(err))
		}
	})
}

func TestClassifyRedactsSecrets(t *testing.T) {
	const value = "hunter2-the-password"
	secret := ObjectRef{APIVersion: "v1", Kind: "Secret", Namespace: "ns", Name: "creds"}
	invalid := apierrors.NewInvalid(schema.GroupKind{Kind: "Secret"}, "creds", field.ErrorList{
		field.Invalid(field.NewPath("data").Key("token"), value, "must be short"),
	})
	tests := []struct {
		name      string
		ref       ObjectRef
		err       error
		wantIn    []string
		wantOut   []string
		wantKind  errs.Kind
		wantCause bool // the original error is still in the chain
	}{
		{
			name:     "Secret: reason and fields only",
			ref:      secret,
			err:      invalid,
			wantIn:   []string{"v1 Secret ns/creds", "422 Invalid", "data[token] (FieldValueInvalid)", "withheld"},
			wantOut:  []string{value, "must be short"},
			wantKind: errs.Invalid,
		},
		{
			name:     "Secret of another group is not a core Secret",
			ref:      ObjectRef{APIVersion: "example.dev/v1", Kind: "Secret", Namespace: "ns", Name: "creds"},
			err:      invalid,
			wantIn:   []string{value},
			wantKind: errs.Invalid, wantCause: true,
		},
		{
			name:     "ConfigMap keeps the server's message",
			ref:      ObjectRef{APIVersion: "v1", Kind: "ConfigMap", Namespace: "ns", Name: "cm"},
			err:      invalid,
			wantIn:   []string{value, "must be short"},
			wantKind: errs.Invalid, wantCause: true,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := classify("apply", tc.ref, tc.err)
			for _, s := range tc.wantIn {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("%q does not contain %q", err, s)
				}
			}
			for _, s := range tc.wantOut {
				if strings.Contains(err.Error(), s) {
					t.Errorf("%q contains %q", err, s)
				}
			}
			if errs.KindOf(err) != tc.wantKind || !apierrors.IsInvalid(err) {
				t.Errorf("kind %q, apierrors.IsInvalid %t; want %q, true", errs.KindOf(err), apierrors.IsInvalid(err), tc.wantKind)
			}
			if got := errors.Is(err, tc.err); got != tc.wantCause {
				t.Errorf("original error in the chain: %t, want %t", got, tc.wantCause)
			}
		})
	}
}

func TestOptionsDefaults(t *testing.T) {
	tests := []struct {
		name    string
		opts    Options
		wantErr string
	}{
		{"zero value", Options{}, ""},
		{"foreground", Options{Propagation: metav1.DeletePropagationForeground}, ""},
		{"unknown propagation", Options{Propagation: "Sideways"}, "unknown deletion propagation"},
		{"negative timeout", Options{CRDTimeout: -1}, "must not be negative"},
		{"long field manager", Options{FieldManager: strings.Repeat("m", 129)}, "longer than 128"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.opts.withDefaults()
			if tc.wantErr != "" {
				if errs.KindOf(err) != errs.Invalid || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want invalid containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.FieldManager != DefaultFieldManager || got.DefaultNamespace != DefaultNamespace ||
				got.CRDTimeout != DefaultCRDTimeout || got.DeleteTimeout != DefaultDeleteTimeout ||
				got.RequestTimeout != DefaultRequestTimeout || got.Propagation == "" {
				t.Fatalf("defaults not filled: %+v", got)
			}
		})
	}
}
