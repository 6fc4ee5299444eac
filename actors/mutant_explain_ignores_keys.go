//go:build mutant_explain_ignores_keys

package actors

func init() { mutantExplainIgnoresKeys = true }
