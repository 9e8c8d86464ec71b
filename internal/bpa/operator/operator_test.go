package operator

import (
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

func TestConfigFlags(t *testing.T) {
	tests := []struct {
		args    []string
		wantErr string // "" for a valid config
	}{
		{nil, ""},
		{[]string{"--namespace", "metal3,rack2", "--watch-namespace", "bpa", "--leader-elect"}, ""},
		{[]string{"--job-backoff-limit", "-1"}, "--job-backoff-limit"},
		{[]string{"--kubeconfig-handoff-timeout", "0s"}, "--kubeconfig-handoff-timeout"},
		{[]string{"--host-states", ""}, "--host-states"},
		{[]string{"--log-level", "loud"}, "--log-level"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			cfg := NewConfig()
			fs := pflag.NewFlagSet("bpa", pflag.ContinueOnError)
			cfg.AddFlags(fs)
			if err := fs.Parse(tt.args); err != nil {
				t.Fatal(err)
			}
			err := cfg.Validate()
			if tt.wantErr == "" && err != nil {
				t.Fatalf("Validate: %v", err)
			}
			if tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Fatalf("Validate: %v, want an error naming %s", err, tt.wantErr)
			}
		})
	}
	cfg := NewConfig()
	fs := pflag.NewFlagSet("bpa", pflag.ContinueOnError)
	cfg.AddFlags(fs)
	if err := fs.Parse([]string{"--namespace", "metal3,rack2", "--kubeconfig-handoff-timeout", "30s"}); err != nil {
		t.Fatal(err)
	}
	if strings.Join(cfg.HostNamespaces, ",") != "metal3,rack2" || cfg.HandoffTimeout != 30*time.Second || cfg.MetricsAddr != ":8080" {
		t.Fatalf("config %+v", cfg)
	}
}
