//go:build mutant_ignore_stall

package actors

func init() { mutantIgnoreStall = true }
