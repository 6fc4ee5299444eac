//go:build mutant_complete_after_cancel

package actors

func init() { mutantCompleteAfterCancel = true }
