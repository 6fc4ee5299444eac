//go:build mutant_map_order

package actors

func init() { mutantMapOrder = true }
