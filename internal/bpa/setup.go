package bpa

import (
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"

	bpav1 "github.com/atoll-edge/atoll/api/bpa/v1alpha1"
)

// NewScheme returns a scheme with the Kubernetes types and bpa.akraino.org/v1alpha1.
func NewScheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		return nil, err
	}
	if err := bpav1.AddToScheme(s); err != nil {
		return nil, err
	}
	return s, nil
}

// Setup registers the Provisioning and Software controllers with mgr.
func Setup(mgr ctrl.Manager, opts Options) error {
	opts = opts.withDefaults()
	p := &ProvisioningReconciler{Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Scheme: mgr.GetScheme(), Options: opts}
	if err := p.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("set up the Provisioning controller: %w", err)
	}
	s := &SoftwareReconciler{Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Scheme: mgr.GetScheme(), Options: opts}
	if err := s.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("set up the Software controller: %w", err)
	}
	return nil
}
