//go:build mutant_refire_after_crash

package actors

func init() { mutantRefireAfterCrash = true }
