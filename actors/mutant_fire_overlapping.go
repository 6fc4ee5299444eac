//go:build mutant_fire_overlapping

package actors

func init() { mutantFireOverlapping = true }
