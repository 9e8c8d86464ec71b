package edge

import "syscall"

// sysProcAttr puts a workload process in its own group (so stop reaches its children)
// and has the kernel kill it if the test binary dies without cleaning up.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
