//go:build unix && !linux

package edge

import "syscall"

// sysProcAttr puts a workload process in its own group, so stop reaches its children.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
