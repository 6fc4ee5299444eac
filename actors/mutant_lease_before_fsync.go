//go:build mutant_lease_before_fsync

package actors

func init() { mutantLeaseBeforeFsync = true }
