package edge

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"
)

func TestSweepOrphans(t *testing.T) {
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name      string
		owner     string // owner.pid content; "" for none
		wantKill  bool
		wantFiles []string
	}{
		{"owner gone", strconv.Itoa(dead.Process.Pid), true, []string{"logs"}},
		{"owner alive", strconv.Itoa(os.Getpid()), false, []string{"etcd", "logs", ownerFile}},
		{"no owner (kept logs)", "", false, []string{"etcd", "logs"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir, err := os.MkdirTemp("", dirPrefix+"sweep-")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = os.RemoveAll(dir) })
			for _, sub := range []string{"etcd", "logs"} {
				if err := os.Mkdir(filepath.Join(dir, sub), 0o700); err != nil {
					t.Fatal(err)
				}
			}
			if tt.owner != "" {
				if err := os.WriteFile(filepath.Join(dir, ownerFile), []byte(tt.owner), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			// A stand-in for a leftover etcd: a process whose command line names the folder.
			marker := filepath.Join(dir, "etcd", "marker")
			if err := os.WriteFile(marker, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			leftover := exec.Command("tail", "-f", marker)
			if err := leftover.Start(); err != nil {
				t.Fatal(err)
			}
			exited := make(chan struct{})
			go func() { _ = leftover.Wait(); close(exited) }()
			t.Cleanup(func() { _ = leftover.Process.Kill(); <-exited })

			sweepOrphans()

			wait := 300 * time.Millisecond // to see that it keeps running
			if tt.wantKill {
				wait = 5 * time.Second
			}
			select {
			case <-exited:
				if !tt.wantKill {
					t.Errorf("the process using the folder was killed")
				}
			case <-time.After(wait):
				if tt.wantKill {
					t.Errorf("the process using the folder is still running")
				}
			}
			entries, err := os.ReadDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, e := range entries {
				got = append(got, e.Name())
			}
			if !slices.Equal(got, tt.wantFiles) {
				t.Errorf("folder holds %v, want %v", got, tt.wantFiles)
			}
		})
	}
}
