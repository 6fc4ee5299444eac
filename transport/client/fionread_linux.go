package client

import "golang.org/x/sys/unix"

// fionread asks how many bytes a pipe holds unread (FIONREAD; Linux names it TIOCINQ).
const fionread = unix.TIOCINQ
