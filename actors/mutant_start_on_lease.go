//go:build mutant_start_on_lease

package actors

func init() { mutantStartOnLease = true }
