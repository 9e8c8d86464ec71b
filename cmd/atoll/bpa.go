package main

import (
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/atoll-edge/atoll/internal/bpa/operator"
)

func newBPA() *cobra.Command {
	cfg := operator.NewConfig()
	cmd := &cobra.Command{
		Use:   "bpa",
		Short: "Run the BPA operator: bare-metal hosts (metal3) to Kubernetes clusters (kubespray) on a site",
		Long: "Run the BPA operator in a site's local controller cluster: it serves the Provisioning and Software\n" +
			"custom resources (bpa.akraino.org/v1alpha1; CRDs in config/crd), chooses and claims metal3\n" +
			"BareMetalHosts, writes the kubespray inventory and runs the installer Jobs.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return operator.Run(ctx, cfg)
		},
	}
	cfg.AddFlags(cmd.Flags())
	return cmd
}
