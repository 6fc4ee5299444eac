//go:build !linux

package floor

import "syscall"

// childAttr is nothing where there is no parent-death signal: the signal handler of
// withServer is all that stops the child.
func childAttr() *syscall.SysProcAttr { return nil }
