//go:build mutant_progress_twice

package actors

func init() { mutantProgressTwice = true }
