//go:build mutant_table_index_lost

package projections

func init() { mutantTableIndexLost = true }
