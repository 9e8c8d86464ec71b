package edge

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// sweepOrphans cleans up after test binaries that died without closing their clusters
// (go test -timeout panics and never runs t.Cleanup). The workload processes die with
// the binary (Pdeathsig), but envtest starts etcd and kube-apiserver without it, so they
// would keep running and holding ~300 MiB each. A cluster folder whose owner process is
// gone gets its processes killed (SIGKILL: a kube-apiserver whose etcd is gone ignores
// SIGTERM for a long time) and everything but its logs removed.
func sweepOrphans() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), dirPrefix+"*"))
	for _, dir := range dirs {
		data, err := os.ReadFile(filepath.Join(dir, ownerFile))
		if err != nil {
			continue // a closed cluster's kept logs, or a folder being set up
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
		if err != nil || pid <= 0 || processAlive(pid) {
			continue
		}
		killProcessesUsing(dir)
		removeAllButLogs(dir)
	}
}

func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// killProcessesUsing kills the processes whose command line names a path in dir.
func killProcessesUsing(dir string) {
	entries, _ := os.ReadDir("/proc")
	needle := []byte(dir + string(filepath.Separator))
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && bytes.Contains(cmdline, needle) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}
