//go:build mutant_stale_table_copy

package projections

func init() { mutantStaleTableCopy = true }
