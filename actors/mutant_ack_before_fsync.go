//go:build mutant_ack_before_fsync

package actors

func init() { mutantAckBeforeFsync = true }
