package floor

import "syscall"

// childAttr has the kernel kill the server child when the process that started it dies, by
// whatever signal: a floor server left behind (ppid 1) would hold its port and its records.
func childAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} }
