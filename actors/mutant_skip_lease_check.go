//go:build mutant_skip_lease_check

package actors

func init() { mutantSkipLeaseCheck = true }
