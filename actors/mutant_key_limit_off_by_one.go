//go:build mutant_key_limit_off_by_one

package actors

func init() { mutantKeyLimitOffByOne = true }
