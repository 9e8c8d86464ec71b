// Command atoll is Atoll's one binary: `atoll serve` runs the hub.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/atoll-edge/atoll/internal/hub"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	if err := newRoot().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "atoll:", err)
		os.Exit(1)
	}
}

func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:           "atoll",
		Short:         "Atoll: edge multi-cluster orchestrator and bare-metal site provisioner",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newBPA())
	root.AddCommand(newServe(), &cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Run:   func(cmd *cobra.Command, _ []string) { fmt.Fprintln(cmd.OutOrStdout(), version) },
	})
	return root
}

func newServe() *cobra.Command {
	cfg := hub.NewConfig()
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the hub: the REST API on an embedded etcd (or --etcd-endpoints)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			h, err := hub.Start(ctx, cfg)
			if err != nil {
				return err
			}
			defer h.Close()
			select {
			case <-ctx.Done():
				return nil
			case err := <-h.Err():
				return err
			}
		},
	}
	cfg.AddFlags(cmd.Flags())
	return cmd
}
