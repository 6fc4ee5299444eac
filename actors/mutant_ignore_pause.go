//go:build mutant_ignore_pause

package actors

func init() { mutantIgnorePause = true }
