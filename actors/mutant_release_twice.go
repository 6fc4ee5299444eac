//go:build mutant_release_twice

package actors

func init() { mutantReleaseTwice = true }
