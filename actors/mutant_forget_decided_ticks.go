//go:build mutant_forget_decided_ticks

package actors

func init() { mutantForgetDecidedTicks = true }
