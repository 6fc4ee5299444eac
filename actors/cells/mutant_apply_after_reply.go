//go:build mutant_apply_after_reply

package cells

func init() { mutantApplyAfterReply = true }
