//go:build mutant_healthy_while_unsure

package election

func init() { mutantHealthyWhileUnsure = true }
