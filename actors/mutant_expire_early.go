//go:build mutant_expire_early

package actors

func init() { mutantExpireEarly = true }
