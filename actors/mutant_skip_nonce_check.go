//go:build mutant_skip_nonce_check

package actors

func init() { mutantSkipNonceCheck = true }
