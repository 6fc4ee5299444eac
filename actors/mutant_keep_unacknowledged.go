//go:build mutant_keep_unacknowledged

package actors

func init() { mutantKeepUnacknowledged = true }
